import pytest
from django.core.cache import cache

from tests.sample_inventory import build_sample_inventory


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Each test creates a user per role; the production hasher would spend most of the run on it."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_throttles():
    """Rate-limit counters live in the cache; each test starts with none."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def inventory(db):
    return build_sample_inventory()


@pytest.fixture
def site_credentials(monkeypatch):
    from tests.api.sites import PASSWORD_VARIABLE, SITE_BMC_PASSWORD

    monkeypatch.setenv(PASSWORD_VARIABLE, SITE_BMC_PASSWORD)
