import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
application = get_wsgi_application()

# A process that serves requests is also the beat when no broker is configured (dispatch.py).
from appliance.core.dispatch import start_embedded_beat  # noqa: E402

start_embedded_beat()
