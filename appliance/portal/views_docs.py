"""/docs/: the documentation site the appliance built (portal/docs.py), for every signed-in user. Only files
inside the built site are served: a path that resolves outside it (`..`, a symbolic link) is a 404.

A page of the site carries the portal's Content-Security-Policy with one change: its script-src also allows
the theme's inline scripts, each by the SHA-256 the build recorded (docs.script_hashes), never
'unsafe-inline'. Every other response of the portal keeps the policy that allows no inline script."""

import mimetypes
from pathlib import Path

from django.http import FileResponse, Http404, HttpResponsePermanentRedirect
from django.views import View

from appliance.core import csp
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
    if not candidate.is_file() or candidate.name in docs.NOT_SERVED:
        raise Http404("no such page")
    return candidate


def page_policy(nonce: str, hashes: list[str]) -> str:
    """The portal's policy (core.csp) with `hashes` added to script-src, and nothing else changed."""
    directives = dict(directive.split(" ", 1) for directive in csp.policy(nonce).split("; "))
    directives["script-src"] = " ".join([directives["script-src"], *(f"'{value}'" for value in hashes)])
    return "; ".join(f"{name} {value}" for name, value in directives.items())


class DocsView(CapabilityMixin, View):
    capability = "inventory.view"  # every role: the documentation holds no data of the appliance

    def get(self, request, path=""):
        site = docs.ensure_built()
        target = resolve(site, path)
        if target.name == "index.html" and path and not path.endswith(("/", "index.html")):
            # Relative links of a page resolve against its folder: /docs/operator -> /docs/operator/.
            return HttpResponsePermanentRedirect(request.path + "/")
        content_type, _ = mimetypes.guess_type(target.name)
        response = FileResponse(open(target, "rb"), content_type=content_type or "application/octet-stream")
        if content_type == "text/html":
            response["Content-Security-Policy"] = page_policy(getattr(request, csp.NONCE_ATTRIBUTE, ""),
                                                              docs.script_hashes(site))
        return response
