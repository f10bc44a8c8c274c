"""For the MLflow-compatible API's tests ("mlflow" part): a small real safetensors model under an artifact
root, and the settings that make it one."""

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def write_model(directory: Path, seed: int = 3) -> Path:
    """config.json and one safetensors file with real tensors: what a training job leaves behind."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 128,
        "torch_dtype": "float32"}))
    rng = np.random.default_rng(seed)
    save_file({"model.embed_tokens.weight": rng.standard_normal((128, 32), dtype=np.float32),
               "lm_head.weight": rng.standard_normal((128, 32), dtype=np.float32)},
              str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


def use_artifact_root(settings, tmp_path: Path) -> Path:
    root = tmp_path / "models"
    root.mkdir(exist_ok=True)
    settings.LIFECYCLE_ARTIFACT_ROOTS = [root]
    settings.LIFECYCLE_SIGNING_KEY_FILE = tmp_path / "keys" / "model-signing.pem"
    return root
