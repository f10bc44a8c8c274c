"""Which keys of a record's details are masked: credentials are, a language model's tokens are not."""

import pytest

from appliance.audit.services import redact


@pytest.mark.parametrize("key", ["password", "api_token", "token", "ingest_token", "token_hash", "bmc_password_per_token",
                                 "secret_per_token", "private_key", "Authorization-Token"])
def test_credentials_are_masked(key):
    assert redact({key: "value"}) == {key: "[redacted]"}


@pytest.mark.parametrize("key", ["kv_bytes_per_token", "tokens_per_s_ceiling", "prefill_tokens_per_s"])
def test_a_models_tokens_are_not_credentials(key):
    assert redact({"sizing": {key: 163840}}) == {"sizing": {key: 163840}}
