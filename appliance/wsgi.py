import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
application = get_wsgi_application()

# The beat when no broker is configured, and start-up objects out of the collector's way (serving.py).
from appliance.core.serving import prepare_serving_process  # noqa: E402

prepare_serving_process()
