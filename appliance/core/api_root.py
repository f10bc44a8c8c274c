"""The REST API's roots: GET /api/ names the versions, GET /api/v1/ lists version 1's endpoints.

The version is in the path (/api/v1/...). Paths under /api/ outside a version (the unversioned
/api/inventory/... of earlier releases) are a 404 whose message names the versioned path, not a
redirect: a 308 would make every unversioned path a permanent alias of v1, and a client that followed
it would silently stay on v1 when a later version appears. No client depends on the unversioned paths
yet, so the honest answer is "not here; look under /api/v1/".
"""

import re

from django.http import JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_safe
from rest_framework.routers import APIRootView

API_PREFIX = "/api/"
CURRENT_VERSION = "v1"
# version -> its root's url name. A later version adds itself here, with its own url list.
API_VERSIONS = {"v1": "api-v1-root"}


@require_safe
def api_index(request):
    """The versions the API speaks and where each begins. Open to all, like /health/: it names paths
    every client can read in the README, and a client needs it before it has signed in."""
    versions = [{"version": version, "status": "current" if version == CURRENT_VERSION else "supported",
                 "url": request.build_absolute_uri(reverse(name))}
                for version, name in API_VERSIONS.items()]
    return JsonResponse({
        "versions": versions,
        "current": CURRENT_VERSION,
        "links": {
            "root": request.build_absolute_uri(reverse(API_VERSIONS[CURRENT_VERSION])),
            "schema": request.build_absolute_uri(reverse("schema")),
            "docs": request.build_absolute_uri(reverse("schema-docs")),
            "redoc": request.build_absolute_uri(reverse("schema-redoc")),
        },
    })


def unversioned_hint(path: str) -> str | None:
    """For a path under /api/ that is not under a version: the message that names the path to use."""
    if not path.startswith(API_PREFIX):
        return None
    rest = path[len(API_PREFIX):]
    first = rest.split("/", 1)[0]
    if not rest or first in API_VERSIONS:
        return None
    if re.fullmatch(r"v[0-9]+", first):
        return f"Not found. This appliance's API has no version {first} (GET {API_PREFIX} lists the versions)."
    return (f"Not found. The API's paths carry their version: {API_PREFIX}{CURRENT_VERSION}/{rest} "
            f"(GET {API_PREFIX} lists the versions).")


class ApiV1RootView(APIRootView):
    """Version 1 of the appliance's REST API: each app's endpoints and the OpenAPI schema."""

    capability = "portal.view"
    api_root_dict = {
        "inventory": "inventory-api-root",
        "accounts": "accounts-api-root",
        "audit": "audit-api-root",
        "provisioning": "provisioning-api-root",
        "telemetry": "telemetry-api-root",
        "analytics": "analytics-api-root",
        "lending": "lending-api-root",
        "partitioning": "partitioning-api-root",
        "lifecycle": "lifecycle-api-root",
        "schema": "schema",
    }
