"""manage.py partition size: typed values and a model directory, JSON and text, and its refusals."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from tests.partitioning.test_modelfiles import write_tiny

pytestmark = pytest.mark.django_db

LLAMA3_70B = ["--params", "70553706496", "--layers", "80", "--kv-heads", "8", "--head-dim", "128",
              "--hidden-size", "8192", "--attention-heads", "64", "--intermediate-size", "28672",
              "--vocab-size", "128256"]


def run(*args) -> str:
    out = io.StringIO()
    call_command("partition", "size", *args, stdout=out)
    return out.getvalue()


def test_json_for_typed_values():
    result = json.loads(run(*LLAMA3_70B, "--dtype", "bf16", "--context", "8192", "--concurrency", "1",
                            "--gpu", "h100-80gb", "--json"))
    assert result["weights_bytes"] == 141_107_412_992
    assert result["kv_bytes_per_token"] == 327_680
    assert result["kv_bytes"] == 2_684_354_560
    assert {k: result["placement"][k] for k in ("kind", "profile", "gpus", "tp", "pp")} == \
        {"kind": "tp", "profile": None, "gpus": 4, "tp": 4, "pp": 1}
    for key in ("total_bytes", "activation_bytes", "overhead_bytes", "decode_tokens_per_s_ceiling", "prefill",
                "assumptions"):
        assert key in result


def test_the_8b_figures_with_separators_and_a_request():
    result = json.loads(run("--params", "8_030_261_248", "--layers", "32", "--kv-heads", "8", "--head-dim", "128",
                            "--hidden-size", "4096", "--intermediate-size", "14336", "--vocab-size", "128256",
                            "--context", "4096", "--request", "llama-3-8b", "--replicas", "2", "--json"))
    assert (result["display"]["weights"], result["display"]["kv_per_token"]) == ("16.06 GB", "128 KiB")
    assert result["request"] == {"name": "llama-3-8b", "memory_gb": 20.78, "replicas": 2, "isolation": "soft"}


def test_text_summary():
    text = run(*LLAMA3_70B, "--context", "8192")
    assert "  weights              141.1 GB  (141,107,412,992 bytes)" in text
    assert "  KV per token          320 KiB  (327,680 bytes)" in text
    assert "Placement: tensor parallel over 4 GPUs" in text
    assert "Assumptions:" in text


def test_model_dir(tmp_path):
    model = write_tiny(tmp_path / "tiny")
    result = json.loads(run("--model-dir", str(model), "--context", "16", "--gpu", "a100-40gb", "--json"))
    assert result["model"]["params"] == 6736
    assert result["weights_bytes"] == 13_472
    assert result["source"]["params"] == "safetensors headers: model.safetensors (exact, from tensor shapes)"
    assert result["placement"]["kind"] == "mig"


@pytest.mark.parametrize("args, message", [
    ((), "give --model-dir DIR, or the model's shape: missing --params, --layers, --kv-heads, --head-dim"),
    (("--params", "1000", "--layers", "2"), "missing --kv-heads, --head-dim"),
    (("--model-dir", "/nonexistent-dir-xyz", "--layers", "2"), "--model-dir reads the model's shape from its files: "
                                                               "drop --layers"),
    (("--model-dir", "/nonexistent-dir-xyz"), "model directory /nonexistent-dir-xyz: not a directory"),
    (("--model-dir", "/tmp/x;reboot"), "expected an absolute path"),
    ((*LLAMA3_70B, "--context", "0"), "context: expected an integer from 1"),
    ((*LLAMA3_70B, "--request", "Bad Name"), "name: 'Bad Name' does not match"),
])
def test_refusals(args, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        run(*args)


@pytest.mark.parametrize("args", [("--params", "7e10"), ("--params", "-5"), ("--gpu", "h100"),
                                  ("--dtype", "fp4")])
def test_argument_types(args):
    with pytest.raises(CommandError):
        run(*LLAMA3_70B, *args)
