"""Query strings are untrusted input: a NUL character in any parameter is a 400 naming it.

PostgreSQL cannot store or compare text holding NUL, so a parameter carrying one reached the
database and failed there (a 500) wherever a view used it unchecked. Refusing it here, once, covers
every page and API view.
"""

from django.http import JsonResponse
from django.shortcuts import render

from .views import API_PREFIX


class RefuseNulInQueryMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                return self.refuse(request, name.replace("\x00", "\\x00"))
        return self.get_response(request)

    @staticmethod
    def refuse(request, name: str):
        message = f"query parameter {name}: null characters are not allowed"
        if request.path.startswith(API_PREFIX):
            body = {"error": {"status": 400, "code": "invalid", "message": message,
                              "fields": {name: ["Null characters are not allowed."]}},
                    "request_id": getattr(request, "request_id", "")}
            return JsonResponse(body, status=400)
        return render(request, "400.html", {"message": message}, status=400)
