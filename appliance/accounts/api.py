"""REST API of accounts: users (Administrators manage, Auditors read), the caller's own account,
and API tokens in exchange for a username and password."""

from django.contrib.auth import authenticate, get_user_model, update_session_auth_hash
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from appliance.core.api import error_response
from appliance.core.roles import Role, capabilities_of
from appliance.core.throttling import LoginRateThrottle

from . import services, tokens
from .models import ApiToken

User = get_user_model()


class UserSerializer(serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="accounts-user-detail")
    role_label = serializers.CharField(read_only=True)

    class Meta:
        model = User
        fields = ["id", "url", "username", "email", "role", "role_label", "is_active", "last_login", "date_joined"]
        read_only_fields = fields


class UserCreateSerializer(serializers.Serializer):
    username = serializers.RegexField(r"^[\w.@+-]+\Z", max_length=150)
    email = serializers.EmailField(required=False, allow_blank=True)
    role = serializers.ChoiceField(choices=Role.choices)
    password = serializers.CharField(write_only=True, style={"input_type": "password"}, trim_whitespace=False)

    def validate_username(self, value):
        if User.objects.filter(username=value).exists():
            raise serializers.ValidationError("a user with this username already exists")
        return value


class UserUpdateSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices, required=False)
    is_active = serializers.BooleanField(required=False)


class MeSerializer(UserSerializer):
    capabilities = serializers.SerializerMethodField()

    class Meta(UserSerializer.Meta):
        fields = [*UserSerializer.Meta.fields, "capabilities"]
        read_only_fields = fields

    def get_capabilities(self, user) -> list[str]:
        return sorted(capabilities_of(user))


def _service_error(exc: Exception) -> serializers.ValidationError:
    """Services name the field in front of the message ("role: ..."); the API answers with that field."""
    if isinstance(exc, DjangoValidationError):
        return serializers.ValidationError({"password": list(exc.messages)})
    field, _, message = str(exc).partition(": ")
    return serializers.ValidationError({field: [message]} if message else {"non_field_errors": [str(exc)]})


class UserViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                  mixins.UpdateModelMixin, viewsets.GenericViewSet):
    """Accounts. Users are deactivated, never deleted: the audit log keeps pointing at them."""

    capability = "accounts.view"
    write_capability = "accounts.manage"
    queryset = User.objects.order_by("username")
    serializer_class = UserSerializer
    filterset_fields = ["role", "is_active"]
    search_fields = ["username", "email"]
    ordering_fields = ["username", "role", "last_login", "date_joined"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_serializer_class(self):
        return {"create": UserCreateSerializer, "partial_update": UserUpdateSerializer}.get(
            self.action, UserSerializer)

    @extend_schema(request=UserCreateSerializer, responses={201: UserSerializer})
    def create(self, request, *args, **kwargs):
        params = UserCreateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            user = services.create_user(**params.validated_data, created_by=request.user)
        except (ValueError, DjangoValidationError) as exc:
            raise _service_error(exc) from None
        return Response(UserSerializer(user, context=self.get_serializer_context()).data,
                        status=status.HTTP_201_CREATED)

    @extend_schema(request=UserUpdateSerializer, responses={200: UserSerializer})
    def partial_update(self, request, *args, **kwargs):
        """Change a user's role or deactivate (reactivate) the account."""
        user = self.get_object()
        params = UserUpdateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            with transaction.atomic():
                if "role" in params.validated_data and params.validated_data["role"] != user.role:
                    services.set_role(user, params.validated_data["role"])
                if "is_active" in params.validated_data and params.validated_data["is_active"] != user.is_active:
                    services.set_active(user, params.validated_data["is_active"], acting_user=request.user)
        except ValueError as exc:
            raise _service_error(exc) from None
        return Response(UserSerializer(user, context=self.get_serializer_context()).data)


class MeView(APIView):
    """The account making the request, with the capabilities its role grants."""

    capability = "portal.view"

    @extend_schema(responses={200: MeSerializer})
    def get(self, request):
        return Response(MeSerializer(request.user, context={"request": request}).data)


class PasswordChangeSerializer(serializers.Serializer):
    old_password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False, write_only=True)
    new_password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False, write_only=True)


class OwnPasswordView(APIView):
    """Change your own password (any role). The current password is required; the new one must pass the
    password rules. Recorded as accounts.password.change; a browser session stays logged in."""

    capability = write_capability = "accounts.self"

    @extend_schema(request=PasswordChangeSerializer, responses={
        204: OpenApiResponse(description="password changed"),
        400: OpenApiResponse(description="wrong current password, or the new one breaks a password rule")})
    def post(self, request):
        params = PasswordChangeSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            services.change_own_password(request.user, params.validated_data["old_password"],
                                         params.validated_data["new_password"], request)
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"new_password": list(exc.messages)}) from None
        except ValueError as exc:
            raise _service_error(exc) from None
        if hasattr(request, "session") and request.session.session_key:
            update_session_auth_hash(request._request, request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


# A token's name: printable characters only (the schema says so too, as a pattern).
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
PRINTABLE_MESSAGE = "at most 100 printable characters"


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False, write_only=True)
    name = serializers.RegexField(PRINTABLE, max_length=100, required=False, allow_blank=True,
                                  error_messages={"invalid": PRINTABLE_MESSAGE},
                                  help_text="a label to recognise the token by in lists")


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="shown this once; only its digest is stored")
    id = serializers.IntegerField()
    prefix = serializers.CharField()
    expires = serializers.DateTimeField()
    username = serializers.CharField()
    role = serializers.CharField()


class TokenView(APIView):
    """A new API token for a username and password (send it as `Authorization: Token <token>`).

    Every call issues a new token, valid APPLIANCE_TOKEN_TTL_DAYS days; list and revoke them at
    /api/v1/accounts/tokens/. The one API endpoint open to anonymous callers: it is where they stop being
    anonymous. Failed attempts count towards the same per-username lockout as the login page, and
    the endpoint shares the login page's per-address rate limit.
    """

    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [LoginRateThrottle]

    @extend_schema(request=TokenRequestSerializer, responses={
        200: TokenSerializer, 400: OpenApiResponse(description="username or password missing"),
        401: OpenApiResponse(description="wrong username or password"),
        429: OpenApiResponse(description="too many attempts, or the username is locked")})
    def post(self, request):
        params = TokenRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        user = authenticate(request=request, username=params.validated_data["username"],
                            password=params.validated_data["password"])
        if getattr(request, "axes_locked_out", False):
            return error_response(429, "locked_out", "too many failed logins for this username; try again later",
                                  request)
        if user is None:
            return error_response(401, "authentication_failed", "wrong username or password", request)
        try:
            token, text = tokens.issue_token(user, params.validated_data.get("name", ""), via="password")
        except tokens.TokenError as exc:
            raise _service_error(exc) from None
        return Response({"token": text, "id": token.pk, "prefix": token.prefix, "expires": token.expires,
                         "username": user.username, "role": user.role})


class ApiTokenSerializer(serializers.ModelSerializer):
    """A token as lists show it: never its secret (which is not stored)."""

    username = serializers.CharField(source="user.username", read_only=True)
    revoked_by = serializers.CharField(source="revoked_by.username", read_only=True, default=None, allow_null=True)
    state = serializers.CharField(read_only=True)

    class Meta:
        model = ApiToken
        fields = ["id", "username", "name", "prefix", "state", "created", "expires", "last_used", "revoked",
                  "revoked_by"]
        read_only_fields = fields


class ApiTokenCreateSerializer(serializers.Serializer):
    name = serializers.RegexField(PRINTABLE, max_length=100, required=False, allow_blank=True,
                                  error_messages={"invalid": PRINTABLE_MESSAGE})


class NewApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="shown this once; only its digest is stored")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class ApiTokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """API tokens: your own; Administrators and Auditors see everyone's, Administrators revoke anyone's.
    A token is made for the caller only (never for somebody else) and its secret is shown once."""

    capability = write_capability = "accounts.self"
    serializer_class = ApiTokenSerializer
    filterset_fields = ["user"]
    ordering_fields = ["created", "expires", "last_used"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no caller to scope to
            return ApiToken.objects.none()
        return tokens.visible_to(self.request.user)

    @extend_schema(request=ApiTokenCreateSerializer, responses={201: NewApiTokenSerializer})
    def create(self, request):
        params = ApiTokenCreateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            token, text = tokens.issue_token(request.user, params.validated_data.get("name", ""))
        except tokens.TokenError as exc:
            raise _service_error(exc) from None
        token.token = text
        return Response(NewApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: ApiTokenSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        """Revoke the token at once; its row stays, marked revoked, as evidence."""
        token = self.get_object()
        try:
            token = tokens.revoke_token(token, request.user)
        except PermissionError as exc:
            raise exceptions.PermissionDenied(str(exc)) from None
        except tokens.TokenError as exc:
            raise serializers.ValidationError({"non_field_errors": [str(exc)]}) from None
        return Response(ApiTokenSerializer(token).data)
