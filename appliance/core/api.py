"""Shared pieces of every app's REST API: pagination and one error body for all errors.

Error body: {"error": {"status": 400, "code": "invalid", "message": "...", "fields": {...}},
             "request_id": "..."}
"""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, pagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class Pagination(pagination.PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 1000


def _message(detail) -> str:
    if isinstance(detail, list):
        return "; ".join(_message(d) for d in detail)
    if isinstance(detail, dict):
        if set(detail) == {"detail"}:
            return _message(detail["detail"])
        return "; ".join(f"{k}: {_message(v)}" for k, v in detail.items())
    return str(detail)


def exception_handler(exc, context):
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    code = getattr(exc, "default_code", "error")
    if isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        if isinstance(codes, str):
            code = codes
    body = {"status": response.status_code, "code": code, "message": _message(detail)}
    if isinstance(detail, dict) and not set(detail) <= {"detail"}:
        body["fields"] = detail
    request = context.get("request")
    response.data = {"error": body, "request_id": getattr(request, "request_id", "") if request else ""}
    return response


def error_response(status: int, code: str, message: str, request=None, **extra) -> Response:
    body = {"status": status, "code": code, "message": message, **extra}
    return Response({"error": body, "request_id": getattr(request, "request_id", "")}, status=status)
