"""A version's integrity reads the same at the top and beside its files: before the first check the files
say they were hashed at registration, not "Verified" beside a version "Not verified yet"."""

import pytest
from django.utils import timezone

from appliance.lifecycle.models import Artifact, ModelVersion, RegisteredModel, Verification

pytestmark = pytest.mark.django_db

RUSSIAN = {"HTTP_ACCEPT_LANGUAGE": "ru"}


def _state(html: str) -> str:
    row = html.split('<tr data-path="model.safetensors">', 1)[1].split("</tr>", 1)[0]
    return row.split('data-part="state">', 1)[1].split("</td>", 1)[0]


def test_files_are_not_verified_before_their_version_is(client_for, users):
    model = RegisteredModel.objects.create(name="llama", owner=users["viewer"])
    version = ModelVersion.objects.create(model=model, number=1, source="/models/llama/1")
    Artifact.objects.create(version=version, path="model.safetensors", size=10, sha256="ab" * 32, mtime_ns=1, inode=2)
    client = client_for("viewer")
    html = client.get("/models/llama/versions/1/").content.decode()
    assert "Not verified yet" in html.split('data-testid="version-verification">', 1)[1].split("</dd>", 1)[0]
    assert _state(html) == ('<span class="verification verification-unverified">Hashed at registration, '
                            'not checked yet</span>')
    russian = client.get("/models/llama/versions/1/", **RUSSIAN).content.decode()
    assert "Хеш записан при регистрации, ещё не проверен" in _state(russian)
    ModelVersion.objects.filter(pk=version.pk).update(verification=Verification.VERIFIED, verified_at=timezone.now())
    assert _state(client.get("/models/llama/versions/1/").content.decode()) == (
        '<span class="verification verification-verified">Verified</span>')
