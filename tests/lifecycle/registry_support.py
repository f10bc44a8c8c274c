"""A small real safetensors model (config.json + two shards) for the registry's tests ("registry" part)."""

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

# 256 x 64 embedding + 256 x 64 head: what the safetensors headers say, written out.
MODEL_PARAMS = 32768


def write_model(directory: Path, seed: int = 7) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
        "torch_dtype": "float32"}))
    rng = np.random.default_rng(seed)
    save_file({"model.embed_tokens.weight": rng.standard_normal((256, 64), dtype=np.float32)},
              str(directory / "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
    save_file({"lm_head.weight": rng.standard_normal((256, 64), dtype=np.float32)},
              str(directory / "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    return directory
