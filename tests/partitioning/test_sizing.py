"""The sizing advisor: the issue's reference figures, the memory rules, the placement order, the
throughput ceilings and the planner request. Model dimensions are written out from each model's
published config.json (meta-llama/Meta-Llama-3-70B, -8B, Llama-3.1-405B)."""

import pytest

from appliance.partitioning import sizing

# meta-llama/Meta-Llama-3-70B config.json: hidden_size 8192, num_hidden_layers 80, num_attention_heads 64,
# num_key_value_heads 8 (head dim 8192 / 64 = 128), intermediate_size 28672, vocab_size 128256
LLAMA3_70B = {"params": 70_553_706_496, "layers": 80, "kv_heads": 8, "head_dim": 128, "hidden_size": 8192,
              "attention_heads": 64, "intermediate_size": 28672, "vocab_size": 128256}
# meta-llama/Meta-Llama-3-8B config.json: 4096, 32 layers, 32 heads, 8 KV heads, 14336, 128256
LLAMA3_8B = {"params": 8_030_261_248, "layers": 32, "kv_heads": 8, "head_dim": 128, "hidden_size": 4096,
             "attention_heads": 32, "intermediate_size": 14336, "vocab_size": 128256}
# meta-llama/Llama-3.1-405B config.json: 16384, 126 layers, 128 heads, 8 KV heads, 53248, 128256
LLAMA31_405B = {"params": 405_853_388_800, "layers": 126, "kv_heads": 8, "head_dim": 128, "hidden_size": 16384,
                "attention_heads": 128, "intermediate_size": 53248, "vocab_size": 128256}


def test_llama3_70b_reference_figures():
    result = sizing.size(LLAMA3_70B, dtype="bf16", context=8192, concurrency=1, gpu_model="h100-80gb")
    assert result["weights_bytes"] == 141_107_412_992
    assert result["display"]["weights"] == "141.1 GB"
    assert result["kv_bytes_per_token"] == 327_680          # 2 x 80 x 8 x 128 x 2
    assert result["display"]["kv_per_token"] == "320 KiB"
    assert result["kv_bytes"] == 327_680 * 8192


def test_llama3_8b_reference_figures():
    result = sizing.size(LLAMA3_8B, dtype="bf16", context=8192, concurrency=4, gpu_model="h100-80gb")
    assert result["weights_bytes"] == 16_060_522_496
    assert result["display"]["weights"] == "16.06 GB"
    assert result["kv_bytes_per_token"] == 131_072          # 2 x 32 x 8 x 128 x 2
    assert result["display"]["kv_per_token"] == "128 KiB"
    assert result["kv_bytes"] == 131_072 * 8192 * 4 == 4_294_967_296


@pytest.mark.parametrize("dtype, weights, kv_dtype, kv_per_token", [
    ("fp16", 141_107_412_992, "fp16", 327_680),
    ("fp8", 70_553_706_496, "bf16", 327_680),
    ("int8", 70_553_706_496, "bf16", 327_680),
    ("int4", 35_276_853_248, "bf16", 327_680),
])
def test_dtypes(dtype, weights, kv_dtype, kv_per_token):
    result = sizing.size(LLAMA3_70B, dtype=dtype, context=1024, gpu_model="h100-80gb")
    assert (result["weights_bytes"], result["kv_dtype"], result["kv_bytes_per_token"]) == (weights, kv_dtype,
                                                                                          kv_per_token)


def test_fp8_kv_cache_halves_it():
    result = sizing.size(LLAMA3_70B, dtype="fp8", kv_dtype="fp8", context=1024, gpu_model="h100-80gb")
    assert result["kv_bytes_per_token"] == 163_840


def test_8b_on_a_mig_instance_every_term_by_hand():
    result = sizing.size(LLAMA3_8B, dtype="bf16", context=4096, concurrency=1, gpu_model="h100-80gb")
    per_gpu = result["placement"]["per_gpu"]
    assert per_gpu == {
        "weights": 16_060_522_496,
        "kv": 536_870_912,                                  # 131,072 x 4096
        "activations": 487_052_288,                         # 4096 x (4 x 4096 + 3 x 14336) x 2 + 128256 x 4
        "overhead": 1_610_612_736,                          # 1.5 GiB
        "total": 18_695_058_432,
    }
    # 18.7 GB: over 90 % of 1g.20gb and 2g.20gb (18 GB), within 3g.40gb's 36 GB
    assert {k: result["placement"][k] for k in ("kind", "profile", "gpus", "tp", "pp")} == \
        {"kind": "mig", "profile": "3g.40gb", "gpus": 1, "tp": 1, "pp": 1}
    assert result["total_bytes"] == 18_695_058_432
    # 3.35 TB/s x 4/8 memory slices / (16,060,522,496 + 536,870,912) bytes per step
    assert result["decode_tokens_per_s_ceiling"] == 100.9
    # 989.5 TFLOP/s x 3/7 compute slices / (2 x 8,030,261,248)
    assert result["prefill"]["tokens_per_s_ceiling"] == 26404.6
    assert result["prefill"]["compute_dtype"] == "bf16"


def test_small_model_takes_the_smallest_mig_profile():
    # 1B parameters in int4 with a short context: 0.5 GB of weights
    result = sizing.size({"params": 1_000_000_000, "layers": 16, "kv_heads": 8, "head_dim": 64,
                          "hidden_size": 2048, "intermediate_size": 8192, "vocab_size": 128256},
                         dtype="int4", context=2048, gpu_model="a100-40gb")
    assert (result["placement"]["kind"], result["placement"]["profile"]) == ("mig", "1g.5gb")


def test_70b_bf16_needs_tensor_parallelism_of_four_on_h100():
    # TP 2 would need 74,748,267,008 bytes per GPU, over 72 GB (90 % of 80 GB)
    result = sizing.size(LLAMA3_70B, dtype="bf16", context=8192, concurrency=1, gpu_model="h100-80gb")
    assert {k: result["placement"][k] for k in ("kind", "profile", "gpus", "tp", "pp")} == \
        {"kind": "tp", "profile": None, "gpus": 4, "tp": 4, "pp": 1}


def test_70b_bf16_on_h200_takes_two():
    result = sizing.size(LLAMA3_70B, dtype="bf16", context=8192, concurrency=1, gpu_model="h200")
    assert (result["placement"]["kind"], result["placement"]["tp"]) == ("tp", 2)


def test_70b_int4_fits_one_gpu():
    result = sizing.size(LLAMA3_70B, dtype="int4", context=8192, concurrency=1, gpu_model="h100-80gb")
    assert (result["placement"]["kind"], result["placement"]["gpus"]) == ("gpu", 1)
    assert "int4 weights are dequantized to bf16 for the matrix products (weight-only quantization)" in \
        result["assumptions"]


def test_nvlink_domain_of_h100_nvl_is_two_then_pipeline():
    # 16 sequences of 8192 tokens: 21.5 GB of KV cache per GPU at TP 2, over 84.6 GB with the weights
    result = sizing.size(LLAMA3_70B, dtype="bf16", context=8192, concurrency=16, gpu_model="h100-nvl")
    assert {k: result["placement"][k] for k in ("kind", "gpus", "tp", "pp")} == \
        {"kind": "tp_pp", "gpus": 4, "tp": 2, "pp": 2}


def test_405b_pipelines_across_two_nodes_and_does_not_fit_one():
    result = sizing.size(LLAMA31_405B, dtype="bf16", context=8192, concurrency=1, gpu_model="h100-80gb", nodes=2)
    assert {k: result["placement"][k] for k in ("kind", "gpus", "tp", "pp")} == \
        {"kind": "tp_pp", "gpus": 16, "tp": 8, "pp": 2}
    one = sizing.size(LLAMA31_405B, dtype="bf16", context=8192, concurrency=1, gpu_model="h100-80gb", nodes=1)
    assert one["fits"] is False and one["placement"] is None
    assert one["reason"].startswith("does not fit on 1 node(s) of 8 GPUs of h100-80gb: even TP 8 x PP 1 needs")


def test_tp_divides_the_attention_heads():
    # 20 attention heads, 4 KV heads: TP 8 does not divide 20, so TP 4 and then a pipeline (400 GB of
    # weights: 100 GB per GPU at TP 4, 50 GB at TP 4 x PP 2; TP 8 alone would have held them)
    model = {"params": 200_000_000_000, "layers": 40, "kv_heads": 4, "head_dim": 128, "hidden_size": 2560,
             "attention_heads": 20, "intermediate_size": 13824, "vocab_size": 32000}
    result = sizing.size(model, dtype="bf16", context=4096, gpu_model="h100-80gb")
    assert {k: result["placement"][k] for k in ("kind", "tp", "pp")} == {"kind": "tp_pp", "tp": 4, "pp": 2}


def test_assumptions_show_the_rules():
    result = sizing.size(LLAMA3_70B, dtype="bf16", context=8192, gpu_model="h100-80gb")
    text = result["assumptions"]
    assert "KV cache per token: 2 (K and V) x 80 layers x 8 KV heads x 128 head dim x 2 bytes (bf16) = " \
           "327,680 bytes" in text
    assert "weights: 70,553,706,496 parameters x 2 bytes (bf16)" in text
    assert "runtime overhead: 1.5 GiB per GPU (CUDA context and libraries, CUDA graphs, NCCL buffers)" in text
    assert any(line.startswith("h100-80gb: NVIDIA H100 Tensor Core GPU datasheet") for line in text)


def test_missing_dimensions_are_estimated_and_said():
    result = sizing.size({"params": 8_030_261_248, "layers": 32, "kv_heads": 8, "head_dim": 128},
                         dtype="bf16", gpu_model="h100-80gb")
    # sqrt(8,030,261,248 / (12 x 32)) = 4573.0
    assert result["model"]["hidden_size"] == 4573
    assert "hidden size 4573 estimated as sqrt(params / (12 x layers)) (not given)" in result["assumptions"]
    assert result["weights_bytes"] == 16_060_522_496


@pytest.mark.parametrize("change, message", [
    ({"params": 0}, "params: expected an integer from 1 to"),
    ({"layers": "80"}, "layers: expected an integer"),
    ({"kv_heads": True}, "kv_heads: expected an integer"),
    ({"kv_heads": 7}, "kv_heads: 7 does not divide attention_heads 64"),
    ({"head_dim": None}, "head_dim: expected an integer"),
])
def test_bad_model_values(change, message):
    with pytest.raises(sizing.SizingError, match=message):
        sizing.size({**LLAMA3_70B, **change}, dtype="bf16", gpu_model="h100-80gb")


@pytest.mark.parametrize("options, message", [
    ({"dtype": "fp4"}, "dtype: expected one of bf16, fp16, fp8, int8, int4, fp32, got 'fp4'"),
    ({"kv_dtype": "int4"}, "kv_dtype: expected one of"),
    ({"context": 0}, "context: expected an integer from 1 to 10000000"),
    ({"concurrency": -1}, "concurrency: expected an integer"),
    ({"gpu_model": "h100-80gb;rm"}, "gpu_model: unknown GPU model 'h100-80gb;rm'"),
    ({"nodes": 0}, "nodes: expected an integer"),
])
def test_bad_options(options, message):
    with pytest.raises(sizing.SizingError, match=message):
        sizing.size(LLAMA3_8B, **{"dtype": "bf16", "gpu_model": "h100-80gb", **options})


def test_request_for_a_mig_sized_model():
    result = sizing.size(LLAMA3_8B, dtype="bf16", context=4096, concurrency=1, gpu_model="h100-80gb")
    # 18,695,058,432 bytes at 90 %: an instance of at least 20.78 GB
    assert sizing.request_for(result, "llama-3-8b", replicas=3, isolation="hard") == \
        {"name": "llama-3-8b", "memory_gb": 20.78, "replicas": 3, "isolation": "hard"}


def test_request_for_a_tensor_parallel_model_is_exclusive_whole_gpus():
    result = sizing.size(LLAMA3_70B, dtype="bf16", context=8192, concurrency=1, gpu_model="h100-80gb")
    request = sizing.request_for(result, "llama-3-70b", replicas=2)
    assert (request["isolation"], request["replicas"]) == ("exclusive", 8)


@pytest.mark.parametrize("name, replicas, isolation, message", [
    ("Llama 3", 1, "soft", "name: 'Llama 3' does not match"),
    ("../x", 1, "soft", "name: '../x' does not match"),
    ("ok", 0, "soft", "replicas: expected an integer from 1"),
    ("ok", 1, "shared", "isolation: expected one of hard, soft, exclusive"),
])
def test_request_for_refuses_bad_input(name, replicas, isolation, message):
    result = sizing.size(LLAMA3_8B, dtype="bf16", gpu_model="h100-80gb")
    with pytest.raises(sizing.SizingError, match=message):
        sizing.request_for(result, name, replicas=replicas, isolation=isolation)


def test_request_for_refuses_a_model_that_does_not_fit():
    result = sizing.size(LLAMA31_405B, dtype="bf16", context=8192, gpu_model="h100-80gb", nodes=1)
    with pytest.raises(sizing.SizingError, match="big: the model does not fit"):
        sizing.request_for(result, "big")


@pytest.mark.parametrize("value, binary, text", [
    (141_107_412_992, False, "141.1 GB"), (16_060_522_496, False, "16.06 GB"), (327_680, True, "320 KiB"),
    (131_072, True, "128 KiB"), (999, False, "999 B"), (1_500_000, False, "1.5 MB"),
])
def test_human_bytes(value, binary, text):
    assert sizing.human_bytes(value, binary=binary) == text
