from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "appliance.accounts"
    label = "accounts"
