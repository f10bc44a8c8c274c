from django.db import models

from . import secrets


class EncryptedTextField(models.TextField):
    """Stores its value encrypted (Fernet, key file in the state directory); never in clear in the DB."""

    description = "Encrypted text"

    def from_db_value(self, value, expression, connection):
        if value is None or value == "":
            return value
        return secrets.decrypt(value)

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return secrets.encrypt(str(value))
