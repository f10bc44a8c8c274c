"""The sizing advisor's speed (not a test; tests/bench is outside the default run): reading a model's
shape from its files, and sizing it over a grid of precisions, contexts, concurrencies and GPU models.

- Llama-3-70B's real tensor layout (723 tensors) and Llama-3.1-405B's (1,138) in header-only shards
  (sparse files: the data sections are never written), 30 and 191 shards as published, read through
  the safetensors library's headers;
- size() over 5 dtypes x 6 contexts x 5 concurrencies x 6 GPU models for each model (a portal form or
  the planner sizing many requests calls it this way).

Prints wall-clock figures; asserts nothing about time.
Usage: .venv/bin/python tests/bench/bench_sizing.py
"""

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.partitioning import modelfiles, profiles, sizing  # noqa: E402
from tests.partitioning.test_modelfiles import LLAMA3_70B_CONFIG, llama_tensors, write_header_only  # noqa: E402

LLAMA31_405B_CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 16384, "intermediate_size": 53248,
                       "num_attention_heads": 128, "num_hidden_layers": 126, "num_key_value_heads": 8,
                       "vocab_size": 128256, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def write_model(directory: Path, config: dict, shards: int) -> None:
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    tensors = llama_tensors(config)
    names = sorted(tensors)
    weight_map = {}
    for n in range(shards):
        file = f"model-{n + 1:05d}-of-{shards:05d}.safetensors"
        part = names[n::shards]
        write_header_only(directory / file, {name: tensors[name] for name in part})
        weight_map.update({name: file for name in part})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for label, config, shards in (("Llama-3-70B", LLAMA3_70B_CONFIG, 30), ("Llama-3.1-405B", LLAMA31_405B_CONFIG, 191)):
            directory = Path(tmp) / label
            write_model(directory, config, shards)
            started = time.perf_counter()
            rounds = 5
            for _ in range(rounds):
                shape = modelfiles.read_model_dir(str(directory))
            read_ms = (time.perf_counter() - started) / rounds * 1000
            grid = [(d, c, n, g) for d in ("bf16", "fp16", "fp8", "int8", "int4")
                    for c in (2048, 4096, 8192, 32768, 131072, 1_000_000) for n in (1, 4, 16, 64, 256)
                    for g in profiles.MODELS]
            kinds: dict[str, int] = {}
            started = time.perf_counter()
            for dtype, context, concurrency, gpu in grid:
                result = sizing.size(shape, dtype=dtype, context=context, concurrency=concurrency, gpu_model=gpu)
                kind = result["placement"]["kind"] if result["fits"] else "none"
                kinds[kind] = kinds.get(kind, 0) + 1
            size_ms = (time.perf_counter() - started) / len(grid) * 1000
            print(f"{label}: {shape.params:,} parameters from {shards} shards in {read_ms:.1f} ms; "
                  f"size() {size_ms:.2f} ms per call over {len(grid)} cases; placements {kinds}")


if __name__ == "__main__":
    main()
