"""Password rules of our own, next to Django's validators (settings.AUTH_PASSWORD_VALIDATORS)."""

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _


class RepeatedCharacterValidator:
    """Refuses a password that is one character repeated ("aaaaaaaaaaaa", "............"): it passes a
    length rule yet is the first guess of any attacker. Django's own validators do not catch it."""

    def validate(self, password, user=None):
        if password and len(set(password)) == 1:
            raise ValidationError(_("This password is a single character repeated."),
                                  code="password_single_character")

    def get_help_text(self):
        return _("Your password can't be a single character repeated.")
