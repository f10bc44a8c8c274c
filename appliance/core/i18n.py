"""The language of each request: the portal speaks the reader's language, machines read English.

The portal follows the language cookie that Django's set_language view sets (the switch in the
frame), then the browser's Accept-Language, then LANGUAGE_CODE. The REST API (/api/) always
answers in LANGUAGE_CODE whatever the client asks: its messages are read by programs and end up in
audit records, which stay English. Once a portal response is made the default language comes back,
so that what the audit middleware writes after the view (a denial's reason, a lazy message) is
English too.
"""

from django.conf import settings
from django.middleware.locale import LocaleMiddleware
from django.utils import translation

API_PREFIX = "/api/"


class PortalLocaleMiddleware(LocaleMiddleware):
    def process_request(self, request):
        if request.path.startswith(API_PREFIX):
            translation.activate(settings.LANGUAGE_CODE)
            request.LANGUAGE_CODE = settings.LANGUAGE_CODE
            return
        super().process_request(request)

    def process_response(self, request, response):
        if not request.path.startswith(API_PREFIX):
            response = super().process_response(request, response)
        translation.activate(settings.LANGUAGE_CODE)
        return response
