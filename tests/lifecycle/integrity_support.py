"""A small real safetensors model on disk and a registered version of it, for the integrity tests (the
"integrity" part): the version's rows are made from hash_tree's digests and signed, as registration does."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from appliance.lifecycle import hashing, signing
from appliance.lifecycle.models import Artifact, ModelVersion, RegisteredModel


def write_model(directory: Path) -> Path:
    """config.json, tokenizer.json and two safetensors shards with real tensors."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
        "torch_dtype": "float32"}))
    (directory / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    rng = np.random.default_rng(7)
    save_file({"model.embed_tokens.weight": rng.standard_normal((256, 64), dtype=np.float32)},
              str(directory / "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
    save_file({"lm_head.weight": rng.standard_normal((256, 64), dtype=np.float32)},
              str(directory / "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    return directory


def sha256sum(path: Path) -> str:
    """The digest as coreutils' sha256sum prints it: an independent reference for the tests."""
    return subprocess.run(["sha256sum", str(path)], check=True, capture_output=True, text=True).stdout.split()[0]


def register(directory: Path, *, name: str = "integrity-llama", number: int = 1, user=None) -> ModelVersion:
    model, _ = RegisteredModel.objects.get_or_create(name=name)
    # As the registry stores them: a model that is one file keeps the directory holding it as storage_path.
    storage = directory if directory.is_dir() else directory.parent
    version = ModelVersion.objects.create(model=model, number=number, source=str(directory),
                                          storage_path=str(storage), format="safetensors")
    for digest in hashing.hash_tree(directory):
        Artifact.objects.create(version=version, path=digest.path, size=digest.size, sha256=digest.sha256,
                                mtime_ns=digest.mtime_ns, inode=digest.inode, ctime_ns=digest.ctime_ns)
    signing.sign_version(version, user=user)
    version.refresh_from_db()
    return version


def rewrite_last_bytes(path, count=8):
    """The issue's attack: the last `count` bytes rewritten in place, the mtime put back to the nanosecond
    (same size, mtime and inode; a new SHA-256). Returns the original bytes."""
    info = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(-count, os.SEEK_END)
        original = handle.read(count)
        handle.seek(-count, os.SEEK_END)
        handle.write(bytes(byte ^ 0xFF for byte in original))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (info.st_size, info.st_mtime_ns, info.st_ino)
    return original


def put_back(path, original):
    with open(path, "r+b") as handle:
        handle.seek(-len(original), os.SEEK_END)
        handle.write(original)

