"""Content-Security-Policy: the portal loads scripts, styles, images and fonts from itself only.

Django 5.2 has no CSP of its own. Every response gets the policy below unless it set one; a page
that needs an inline <style> (the standalone acceptance report, the API reference's own style)
carries the request's nonce on it (`request.csp_nonce`). No inline script is allowed anywhere:
the portal's scripts are static files, htmx reads its settings from attributes.
"""

import secrets

NONCE_ATTRIBUTE = "csp_nonce"


def policy(nonce: str, *, inline_styles: bool = False) -> str:
    """The policy; `inline_styles` only for a page whose script library writes <style> elements at
    run time without a nonce (the Redoc API reference). Scripts stay strict everywhere."""
    directives = {
        "default-src": "'self'",
        "script-src": "'self'",
        "style-src": "'self' 'unsafe-inline'" if inline_styles else f"'self' 'nonce-{nonce}'",
        "worker-src": "'self' blob:",
        "img-src": "'self' data:",
        "font-src": "'self'",
        "connect-src": "'self'",
        "object-src": "'none'",
        "base-uri": "'none'",
        "form-action": "'self'",
        "frame-ancestors": "'none'",
    }
    return "; ".join(f"{name} {value}" for name, value in directives.items())


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        nonce = secrets.token_urlsafe(18)
        setattr(request, NONCE_ATTRIBUTE, nonce)
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", policy(nonce))
        return response
