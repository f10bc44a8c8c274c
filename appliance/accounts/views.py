from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.core.exceptions import ValidationError
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse_lazy
from django.views import View
from django.views.generic import FormView, ListView

from appliance.core.permissions import CapabilityMixin
from appliance.core.roles import Role

from . import services

User = get_user_model()


class LoginView(auth_views.LoginView):
    template_name = "accounts/login.html"
    redirect_authenticated_user = True


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
    username = forms.RegexField(regex=r"^[\w.@+-]+\Z", max_length=150,
                                error_messages={"invalid": "letters, digits and @ . + - _ only"})
    email = forms.EmailField(required=False)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)
    password1 = forms.CharField(label="Password", strip=False, widget=forms.PasswordInput(
        attrs={"autocomplete": "new-password"}))
    password2 = forms.CharField(label="Password again", strip=False, widget=forms.PasswordInput(
        attrs={"autocomplete": "new-password"}))

    def clean_username(self):
        username = self.cleaned_data["username"]
        if User.objects.filter(username=username).exists():
            raise ValidationError("a user with this username already exists")
        return username

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("password1") and cleaned.get("password1") != cleaned.get("password2"):
            self.add_error("password2", "the two passwords differ")
        return cleaned


class UserCreateView(CapabilityMixin, FormView):
    capability = write_capability = "accounts.manage"
    template_name = "accounts/user_form.html"
    form_class = UserCreateForm
    success_url = reverse_lazy("accounts:user-list")

    def form_valid(self, form):
        data = form.cleaned_data
        try:
            user = services.create_user(data["username"], data["role"], data["password1"], email=data["email"])
        except ValidationError as exc:
            form.add_error("password1", exc)
            return self.form_invalid(form)
        except ValueError as exc:
            field, _, message = str(exc).partition(": ")
            form.add_error(field if field in form.fields else None, message or str(exc))
            return self.form_invalid(form)
        messages.success(self.request, f"Created {user.username} ({user.role_label}).")
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
                    done.append(f"{user.username} is now {user.role_label}.")
                if "is_active" in request.POST and (request.POST["is_active"] == "true") != user.is_active:
                    services.set_active(user, request.POST["is_active"] == "true", acting_user=request.user)
                    done.append(f"{user.username} {'reactivated' if user.is_active else 'deactivated'}.")
        except ValueError as exc:
            messages.error(request, f"{user.username}: {exc}")
        else:
            for message in done:
                messages.success(request, message)
        return redirect("accounts:user-list")
