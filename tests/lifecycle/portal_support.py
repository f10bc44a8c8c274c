"""Test data for the lifecycle's portal pages ("portal" part): real model files in a temporary artifact
root, registered, evaluated and promoted through the registry's own services."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from appliance.core.roles import Role


def write_model(directory: Path, seed: int = 3) -> Path:
    """A tiny real model: config.json and one safetensors shard (16 x 8 embedding)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16, "vocab_size": 16,
        "torch_dtype": "float32"}))
    rng = np.random.default_rng(seed)
    save_file({"model.embed_tokens.weight": rng.standard_normal((16, 8), dtype=np.float32)},
              str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


@pytest.fixture
def model_root(settings, tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    settings.LIFECYCLE_ARTIFACT_ROOTS = [root]
    settings.LIFECYCLE_SIGNING_KEY_FILE = tmp_path / "keys" / "model-signing.pem"
    return root


@pytest.fixture
def people(make_user):
    """Two ML engineers (one asks, the other approves), an operator, a viewer."""
    return {"erin": make_user(Role.ML_ENGINEER, "erin"), "max": make_user(Role.ML_ENGINEER, "max"),
            "olga": make_user(Role.OPERATOR, "olga"), "vera": make_user(Role.VIEWER, "vera")}


def register(model_root, name: str, number_of_files_seed: int = 3, **lineage):
    from appliance.lifecycle import services

    directory = write_model(model_root / name / f"s{number_of_files_seed}", seed=number_of_files_seed)
    return services.register_version(name, source=str(directory), user=lineage.pop("user"), **lineage)


def to_production(version, requester, approver):
    """registered -> validated -> staging through transitions, then production by request and approval."""
    from appliance.lifecycle import services

    services.transition(version, "validated", user=requester)
    services.transition(version, "staging", user=requester)
    evaluation = services.add_evaluation(version, user=requester, name="held-out", metrics={"accuracy": 0.9},
                                         passed=True)
    request = services.request_transition(version, "production", user=requester, reason="good enough",
                                          evidence=[evaluation.pk])
    services.approve(request, user=approver, reason="checked")
    version.refresh_from_db()
    return version
