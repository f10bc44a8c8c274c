"""REST API of accounts: users (Administrators manage, Auditors read), the caller's own account,
and API tokens in exchange for a username and password."""

from django.contrib.auth import authenticate, get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from appliance import audit
from appliance.core.api import error_response
from appliance.core.roles import Role, capabilities_of

from . import services

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
            user = services.create_user(**params.validated_data)
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


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False, write_only=True)


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField()
    username = serializers.CharField()
    role = serializers.CharField()


class TokenView(APIView):
    """An API token for a username and password (send it as `Authorization: Token <token>`).

    The one API endpoint open to anonymous callers: it is where they stop being anonymous. Failed
    attempts count towards the same per-username lockout as the login page, and the endpoint is
    rate-limited per address.
    """

    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "login"

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
        with transaction.atomic():
            token, created = Token.objects.get_or_create(user=user)
            audit.record("auth.token.create", target=user, actor=user, details={"new": created})
        return Response({"token": token.key, "username": user.username, "role": user.role})
