"""What the lifecycle tests share: the artifact root the registry allows, with the appliance's signing key
beside it."""

import pytest

from tests.accounts.settled import make_user  # noqa: F401  (people older than the four-eyes cooling period)


@pytest.fixture
def root(settings, tmp_path):
    """The one folder artifacts may be registered from (LIFECYCLE_ARTIFACT_ROOTS), empty; the signing key is
    made on first use under tmp_path/keys."""
    models = tmp_path / "models"
    models.mkdir()
    settings.LIFECYCLE_ARTIFACT_ROOTS = [models]
    settings.LIFECYCLE_SIGNING_KEY_FILE = tmp_path / "keys" / "model-signing.pem"
    return models

