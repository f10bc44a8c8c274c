"""Shared pieces of every app's REST API: pagination and one error body for all errors.

Error body: {"error": {"status": 400, "code": "invalid", "message": "...", "fields": {...}},
             "request_id": "..."}

A service's refusal that means "the object is in the wrong state" (a run already active or already ended,
a plan already decided, a version in the wrong stage) is a StateConflict: every API answers it 409, here
(refusal_status for the views that build their own error body, exception_handler for the rest); the
schema's 409 says so for every operation that may answer it.
"""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, pagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from .conflicts import StateConflict


def refusal_status(exc: Exception, default: int = 400) -> int:
    """The status of a service's refusal: 409 for a StateConflict, `default` otherwise."""
    return 409 if isinstance(exc, StateConflict) else default


class StrictPageSize:
    """`page_size` is a whole number from 1 to max_page_size, or a 400 naming it (DRF's paginators
    silently fall back to the default on anything else); empty means the default."""

    page_size_query_param = "page_size"
    max_page_size = 1000

    def get_page_size(self, request):
        value = request.query_params.get(self.page_size_query_param, "")
        if not value.strip():
            return self.page_size
        from .filters import parse_integer

        try:
            return parse_integer(value, minimum=1, maximum=self.max_page_size)
        except DjangoValidationError as exc:
            raise exceptions.ValidationError({self.page_size_query_param: exc.messages}) from None

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1, maximum=self.max_page_size)
            elif parameter["name"] == getattr(self, "page_query_param", None):
                parameter["schema"].update(minimum=1)
        return parameters


class Pagination(StrictPageSize, pagination.PageNumberPagination):
    """Pages by number: `page` from 1 (a page past the last is a 404), `page_size` up to 1000."""

    def get_page_number(self, request, paginator):
        value = request.query_params.get(self.page_query_param, "")
        if value in self.last_page_strings:
            return value
        if not value.strip():
            return 1
        from .filters import parse_integer

        try:
            return parse_integer(value, minimum=1)
        except DjangoValidationError as exc:
            raise exceptions.ValidationError({self.page_query_param: exc.messages}) from None


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
    elif isinstance(exc, StateConflict) and not isinstance(exc, exceptions.APIException):
        response = error_response(409, "conflict", str(exc), context.get("request"))
        return response
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
