"""Hashing and verifying a model version (not a test; tests/bench is outside the default run).

Writes a model of N files totalling SIZE (real random bytes, written once into a temporary directory), then:
- `sha256sum` over the same files (one process, as an operator would run it) and hashing.hash_tree (the
  registration's hashing: large reads into a reused buffer, files in parallel threads), each twice,
  alternating, so both see the same page cache; the digests must agree; the issue's target is hash_tree
  >= 0.8 x sha256sum's throughput;
- the version's rows made from those digests and signed (model-signing, no second hashing pass);
- a quick verification (stat of every file, the listing, the signature over the recorded hashes; no file
  read) repeated, median and worst: the target is well under a second before every deployment;
- for reference, `openssl dgst -sha256` over the same files (coreutils' sha256sum may be built without the
  CPU's SHA instructions, which makes it a lenient yardstick);
- with MODEL_BENCH_FULL=1, a full verification too (model-signing's verifier re-hashes every file).

A SIZE larger than the memory reads from the disk (both tools then wait on it alike); a SIZE that fits
measures the hashing itself. The disk must hold SIZE plus 2 GB: the bench refuses otherwise.

Environment: MODEL_BENCH_SIZE (default 20G; K/M/G/T suffixes), MODEL_BENCH_FILES (default 30),
MODEL_BENCH_DIR (where the model is written, default the temporary directory), MODEL_BENCH_FULL.
Prints figures; asserts nothing about time.
Usage: MODEL_BENCH_SIZE=2G .venv/bin/python tests/bench/bench_model_hashing.py
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.benchdb import bench_main  # noqa: E402

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
BLOCK = 16 << 20


def parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1] if text and text[-1] in UNITS else ""
    return int(float(text[: len(text) - len(unit)]) * UNITS[unit])


def write_model(directory: Path, total: int, files: int) -> list[Path]:
    """`files` files of about total/files bytes each (the last takes the remainder), random content; a
    block of random bytes is reused with its first 8 bytes numbered so that no two blocks are equal."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    random_block = bytearray(os.urandom(BLOCK))
    per_file = total // files
    paths, counter = [], 0
    for n in range(files):
        path = directory / f"model-{n + 1:05d}-of-{files:05d}.safetensors"
        size = per_file if n < files - 1 else total - per_file * (files - 1)
        with open(path, "wb", buffering=0) as handle:
            left = size
            while left > 0:
                counter += 1
                random_block[:8] = counter.to_bytes(8, "little")
                chunk = memoryview(random_block)[: min(BLOCK, left)]
                handle.write(chunk)
                left -= len(chunk)
        paths.append(path)
    return [directory / "config.json", *paths]


def sha256sum(paths: list[Path]) -> tuple[float, dict[str, str]]:
    started = time.perf_counter()
    out = subprocess.run(["sha256sum", *map(str, paths)], check=True, capture_output=True, text=True).stdout
    seconds = time.perf_counter() - started
    return seconds, {Path(line.split(None, 1)[1].lstrip("*")).name: line.split()[0] for line in out.splitlines()}


def run(_args) -> int:
    from django.conf import settings

    from appliance.lifecycle import hashing, integrity, signing
    from appliance.lifecycle.models import Artifact, ModelVersion, RegisteredModel

    total = parse_size(os.environ.get("MODEL_BENCH_SIZE", "20G"))
    files = int(os.environ.get("MODEL_BENCH_FILES", "30"))
    parent = Path(os.environ.get("MODEL_BENCH_DIR", tempfile.gettempdir()))
    free = shutil.disk_usage(parent).free
    if total + (2 << 30) > free:
        print(f"{parent}: {free / 2**30:.1f} GiB free, not enough for {total / 2**30:.1f} GiB and 2 GiB to "
              "spare; set MODEL_BENCH_SIZE (or MODEL_BENCH_DIR)")
        return 1
    settings.LIFECYCLE_SIGNING_KEY_FILE = Path(tempfile.mkdtemp(prefix="bench-key-")) / "model-signing.pem"
    workdir = Path(tempfile.mkdtemp(prefix="bench-model-", dir=parent))
    try:
        model = workdir / "model"
        started = time.perf_counter()
        paths = write_model(model, total, files)
        written = time.perf_counter() - started
        size = sum(p.stat().st_size for p in paths)
        print(f"model: {len(paths)} files ({files} shards + config.json), {size / 2**30:.2f} GiB, written in "
              f"{written:.1f} s; {os.cpu_count()} CPUs, hash_tree uses {hashing.workers(len(paths))} threads, "
              f"{hashing.BLOCK_SIZE >> 20} MiB reads")

        rounds = []
        for _ in range(2):
            tool_s, tool_digests = sha256sum(paths)
            started = time.perf_counter()
            digests = hashing.hash_tree(model)
            ours_s = time.perf_counter() - started
            rounds.append((tool_s, ours_s))
        ours = {d.path: d.sha256 for d in digests}
        if ours != tool_digests:
            print("MISMATCH: hash_tree and sha256sum disagree:",
                  sorted(k for k in ours if ours[k] != tool_digests.get(k)))
            return 1
        tool_s = min(r[0] for r in rounds)
        ours_s = min(r[1] for r in rounds)
        gib = size / 2**30
        print(f"sha256sum: {tool_s:.2f} s = {gib / tool_s:.2f} GiB/s  (rounds: "
              f"{', '.join(f'{r[0]:.2f}' for r in rounds)} s)")
        print(f"hash_tree: {ours_s:.2f} s = {gib / ours_s:.2f} GiB/s  (rounds: "
              f"{', '.join(f'{r[1]:.2f}' for r in rounds)} s)")
        ratio = tool_s / ours_s
        print(f"hash_tree / sha256sum throughput: {ratio:.2f} x (target >= 0.8): "
              f"{'met' if ratio >= 0.8 else 'NOT met'}; digests identical")
        if shutil.which("openssl"):
            # A stricter reference where coreutils' sha256sum lacks the CPU's SHA instructions (9.1 does).
            started = time.perf_counter()
            subprocess.run(["openssl", "dgst", "-sha256", *map(str, paths)], check=True, capture_output=True)
            openssl_s = time.perf_counter() - started
            print(f"for reference, openssl dgst -sha256 (one process): {openssl_s:.2f} s = {gib / openssl_s:.2f} "
                  f"GiB/s; hash_tree / openssl: {openssl_s / ours_s:.2f} x")

        registered = RegisteredModel.objects.create(name="bench-model")
        version = ModelVersion.objects.create(model=registered, number=1, source=str(model),
                                              storage_path=str(model), format="safetensors")
        Artifact.objects.bulk_create([Artifact(version=version, path=d.path, size=d.size, sha256=d.sha256,
                                               mtime_ns=d.mtime_ns, inode=d.inode) for d in digests])
        started = time.perf_counter()
        signing.sign_version(version)
        print(f"signing (model-signing bundle from the recorded digests, no file read): "
              f"{(time.perf_counter() - started) * 1000:.1f} ms")

        times = []
        for _ in range(20):
            started = time.perf_counter()
            result = integrity.verify(version)
            times.append(time.perf_counter() - started)
            assert result.ok, result.detail
        print(f"quick verification of {len(paths)} files (stat, listing, signature; DB writes and audit record "
              f"included): median {statistics.median(times) * 1000:.1f} ms, worst {max(times) * 1000:.1f} ms "
              f"(target well under 1 s)")
        if os.environ.get("MODEL_BENCH_FULL") == "1":
            started = time.perf_counter()
            result = integrity.verify(version, full=True)
            full_s = time.perf_counter() - started
            print(f"full verification (model-signing's verifier re-hashes): {full_s:.2f} s = "
                  f"{gib / full_s:.2f} GiB/s, {'intact' if result.ok else result.detail}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def arguments(parser) -> None:
    """Sizes come from the environment (MODEL_BENCH_SIZE, MODEL_BENCH_FILES, MODEL_BENCH_DIR)."""


if __name__ == "__main__":
    sys.exit(bench_main(run, description=__doc__, database="bench_model_hashing", arguments=arguments))
