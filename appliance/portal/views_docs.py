"""/docs/: the documentation site the appliance built (portal/docs.py), for every signed-in user. Only files
inside the built site are served: a path that resolves outside it (`..`, a symbolic link) is a 404."""

import mimetypes
from pathlib import Path

from django.http import FileResponse, Http404, HttpResponsePermanentRedirect
from django.views import View

from appliance.core.permissions import CapabilityMixin

from . import docs


def resolve(site: Path, path: str) -> Path:
    """The file `path` names inside `site` (a folder's index.html), or Http404."""
    root = site.resolve()
    if "\0" in path:
        raise Http404("no such page")
    candidate = (root / path).resolve()
    if not candidate.is_relative_to(root):
        raise Http404("no such page")
    if candidate.is_dir():
        candidate = candidate / "index.html"
    if not candidate.is_file() or candidate.name == docs.STAMP_NAME:
        raise Http404("no such page")
    return candidate


class DocsView(CapabilityMixin, View):
    capability = "inventory.view"  # every role: the documentation holds no data of the appliance

    def get(self, request, path=""):
        site = docs.ensure_built()
        target = resolve(site, path)
        if target.name == "index.html" and path and not path.endswith(("/", "index.html")):
            # Relative links of a page resolve against its folder: /docs/operator -> /docs/operator/.
            return HttpResponsePermanentRedirect(request.path + "/")
        content_type, _ = mimetypes.guess_type(target.name)
        return FileResponse(open(target, "rb"), content_type=content_type or "application/octet-stream")
