from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import PasswordChangeForm
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render, resolve_url
from django.urls import reverse_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import View
from django.views.generic import FormView, ListView

from appliance.core.permissions import CapabilityMixin
from appliance.core.roles import Role
from appliance.core.throttling import LoginThrottleMixin

from . import services, tokens

User = get_user_model()


class LoginView(LoginThrottleMixin, auth_views.LoginView):
    """Password attempts share the token endpoint's per-address rate limit, on top of the
    per-username lockout."""

    template_name = "accounts/login.html"
    redirect_authenticated_user = True

    def get_default_redirect_url(self):
        # An ML engineer works in the model registry: without a ?next=, they land on the model list.
        if getattr(self.request.user, "role", None) == Role.ML_ENGINEER:
            return resolve_url("lifecycle:models")
        return super().get_default_redirect_url()


class LogoutView(auth_views.LogoutView):
    http_method_names = ["post", "options"]


class UserListView(CapabilityMixin, ListView):
    """Every account; Administrators also change roles and (de)activate accounts here."""

    capability = "accounts.view"
    template_name = "accounts/user_list.html"
    context_object_name = "accounts"
    queryset = User.objects.order_by("username")

    def get_context_data(self, **kwargs):
        return super().get_context_data(roles=Role.choices, **kwargs)


class UserCreateForm(forms.Form):
    username = forms.RegexField(
        label=gettext_lazy("Username"), regex=r"^[\w.@+-]+\Z", max_length=150,
        error_messages={"invalid": gettext_lazy("letters, digits and @ . + - _ only")})
    email = forms.EmailField(label=gettext_lazy("Email"), required=False)
    role = forms.ChoiceField(label=gettext_lazy("Role"), choices=Role.choices, initial=Role.VIEWER)
    password1 = forms.CharField(label=gettext_lazy("Password"), strip=False, widget=forms.PasswordInput(
        attrs={"autocomplete": "new-password"}))
    password2 = forms.CharField(label=gettext_lazy("Password again"), strip=False, widget=forms.PasswordInput(
        attrs={"autocomplete": "new-password"}))

    def clean_username(self):
        username = self.cleaned_data["username"]
        if User.objects.filter(username=username).exists():
            raise ValidationError(_("a user with this username already exists"))
        return username

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("password1") and cleaned.get("password1") != cleaned.get("password2"):
            self.add_error("password2", _("the two passwords differ"))
        return cleaned


class UserCreateView(CapabilityMixin, FormView):
    capability = write_capability = "accounts.manage"
    template_name = "accounts/user_form.html"
    form_class = UserCreateForm
    success_url = reverse_lazy("accounts:user-list")

    def form_valid(self, form):
        data = form.cleaned_data
        try:
            user = services.create_user(data["username"], data["role"], data["password1"], email=data["email"],
                                        created_by=self.request.user)
        except ValidationError as exc:
            form.add_error("password1", exc)
            return self.form_invalid(form)
        except ValueError as exc:
            field, _sep, message = str(exc).partition(": ")
            form.add_error(field if field in form.fields else None, message or str(exc))
            return self.form_invalid(form)
        messages.success(self.request, _("Created %(username)s (%(role)s).") % {
            "username": user.username, "role": user.role_label})
        return super().form_valid(form)


class UserUpdateView(CapabilityMixin, View):
    """Change one account's role, or deactivate / reactivate it (form posts from the user list)."""

    write_capability = "accounts.manage"
    http_method_names = ["post"]

    def post(self, request, pk):
        user = get_object_or_404(User, pk=pk)
        done = []
        try:
            with transaction.atomic():
                if request.POST.get("role", user.role) != user.role:
                    services.set_role(user, request.POST["role"])
                    done.append(_("%(username)s is now %(role)s.") % {"username": user.username, "role": user.role_label})
                if "is_active" in request.POST and (request.POST["is_active"] == "true") != user.is_active:
                    services.set_active(user, request.POST["is_active"] == "true", acting_user=request.user)
                    done.append((_("%(username)s reactivated.") if user.is_active else _("%(username)s deactivated."))
                                % {"username": user.username})
        except ValueError as exc:
            messages.error(request, f"{user.username}: {exc}")
        else:
            for message in done:
                messages.success(request, message)
        return redirect("accounts:user-list")


class OwnPasswordForm(PasswordChangeForm):
    """Django's form, with the current password checked as a password attempt (services)."""

    def __init__(self, user, *args, request=None, **kwargs):
        self.request = request
        super().__init__(user, *args, **kwargs)

    def clean_old_password(self):
        old_password = self.cleaned_data["old_password"]
        try:
            services.check_current_password(self.user, old_password, self.request)
        except ValueError as exc:
            raise ValidationError(str(exc).partition(": ")[2], code="password_incorrect") from None
        return old_password


class OwnPasswordView(CapabilityMixin, auth_views.PasswordChangeView):
    """Any user changes their own password (current password first; the password rules apply).
    The User model records accounts.password.change; the session stays logged in."""

    capability = write_capability = "accounts.self"
    template_name = "accounts/password_change.html"
    form_class = OwnPasswordForm
    success_url = reverse_lazy("portal:overview")

    def get_form_kwargs(self):
        return {**super().get_form_kwargs(), "request": self.request}

    def form_valid(self, form):
        response = super().form_valid(form)
        messages.success(self.request, _("Your password was changed."))
        return response


class TokenCreateForm(forms.Form):
    name = forms.CharField(label=gettext_lazy("Name"), max_length=100, required=False,
                           help_text=gettext_lazy("to recognise the token by later"))


class TokenListView(CapabilityMixin, View):
    """API tokens: your own (Administrators and Auditors: everyone's). A new token's secret is shown in
    the response to its creation, once; it is not kept anywhere to show again."""

    capability = write_capability = "accounts.self"
    template_name = "accounts/token_list.html"

    def get(self, request, form=None, new_token=None):
        return render(request, self.template_name, {
            "tokens": tokens.visible_to(request.user), "form": form or TokenCreateForm(), "new_token": new_token,
            "everyone": tokens.visible_to(request.user).exclude(user=request.user).exists()})

    def post(self, request):
        form = TokenCreateForm(request.POST)
        if not form.is_valid():
            return self.get(request, form=form)
        try:
            _token, text = tokens.issue_token(request.user, form.cleaned_data["name"], via="portal")
        except tokens.TokenError as exc:
            form.add_error("name", str(exc).partition(": ")[2] or str(exc))
            return self.get(request, form=form)
        response = self.get(request, new_token=text)
        response["Cache-Control"] = "no-store"
        return response


class TokenRevokeView(CapabilityMixin, View):
    write_capability = "accounts.self"
    http_method_names = ["post"]

    def post(self, request, pk):
        token = get_object_or_404(tokens.visible_to(request.user), pk=pk)
        try:
            tokens.revoke_token(token, request.user)
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from None
        except tokens.TokenError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, _("Revoked %(token)s of %(username)s.") % {
                "token": token.label, "username": token.user.username})
        return redirect("accounts:token-list")
