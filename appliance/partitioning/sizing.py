"""The sizing advisor: how much GPU memory a model needs to serve a context length at a concurrency,
the smallest placement that holds it, and throughput ceilings. Every rule is written out here and in
the result's `assumptions`.

    size(model, *, dtype, context, concurrency, gpu_model, gpus_per_node=8, nodes=None, ...) -> dict

`model` is a modelfiles.ModelShape (read from a model's own files) or a mapping of typed values:
params, layers, kv_heads, head_dim (required) and hidden_size, attention_heads, intermediate_size,
vocab_size, active_params (optional; what is missing is estimated, and the estimate is listed).

Memory:
- weights = parameters x bytes of the weights' dtype (bf16/fp16 2, fp8/int8 1, int4 0.5);
- KV cache per token = 2 (K and V) x layers x KV heads x head dim x bytes of the KV cache's dtype;
  KV cache = per token x context x concurrency (every sequence at the full context);
- activations (vLLM's profile run: one forward step of `batched_tokens` tokens): per token
  (4 x hidden + 3 x intermediate / TP) x 2 bytes, the largest layer's working set, plus fp32 logits
  for each sequence (vocab / TP x 4 bytes);
- runtime overhead: a fixed 1.5 GiB per GPU (CUDA context and libraries, CUDA graphs, NCCL buffers);
- a placement fits when each GPU's share is at most 90 % of its memory (vLLM's gpu_memory_utilization
  default; the rest is left to the allocator's fragmentation and other processes).
Placements, smallest first: a MIG profile of the GPU model (profiles.py, ascending memory then compute),
one GPU, tensor parallelism (TP 2, 4, 8 within the NVLink domain, dividing the attention heads and
dividing or multiplied by the KV heads), then TP x PP (pipeline stages of one TP group each).
Throughput ceilings: decode = concurrency x memory bandwidth / bytes read per step (all weights plus
the KV cache of every sequence at full context); prefill = peak dense FLOPs / (2 x parameters) per token.

Pure Python, no Django.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from . import profiles
from .modelfiles import ModelShape

GB = 1_000_000_000
GIB = 1 << 30
KIB = 1 << 10

# bytes per element, in half-bytes (int4 is half a byte)
DTYPE_NIBBLES = {"fp32": 8, "bf16": 4, "fp16": 4, "fp8": 2, "int8": 2, "int4": 1}
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "fp32")
KV_DTYPES = ("bf16", "fp16", "fp8", "int8", "fp32")

GPU_MEMORY_UTILIZATION = 0.90
RUNTIME_OVERHEAD_BYTES = 3 * GIB // 2
ACTIVATION_BYTES = 2           # activations in bf16/fp16 whatever the weights' dtype
LOGIT_BYTES = 4                # logits in fp32
BATCHED_TOKENS = 8192          # vLLM's max_num_batched_tokens with chunked prefill
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
ISOLATIONS = ("hard", "soft", "exclusive")


@dataclass(frozen=True)
class GpuSpec:
    """Per GPU: memory bandwidth (bytes/s), dense peak tensor throughput (FLOP/s or OP/s) per compute
    dtype, how many GPUs one NVLink domain joins, and where the figures come from."""

    board: str
    bandwidth: float
    flops: Mapping[str, float]
    nvlink_domain: int
    source: str


_DENSE = "dense figures: half the datasheet's 'with sparsity' figures"
GPU_SPECS: dict[str, GpuSpec] = {
    "a100-40gb": GpuSpec("A100 SXM4 40GB", 1555e9, {"bf16": 312e12, "int8": 624e12}, 8,
                         "NVIDIA A100 Tensor Core GPU datasheet: 1,555 GB/s, BF16/FP16 312 TFLOPS, INT8 624 TOPS "
                         "(dense; no FP8); HGX A100: 8 GPUs on NVSwitch"),
    "a100-80gb": GpuSpec("A100 SXM4 80GB", 2039e9, {"bf16": 312e12, "int8": 624e12}, 8,
                         "NVIDIA A100 Tensor Core GPU datasheet: 2,039 GB/s, BF16/FP16 312 TFLOPS, INT8 624 TOPS "
                         "(dense; no FP8); HGX A100: 8 GPUs on NVSwitch"),
    "h100-80gb": GpuSpec("H100 SXM5 80GB", 3350e9, {"bf16": 989.5e12, "fp8": 1979e12, "int8": 1979e12}, 8,
                         "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: 3.35 TB/s, BF16 1,979 TFLOPS, "
                         f"FP8 3,958 TFLOPS, INT8 3,958 TOPS with sparsity ({_DENSE}); HGX H100: 8 GPUs on NVSwitch"),
    "h100-nvl": GpuSpec("H100 NVL 94GB", 3900e9, {"bf16": 835.5e12, "fp8": 1670.5e12, "int8": 1670.5e12}, 2,
                        "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL: 3.9 TB/s, BF16 1,671 TFLOPS, FP8 3,341 "
                        f"TFLOPS, INT8 3,341 TOPS with sparsity ({_DENSE}); NVLink bridge joins 2 GPUs"),
    "h200": GpuSpec("H200 SXM 141GB", 4800e9, {"bf16": 989.5e12, "fp8": 1979e12, "int8": 1979e12}, 8,
                    "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: 4.8 TB/s, BF16 1,979 TFLOPS, FP8 3,958 "
                    f"TFLOPS, INT8 3,958 TOPS with sparsity ({_DENSE}); HGX H200: 8 GPUs on NVSwitch"),
    "b200": GpuSpec("B200 (HGX B200)", 8000e9, {"bf16": 2.25e15, "fp8": 4.5e15, "int8": 4.5e15}, 8,
                    "NVIDIA HGX B200 datasheet (8 GPUs): 64 TB/s, FP16/BF16 36 PFLOPS, FP8 72 PFLOPS, INT8 72 "
                    f"POPS with sparsity, per GPU 8 TB/s, 4.5, 9 and 9 ({_DENSE}); 8 GPUs on NVSwitch"),
}


class SizingError(ValueError):
    """Bad input to the advisor: the message names the field."""


def _integer(name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SizingError(f"{name}: expected an integer from {low} to {high}, got {value!r}")
    return value


def _choice(name, value, choices):
    if value not in choices:
        raise SizingError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")
    return value


def _shape_values(model) -> dict:
    if isinstance(model, ModelShape):
        model = model.as_dict()
    if not isinstance(model, Mapping):
        raise SizingError("model: expected a ModelShape or a mapping of params, layers, kv_heads, head_dim")
    values = {
        "params": _integer("params", model.get("params"), 1, 10**14),
        "layers": _integer("layers", model.get("layers"), 1, 100_000),
        "kv_heads": _integer("kv_heads", model.get("kv_heads"), 1, 1 << 16),
        "head_dim": _integer("head_dim", model.get("head_dim"), 1, 1 << 16),
    }
    for name, high in (("hidden_size", 1 << 24), ("attention_heads", 1 << 16), ("intermediate_size", 1 << 26),
                       ("vocab_size", 1 << 28), ("active_params", 10**14)):
        value = model.get(name)
        values[name] = None if value is None else _integer(name, value, 1, high)
    if values["active_params"] is not None and values["active_params"] > values["params"]:
        raise SizingError("active_params: more than params")
    if values["attention_heads"] is not None and values["attention_heads"] % values["kv_heads"]:
        raise SizingError(f"kv_heads: {values['kv_heads']} does not divide attention_heads "
                          f"{values['attention_heads']}")
    values["dtype"] = model.get("dtype")
    return values


def size(model, *, dtype: str | None = None, kv_dtype: str | None = None, context: int = 4096,
         concurrency: int = 1, gpu_model: str = "h100-80gb", gpus_per_node: int = 8, nodes: int | None = None,
         batched_tokens: int = BATCHED_TOKENS) -> dict:
    shape = _shape_values(model)
    assumptions: list[str] = []
    if isinstance(model, ModelShape) and model.source.get("kv_cache"):
        assumptions.append(f"KV cache: {model.source['kv_cache']}")
    if dtype is None:
        dtype = shape["dtype"] if shape["dtype"] in WEIGHT_DTYPES else "bf16"
        assumptions.append(f"weights in {dtype} ({'the model files' if shape['dtype'] == dtype else 'default'})")
    _choice("dtype", dtype, WEIGHT_DTYPES)
    if kv_dtype is None:
        kv_dtype = "fp16" if dtype == "fp16" else ("fp32" if dtype == "fp32" else "bf16")
        assumptions.append(f"KV cache in {kv_dtype} (vLLM's kv_cache_dtype 'auto': the activations' dtype, "
                           "also for quantized weights)")
    _choice("kv_dtype", kv_dtype, KV_DTYPES)
    _integer("context", context, 1, 10_000_000)
    _integer("concurrency", concurrency, 1, 1_000_000)
    _integer("gpus_per_node", gpus_per_node, 1, 64)
    if nodes is not None:
        _integer("nodes", nodes, 1, 10_000)
    _integer("batched_tokens", batched_tokens, 1, 10_000_000)
    try:
        gpu = profiles.model(gpu_model)
    except profiles.UnknownModel as exc:
        raise SizingError(f"gpu_model: {exc.args[0]}") from None
    spec = GPU_SPECS[gpu.id]

    params, layers, kv_heads, head_dim = shape["params"], shape["layers"], shape["kv_heads"], shape["head_dim"]
    hidden = shape["hidden_size"]
    if hidden is None:
        hidden = max(1, round(math.sqrt(params / (12 * layers))))
        assumptions.append(f"hidden size {hidden} estimated as sqrt(params / (12 x layers)) (not given)")
    intermediate = shape["intermediate_size"]
    if intermediate is None:
        intermediate = math.ceil(3.5 * hidden)
        assumptions.append(f"intermediate size {intermediate} estimated as 3.5 x hidden (Llama 3's ratio; not given)")
    vocab = shape["vocab_size"]
    if vocab is None:
        vocab = 128_256
        assumptions.append("vocabulary of 128,256 tokens assumed for the logits (Llama 3's; not given)")
    heads = shape["attention_heads"]

    weights_bytes = math.ceil(params * DTYPE_NIBBLES[dtype] / 2)
    kv_bytes_per_token = 2 * layers * kv_heads * head_dim * DTYPE_NIBBLES[kv_dtype] // 2
    kv_bytes = kv_bytes_per_token * context * concurrency
    step_tokens = min(batched_tokens, context * concurrency)

    def need(tp: int, pp: int) -> dict:
        stage_layers = math.ceil(layers / pp)
        weights = math.ceil(weights_bytes * stage_layers / layers / tp)
        kv = 2 * stage_layers * math.ceil(kv_heads / tp) * head_dim * DTYPE_NIBBLES[kv_dtype] // 2
        kv *= context * concurrency
        activations = (step_tokens * (4 * hidden + 3 * math.ceil(intermediate / tp)) * ACTIVATION_BYTES
                       + concurrency * math.ceil(vocab / tp) * LOGIT_BYTES)
        return {"weights": weights, "kv": kv, "activations": activations, "overhead": RUNTIME_OVERHEAD_BYTES,
                "total": weights + kv + activations + RUNTIME_OVERHEAD_BYTES}

    candidates = []   # (kind, profile, tp, pp, device bytes, bandwidth share, compute share)
    for profile in sorted((p for p in gpu.profiles if not p.media_extensions
                           and p.compute_slices < profiles.COMPUTE_SLICES),
                          key=lambda p: (p.memory_slices, p.compute_slices)):
        candidates.append(("mig", profile.name, 1, 1, profile.memory_gb * GB,
                           profile.memory_slices / profiles.MEMORY_SLICES,
                           profile.compute_slices / profiles.COMPUTE_SLICES))
    candidates.append(("gpu", None, 1, 1, gpu.memory_gb * GB, 1.0, 1.0))
    domain = min(spec.nvlink_domain, gpus_per_node)
    tps = [tp for tp in (2, 4, 8, 16, 32, 64) if tp <= domain
           and (heads is None or heads % tp == 0) and (kv_heads % tp == 0 or tp % kv_heads == 0)]
    for tp in tps:
        candidates.append(("tp", None, tp, 1, gpu.memory_gb * GB, 1.0, 1.0))
    stage_tp = tps[-1] if tps else 1
    total_gpus = None if nodes is None else nodes * gpus_per_node
    stages = 2
    while stages <= layers and (total_gpus is None or stage_tp * stages <= total_gpus):
        candidates.append(("tp_pp", None, stage_tp, stages, gpu.memory_gb * GB, 1.0, 1.0))
        stages += 1

    placement = None
    chosen = None
    for kind, profile_name, tp, pp, device_bytes, bandwidth_share, compute_share in candidates:
        per_gpu = need(tp, pp)
        usable = math.floor(device_bytes * GPU_MEMORY_UTILIZATION)
        if per_gpu["total"] <= usable:
            placement = {"kind": kind, "profile": profile_name, "gpus": tp * pp, "tp": tp, "pp": pp,
                         "gpu_memory_bytes": device_bytes, "usable_bytes": usable,
                         "per_gpu_bytes": per_gpu["total"], "per_gpu": per_gpu}
            chosen = (bandwidth_share, compute_share)
            break

    reason = None
    if placement is None:
        where = "any number of nodes" if nodes is None else f"{nodes} node(s) of {gpus_per_node} GPUs"
        _, _, last_tp, last_pp, *_ = candidates[-1]
        reason = (f"does not fit on {where} of {gpu.id}: even TP {last_tp} x PP {last_pp} needs "
                  f"{need(last_tp, last_pp)['total'] / GB:.1f} GB per GPU, more than "
                  f"{GPU_MEMORY_UTILIZATION:.0%} of {gpu.memory_gb} GB")
        gpus, activation_bytes, overhead_bytes = 1, need(1, 1)["activations"], RUNTIME_OVERHEAD_BYTES
        bandwidth_share = compute_share = 1.0
    else:
        gpus = placement["gpus"]
        activation_bytes = placement["per_gpu"]["activations"] * gpus
        overhead_bytes = RUNTIME_OVERHEAD_BYTES * gpus
        bandwidth_share, compute_share = chosen
    total_bytes = weights_bytes + kv_bytes + activation_bytes + overhead_bytes

    bandwidth = spec.bandwidth * bandwidth_share * gpus
    step_bytes = weights_bytes + kv_bytes
    decode = concurrency * bandwidth / step_bytes
    compute_dtype = {"bf16": "bf16", "fp16": "bf16", "fp32": "bf16", "int4": "bf16", "int8": "int8",
                     "fp8": "fp8" if "fp8" in spec.flops else "bf16"}[dtype]
    peak = spec.flops[compute_dtype] * compute_share * gpus
    flops_per_token = 2 * (shape["active_params"] or params)
    prefill_rate = peak / flops_per_token

    assumptions += [
        f"weights: {params:,} parameters x {DTYPE_NIBBLES[dtype] / 2:g} bytes ({dtype})"
        + ("; int4 group-wise scales (about 3 % more at group size 128) not counted" if dtype == "int4" else ""),
        f"KV cache per token: 2 (K and V) x {layers} layers x {kv_heads} KV heads x {head_dim} head dim x "
        f"{DTYPE_NIBBLES[kv_dtype] / 2:g} bytes ({kv_dtype}) = {kv_bytes_per_token:,} bytes",
        f"KV cache: every one of {concurrency} sequence(s) at the full context of {context:,} tokens",
        f"activations: one forward step of {step_tokens:,} tokens (vLLM's max_num_batched_tokens {batched_tokens:,} "
        f"or all tokens if fewer) x (4 x hidden {hidden} + 3 x intermediate {intermediate} / TP) x "
        f"{ACTIVATION_BYTES} bytes, plus fp32 logits of {vocab:,} / TP per sequence",
        f"runtime overhead: {RUNTIME_OVERHEAD_BYTES / GIB:g} GiB per GPU (CUDA context and libraries, CUDA graphs, "
        "NCCL buffers)",
        f"a GPU (or MIG instance) is filled to at most {GPU_MEMORY_UTILIZATION:.0%} of its memory (vLLM's "
        "gpu_memory_utilization); memory is the nominal figure in GB (10^9 bytes), a little under the real one",
        f"tensor parallelism within one NVLink domain of {domain} GPU(s) ({spec.board}); TP divides the attention "
        "heads" + ("" if heads is not None else " (not given: only the KV heads were checked)")
        + " and divides or is a multiple of the KV heads (KV heads replicated when TP exceeds them)",
        "pipeline parallelism: stages of one TP group each, layers split evenly; each stage's share of the "
        "weights is its share of the layers",
        f"{gpu.id}: {spec.source}",
        f"decode ceiling: {concurrency} sequence(s) x memory bandwidth {bandwidth / 1e12:.3g} TB/s / bytes read "
        f"per step (all weights + the KV cache at full context = {step_bytes / GB:.2f} GB); real decode reaches "
        "a fraction of it",
        f"prefill ceiling: peak dense {compute_dtype} throughput {peak / 1e12:.4g} TFLOP/s / (2 x "
        f"{'active ' if shape['active_params'] else ''}parameters) FLOPs per token; attention's own FLOPs "
        "(growing with the context) and the achievable fraction of peak are not counted",
    ]
    if dtype == "int4" or (dtype == "fp8" and compute_dtype == "bf16"):
        assumptions.append(f"{dtype} weights are dequantized to bf16 for the matrix products (weight-only "
                           "quantization)")
    if placement and placement["kind"] == "mig":
        assumptions.append(f"MIG {placement['profile']}: its share of the bandwidth (memory slices / 8) and of "
                           "the compute (compute slices / 7)")
    if placement and placement["pp"] > 1:
        assumptions.append("decode ceiling with pipeline parallelism assumes enough sequences in flight to "
                           "keep every stage busy")

    return {
        "model": {"params": params, "active_params": shape["active_params"], "layers": layers,
                  "kv_heads": kv_heads, "head_dim": head_dim, "hidden_size": hidden, "attention_heads": heads,
                  "intermediate_size": intermediate, "vocab_size": vocab},
        "dtype": dtype, "kv_dtype": kv_dtype, "context": context, "concurrency": concurrency,
        "gpu_model": gpu.id, "gpus_per_node": gpus_per_node, "nodes": nodes,
        "weights_bytes": weights_bytes,
        "kv_bytes_per_token": kv_bytes_per_token,
        "kv_bytes": kv_bytes,
        "activation_bytes": activation_bytes,
        "overhead_bytes": overhead_bytes,
        "total_bytes": total_bytes,
        "fits": placement is not None,
        "reason": reason,
        "placement": placement,
        "decode_tokens_per_s_ceiling": round(decode, 1),
        "decode_tokens_per_s_per_sequence_ceiling": round(decode / concurrency, 1),
        "prefill": {"compute_dtype": compute_dtype, "flops_per_token": flops_per_token, "peak_flops": peak,
                    "tokens_per_s_ceiling": round(prefill_rate, 1),
                    "seconds_for_context": round(context / prefill_rate, 4)},
        "display": {"weights": human_bytes(weights_bytes), "kv_per_token": human_bytes(kv_bytes_per_token, binary=True),
                    "kv": human_bytes(kv_bytes), "total": human_bytes(total_bytes)},
        "assumptions": assumptions,
    }


def human_bytes(value: int, *, binary: bool = False) -> str:
    """4 significant digits: 141,107,412,992 -> "141.1 GB"; 16,060,522,496 -> "16.06 GB";
    327,680 (binary) -> "320 KiB"."""
    base, units = (1024, ("B", "KiB", "MiB", "GiB", "TiB", "PiB")) if binary else \
        (1000, ("B", "kB", "MB", "GB", "TB", "PB"))
    amount = float(value)
    for unit in units:
        if abs(amount) < base or unit == units[-1]:
            return f"{amount:.4g} {unit}"
        amount /= base
    raise AssertionError("unreachable")


def request_for(result: dict, name: str, replicas: int = 1, isolation: str = "soft") -> dict:
    """A planner request (planner.plan's `requests` item) for the sized model: memory_gb is what one
    GPU or MIG instance must have so the model's share fills at most 90 % of it. A model that needs
    more than one GPU becomes an exclusive request of whole GPUs, one per GPU of each replica (the
    planner does not keep a replica's GPUs on one node: place those with the TP group in mind)."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise SizingError(f"name: {name!r} does not match {NAME_PATTERN.pattern}")
    _integer("replicas", replicas, 1, 100_000)
    _choice("isolation", isolation, ISOLATIONS)
    placement = result.get("placement")
    if not result.get("fits") or not placement:
        raise SizingError(f"{name}: the model does not fit ({result.get('reason')})")
    memory_gb = math.ceil(placement["per_gpu_bytes"] / GPU_MEMORY_UTILIZATION / GB * 100) / 100
    if placement["gpus"] > 1:
        return {"name": name, "memory_gb": memory_gb, "replicas": replicas * placement["gpus"],
                "isolation": "exclusive"}
    return {"name": name, "memory_gb": memory_gb, "replicas": replicas, "isolation": isolation}
