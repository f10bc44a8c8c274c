"""The appliance's own error pages: inside the portal frame, never a debug page, the 403 message kept;
under /api/ the API's one error body."""

import json

import pytest
from django.test import Client, override_settings
from django.urls import path

from appliance.core.roles import Role
from appliance.urls import urlpatterns as appliance_urlpatterns

pytestmark = pytest.mark.django_db


def failing_view(request):
    raise RuntimeError("database password is hunter2")


urlpatterns = [*appliance_urlpatterns, path("boom/", failing_view), path("api/boom/", failing_view)]
handler500 = "appliance.core.views.server_error"
handler404 = "appliance.core.views.page_not_found"


def test_unknown_page_is_the_appliance_404_in_the_portal_frame(client_for):
    response = client_for(Role.OPERATOR).get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "<title>Page not found · Appliance management</title>" in html
    assert 'data-testid="error-page"' in html
    assert "There is no page at <code>/no-such-page/</code>." in html
    # the portal frame: the top bar with the signed-in user and the main navigation
    assert 'data-testid="current-user">operator-user</span>' in html
    assert 'aria-label="Main"' in html


def test_unknown_api_url_is_the_api_error_body():
    response = Client().get("/api/v1/no-such-endpoint/")
    assert response.status_code == 404
    assert json.loads(response.content)["error"] == {"status": 404, "code": "not_found", "message": "Not found."}


def test_portal_403_page_keeps_the_message(client_for):
    response = client_for(Role.OPERATOR).get("/audit/")
    assert response.status_code == 403
    html = response.content.decode()
    assert "<title>Not allowed · Appliance management</title>" in html
    assert '<p data-testid="error-message">Your role does not allow this.</p>' in html
    assert 'data-testid="current-user">operator-user</span>' in html


@override_settings(ROOT_URLCONF=__name__, DEBUG=False)
def test_server_error_is_the_appliance_500_page_without_details():
    client = Client(raise_request_exception=False)
    response = client.get("/boom/")
    assert response.status_code == 500
    html = response.content.decode()
    assert "<title>Server error · Appliance management</title>" in html
    assert f"under request id <code>{response['X-Request-ID']}</code>" in html
    assert "hunter2" not in html and "Traceback" not in html
    api = client.get("/api/boom/")
    assert api.status_code == 500
    body = json.loads(api.content)
    assert body["error"]["code"] == "server_error" and "hunter2" not in api.content.decode()


def test_the_404_page_in_the_default_mode_is_not_django_technical_page(settings):
    settings.DEBUG = False
    response = Client().get("/inventory/no-such-thing/at-all/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "<title>Page not found · Appliance management</title>" in html
    assert "URLconf" not in html and "Using the URLconf" not in html
    assert '<a class="skip-link" href="#main">Skip to content</a>' in html


def test_error_pages_follow_the_reader_language(client_for):
    response = client_for(Role.OPERATOR).get("/audit/", HTTP_ACCEPT_LANGUAGE="ru")
    assert response.status_code == 403
    assert '<html lang="ru">' in response.content.decode()


def test_the_403_page_of_the_api_stays_english(client_for):
    response = client_for(Role.OPERATOR).get("/api/v1/audit/records/", HTTP_ACCEPT_LANGUAGE="ru")
    assert response.status_code == 403
    assert json.loads(response.content)["error"]["message"] == "Your role does not allow this."
