"""The OpenAPI schema of the API: drf-spectacular's, with every operation's error responses and the
one error body they share (appliance.core.api.exception_handler writes it)."""

from django.core.exceptions import FieldDoesNotExist
from drf_spectacular import openapi
from rest_framework import serializers
from rest_framework.permissions import AllowAny

from .filters import INTEGER_MAX, INTEGER_MIN

NO_NUL = "^[^\\x00]*$"


class ErrorDetailSerializer(serializers.Serializer):
    status = serializers.IntegerField(help_text="the HTTP status")
    code = serializers.CharField(help_text="machine-readable: invalid, not_found, permission_denied, ...")
    message = serializers.CharField(help_text="what went wrong, naming the field or place")
    fields = serializers.DictField(required=False, help_text="validation errors: field -> messages")
    errors = serializers.ListField(child=serializers.JSONField(), required=False,
                                   help_text="every error, where there are several (with its place: file, line, "
                                             "path, where it has one)")


class ErrorSerializer(serializers.Serializer):
    """The one error body of every API error."""

    error = ErrorDetailSerializer()
    request_id = serializers.CharField(help_text="the server's id of the request (also the X-Request-ID header)")


ERROR_DESCRIPTIONS = {
    "400": "invalid request: a parameter or the body is wrong (the message names it)",
    "401": "authentication required (no credentials, or an invalid or expired token)",
    "403": "your role does not allow this",
    "404": "no such object (or page)",
    "409": "the object's state does not allow this",
    "429": "too many requests: wait and retry",
}


class AutoSchema(openapi.AutoSchema):
    """drf-spectacular's schema with every operation's error responses and their one body:
    401 and 403 where authentication is required, 404 where a path names an object or a list is
    paged, 400 where the operation takes parameters or a body; a view's own error responses
    (409, 429, ...) get the same body."""

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        parameters = operation.get("parameters", [])
        statuses = set()
        if not any(isinstance(permission, AllowAny) for permission in self.view.get_permissions()):
            statuses |= {"401", "403"}
        if any(parameter["in"] == "path" for parameter in parameters) or self._paged():
            statuses.add("404")
        if "requestBody" in operation or any(parameter["in"] == "query" for parameter in parameters):
            statuses.add("400")
        for parameter in parameters:
            if parameter["in"] != "query":
                continue
            if not parameter.get("required"):
                parameter["allowEmptyValue"] = True  # an empty filter or page value means none
            value = parameter.get("schema", {})
            if value.get("type") == "integer":
                value.setdefault("minimum", INTEGER_MIN)
                value.setdefault("maximum", INTEGER_MAX)
            elif value.get("type") == "string" and not {"enum", "format", "pattern"} & set(value):
                value["pattern"] = NO_NUL  # a NUL character in any query parameter is refused (querylimits)
        responses = operation["responses"]
        error_body = self._get_response_for_code(ErrorSerializer, "400")["content"]["application/json"]
        for status in statuses - set(responses):
            responses[status] = {"description": ERROR_DESCRIPTIONS[status]}
        for status, response in responses.items():
            if status >= "400" and not response.get("content"):
                response.setdefault("description", ERROR_DESCRIPTIONS.get(status, "error"))
                response["content"] = {"application/json": error_body}
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        # An optional e-mail address or URL may be empty, which no string format admits.
        for name, field in serializer.fields.items():
            prop = schema.get("properties", {}).get(field.field_name or name)
            if prop and prop.get("format") in ("email", "uri") and _may_be_blank(field):
                del prop["format"]
        return schema

    def _paged(self) -> bool:
        return self.method == "GET" and self._is_list_view() and self._get_paginator() is not None


def _may_be_blank(field) -> bool:
    if getattr(field, "allow_blank", False):
        return True
    model = getattr(getattr(getattr(field, "parent", None), "Meta", None), "model", None)
    source = getattr(field, "source", "") or ""
    if model is None or not source or "." in source:
        return False
    try:
        return model._meta.get_field(source).blank
    except FieldDoesNotExist:  # a property or method, not a model field
        return False
