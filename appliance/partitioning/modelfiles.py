"""A model's shape from its own files, without loading a weight: the Hugging Face config.json and the
headers of its safetensors files (one file, or shards named by model.safetensors.index.json).

read_model_dir(path) -> ModelShape. The parameter count is exact: the sum of the tensor shapes in the
safetensors headers (numbers of elements, whatever the dtype). Only when a directory has no safetensors
file at all, and its architecture is a plain decoder whose tensors follow from config.json (Llama,
Mistral, Mixtral, Qwen2, Qwen3), is the count computed from the config; `source["params"]` says which.

The directory is user input: its path has a type and a pattern, every file read must be a regular file
inside it (a symbolic link that resolves outside is refused: a Hugging Face cache snapshot links to
../../blobs, so download with `--local-dir`), and every file has a size limit. Any problem raises
ModelFileError with one message naming the file (and the field).

Pure Python plus the safetensors package (headers only): no Django; the model registry reuses it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
from dataclasses import asdict, dataclass, field

PATH_PATTERN = re.compile(r"^/[A-Za-z0-9._/@+-]{0,4095}$")
SHARD_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}\.safetensors$")
CONFIG_LIMIT = 1 << 20            # config.json: 1 MiB
INDEX_LIMIT = 32 << 20            # model.safetensors.index.json: 32 MiB
HEADER_LIMIT = 100_000_000        # a safetensors header (the safetensors library's own limit)
MAX_SHARDS = 4096
MAX_TENSORS = 1_000_000
MAX_DIM = 1 << 40

# safetensors dtype -> bytes per element ("int4" packed formats are stored as I32/U8 and counted as stored)
SAFETENSORS_DTYPES = {
    "F64": ("fp64", 8), "F32": ("fp32", 4), "F16": ("fp16", 2), "BF16": ("bf16", 2),
    "F8_E4M3": ("fp8", 1), "F8_E5M2": ("fp8", 1), "F8_E8M0": ("fp8", 1), "F4": ("fp4", 0.5),
    "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1),
    "U64": ("uint64", 8), "U32": ("uint32", 4), "U16": ("uint16", 2), "U8": ("uint8", 1), "BOOL": ("bool", 1),
}
CONFIG_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
                 "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}
# architectures whose tensors follow from config.json alone (see _params_from_config)
FORMULA_ARCHITECTURES = {"LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM",
                         "Qwen2ForCausalLM", "Qwen3ForCausalLM"}
EXPERT_TENSOR = re.compile(r"(^|\.)experts\.")


class ModelFileError(ValueError):
    """A model directory that cannot be read: the message names the file (and field)."""


@dataclass
class ModelShape:
    params: int
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    dtype: str                     # bf16, fp16, fp32, fp8, ... (the weights' dtype)
    vocab_size: int | None = None
    intermediate_size: int | None = None
    architecture: str | None = None
    tie_word_embeddings: bool = False
    experts: int | None = None     # MoE: experts per layer
    experts_per_token: int | None = None
    active_params: int | None = None   # MoE: parameters one token goes through (None for dense models)
    source: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def read_model_dir(path: str, *, roots: list[str] | None = None) -> ModelShape:
    """The shape of the model in directory `path` (absolute): config.json plus safetensors headers.
    With `roots` (say, where the appliance keeps models), the directory must resolve inside one of them:
    what a service that takes the path from a less trusted user should pass."""
    root = _checked_dir(path)
    if roots is not None:
        allowed = [os.path.realpath(r) for r in roots]
        if not any(root == r or root.startswith(r.rstrip(os.sep) + os.sep) for r in allowed):
            raise ModelFileError(f"model directory {path}: not under {', '.join(roots) or '(no directory allowed)'}")
    config_path = _inside(root, "config.json")
    config = _read_json(config_path, CONFIG_LIMIT)
    if not isinstance(config, dict):
        raise ModelFileError(f"{config_path}: expected a JSON object")
    dims = _dims_from_config(config, config_path)

    index_path = os.path.join(root, "model.safetensors.index.json")
    if os.path.lexists(index_path):
        shards = _shards_from_index(root, _inside(root, "model.safetensors.index.json"))
        params_source = "model.safetensors.index.json shards"
    else:
        shards = sorted(name for name in os.listdir(root) if name.endswith(".safetensors"))
        if "consolidated.safetensors" in shards and len(shards) > 1:
            # Mistral's repositories hold the same weights twice: consolidated (its own format) and HF's
            shards.remove("consolidated.safetensors")
        if len(shards) > MAX_SHARDS:
            raise ModelFileError(f"{root}: {len(shards)} safetensors files (at most {MAX_SHARDS})")
        params_source = "safetensors headers"

    source = {"dir": root, "config": config_path}
    if dims["kv_cache"]:
        source["kv_cache"] = dims["kv_cache"]
    quantization = config.get("quantization_config")
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    bits = (quantization.get("bits", quantization.get("w_bit")) if isinstance(quantization, dict) else None)
    packed_bits = bits if method in ("gptq", "awq") and bits in (4, 8) and not isinstance(bits, bool) else None
    if shards:
        params, by_dtype, expert_params, files, extra = _count_tensors(root, shards, packed_bits)
        source["params"] = f"{params_source}: {', '.join(files)} (exact, from tensor shapes)"
        source["dtypes"] = {name: count for name, count in sorted(by_dtype.items())}
        dtype = max(by_dtype.items(), key=lambda item: item[1])[0]
        if dims["dtype"] and dims["dtype"] != dtype:
            source["dtype"] = f"safetensors ({dtype}); config.json says {dims['dtype']}"
        else:
            source["dtype"] = "safetensors headers"
    else:
        if dims["architecture"] not in FORMULA_ARCHITECTURES:
            raise ModelFileError(
                f"{root}: no safetensors file, and the parameters of architecture {dims['architecture']!r} "
                f"cannot be computed from config.json alone (known: {', '.join(sorted(FORMULA_ARCHITECTURES))})")
        params, expert_params = _params_from_config(dims, config)
        source["params"] = f"config.json ({dims['architecture']} tensor formula; no safetensors file)"
        dtype = dims["dtype"] or "bf16"
        source["dtype"] = "config.json torch_dtype" if dims["dtype"] else "not stated; bf16 assumed"
    if packed_bits and shards:
        source["quantization"] = (f"{method} {packed_bits}-bit: each int32 of a qweight counted as "
                                  f"{32 // packed_bits} weights; {extra:,} elements of scales, zeros and group "
                                  "indices are not parameters")
    elif quantization is not None:
        source["quantization"] = (f"{method or 'unknown'}: packed tensors are counted as stored, so the "
                                  "parameter count is that of the stored elements")

    active = None
    if dims["experts"] and dims["experts_per_token"] and expert_params:
        active = params - expert_params + expert_params * dims["experts_per_token"] // dims["experts"]
    return ModelShape(params=params, layers=dims["layers"], hidden_size=dims["hidden_size"],
                      attention_heads=dims["attention_heads"], kv_heads=dims["kv_heads"],
                      head_dim=dims["head_dim"], dtype=dtype, vocab_size=dims["vocab_size"],
                      intermediate_size=dims["intermediate_size"], architecture=dims["architecture"],
                      tie_word_embeddings=dims["tie"], experts=dims["experts"],
                      experts_per_token=dims["experts_per_token"], active_params=active, source=source)


# -- the directory and its files ---------------------------------------------------------------------------

def _checked_dir(path) -> str:
    if not isinstance(path, str) or not PATH_PATTERN.fullmatch(path):
        raise ModelFileError(f"model directory {path!r}: expected an absolute path of letters, digits and "
                             "._/@+- (at most 4096 characters)")
    if any(part == ".." for part in path.split("/")):
        raise ModelFileError(f"model directory {path!r}: '..' is not allowed")
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise ModelFileError(f"model directory {path}: not a directory")
    return real


def _inside(root: str, name: str) -> str:
    """The real path of `name` in `root`: a regular file that does not resolve outside the directory."""
    candidate = os.path.join(root, name)
    if not os.path.lexists(candidate):
        raise ModelFileError(f"{candidate}: missing")
    real = os.path.realpath(candidate)
    if not real.startswith(root + os.sep):
        raise ModelFileError(f"{candidate}: a link that leads outside the model directory ({real})")
    info = os.stat(real)
    if not stat.S_ISREG(info.st_mode):
        raise ModelFileError(f"{candidate}: not a regular file")
    return real


def _read_json(path: str, limit: int):
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ModelFileError(f"{path}: larger than {limit} bytes")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise ModelFileError(f"{path}{where}: not valid JSON ({exc.args[0] if exc.args else exc})") from None
    except RecursionError:
        raise ModelFileError(f"{path}: nested too deeply") from None


def _shards_from_index(root: str, index_path: str) -> list[str]:
    index = _read_json(index_path, INDEX_LIMIT)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelFileError(f"{index_path}: weight_map: expected an object of tensor name -> file")
    shards = set()
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not SHARD_PATTERN.fullmatch(shard):
            raise ModelFileError(f"{index_path}: weight_map[{tensor!r}]: {shard!r} is not a file name "
                                 "ending in .safetensors (letters, digits, ._-)")
        shards.add(shard)
    if len(shards) > MAX_SHARDS:
        raise ModelFileError(f"{index_path}: {len(shards)} shards (at most {MAX_SHARDS})")
    return sorted(shards)


def _count_tensors(root: str, shards: list[str], packed_bits: int | None = None):
    """Parameters (elements) by dtype over the shards. GPTQ/AWQ (packed_bits): a qweight's int32 holds
    32 / bits weights; its scales, zeros and group indices are not parameters (returned apart)."""
    from safetensors import SafetensorError, safe_open

    params = 0
    extra = 0
    expert_params = 0
    by_dtype: dict[str, int] = {}
    tensors = 0
    seen: dict[str, str] = {}
    for shard in shards:
        if not SHARD_PATTERN.fullmatch(shard):
            raise ModelFileError(f"{os.path.join(root, shard)}: file name not allowed (letters, digits, ._-)")
        path = _inside(root, shard)
        _check_header(path)
        try:
            with safe_open(path, framework="numpy") as handle:
                for name in handle.keys():
                    tensors += 1
                    if name in seen:
                        raise ModelFileError(f"{path}: tensor {name!r} is also in {seen[name]}")
                    seen[name] = shard
                    if tensors > MAX_TENSORS:
                        raise ModelFileError(f"{path}: more than {MAX_TENSORS} tensors in the model")
                    piece = handle.get_slice(name)
                    shape, kind = piece.get_shape(), piece.get_dtype()
                    if kind not in SAFETENSORS_DTYPES:
                        raise ModelFileError(f"{path}: tensor {name!r}: unknown dtype {kind!r}")
                    count = 1
                    for dim in shape:
                        if not 0 <= dim <= MAX_DIM:
                            raise ModelFileError(f"{path}: tensor {name!r}: dimension {dim} out of range")
                        count *= dim
                    dtype = SAFETENSORS_DTYPES[kind][0]
                    if packed_bits and name.endswith(".qweight") and kind == "I32":
                        count, dtype = count * (32 // packed_bits), f"int{packed_bits}"
                    elif packed_bits and name.endswith((".qzeros", ".scales", ".g_idx")):
                        extra += count
                        continue
                    params += count
                    by_dtype[dtype] = by_dtype.get(dtype, 0) + count
                    if EXPERT_TENSOR.search(name):
                        expert_params += count
        except SafetensorError as exc:
            raise ModelFileError(f"{path}: not a valid safetensors file ({exc})") from None
    if not params:
        raise ModelFileError(f"{root}: the safetensors files hold no tensor")
    return params, by_dtype, expert_params, shards, extra


def _check_header(path: str) -> None:
    """The length prefix of a safetensors file within limits and within the file, before the library
    maps it."""
    size = os.stat(path).st_size
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        prefix = handle.read(8)
    if len(prefix) < 8:
        raise ModelFileError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (length,) = struct.unpack("<Q", prefix)
    if length > HEADER_LIMIT:
        raise ModelFileError(f"{path}: header of {length} bytes (at most {HEADER_LIMIT})")
    if 8 + length > size:
        raise ModelFileError(f"{path}: header of {length} bytes runs past the end of the file ({size} bytes)")


# -- config.json --------------------------------------------------------------------------------------------

def _dims_from_config(config: dict, path: str) -> dict:
    text = config.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" not in config:
        inner = dict(text)
        inner.setdefault("architectures", config.get("architectures"))
        inner.setdefault("torch_dtype", config.get("torch_dtype"))
        config, path = inner, f"{path} text_config"

    def integer(keys, *, required=True, low=1, high=1 << 31):
        for key in keys:
            if key in config and config[key] is not None:
                value = config[key]
                if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                    raise ModelFileError(f"{path}: {key}: expected an integer from {low} to {high}, "
                                         f"got {value!r}")
                return value
        if required:
            raise ModelFileError(f"{path}: missing {keys[0]}")
        return None

    layers = integer(("num_hidden_layers", "n_layer", "num_layers"), high=100_000)
    hidden = integer(("hidden_size", "n_embd", "d_model"), high=1 << 24)
    heads = integer(("num_attention_heads", "n_head"), high=1 << 16)
    kv_heads = integer(("num_key_value_heads", "num_kv_heads"), required=False, high=1 << 16)
    if kv_heads is None:
        kv_heads = 1 if config.get("multi_query") is True else heads
    head_dim = integer(("head_dim",), required=False, high=1 << 16)
    if head_dim is None:
        if hidden % heads:
            raise ModelFileError(f"{path}: hidden_size {hidden} is not a multiple of num_attention_heads "
                                 f"{heads}, and head_dim is not given")
        head_dim = hidden // heads
    kv_cache = None
    lora_rank = integer(("kv_lora_rank",), required=False, high=1 << 16)
    if lora_rank is not None:
        # multi-head latent attention (DeepSeek V2/V3): each layer caches one latent of kv_lora_rank plus
        # the shared rotary key of qk_rope_head_dim, for all heads: written as 1 "KV head" whose K and V
        # halves together are that many elements (sizing's 2 x kv_heads x head_dim)
        rope = integer(("qk_rope_head_dim",), high=1 << 16)
        if (lora_rank + rope) % 2:
            raise ModelFileError(f"{path}: kv_lora_rank + qk_rope_head_dim ({lora_rank + rope}) is odd")
        kv_heads, head_dim = 1, (lora_rank + rope) // 2
        kv_cache = (f"multi-head latent attention: kv_lora_rank {lora_rank} + qk_rope_head_dim {rope} elements "
                    f"per layer and token, counted as 1 KV head of head dim {head_dim}")
    architectures = config.get("architectures")
    if architectures is not None and (not isinstance(architectures, list)
                                      or not all(isinstance(a, str) for a in architectures)):
        raise ModelFileError(f"{path}: architectures: expected a list of names")
    raw_dtype = config.get("torch_dtype", config.get("dtype"))
    if raw_dtype is not None and not isinstance(raw_dtype, str):
        raise ModelFileError(f"{path}: torch_dtype: expected a name such as bfloat16")
    tie = config.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise ModelFileError(f"{path}: tie_word_embeddings: expected true or false")
    return {
        "layers": layers, "hidden_size": hidden, "attention_heads": heads, "kv_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": integer(("vocab_size",), required=False, high=1 << 28),
        "intermediate_size": integer(("intermediate_size", "n_inner"), required=False, high=1 << 26),
        "moe_intermediate_size": integer(("moe_intermediate_size",), required=False, high=1 << 26),
        "experts": integer(("num_local_experts", "num_experts", "n_routed_experts"), required=False,
                           high=1 << 16),
        "experts_per_token": integer(("num_experts_per_tok", "moe_top_k"), required=False, high=1 << 16),
        "architecture": architectures[0] if architectures else None,
        "dtype": CONFIG_DTYPES.get(raw_dtype) if raw_dtype else None,
        "tie": tie,
        "kv_cache": kv_cache,
    }


def _params_from_config(dims: dict, config: dict) -> tuple[int, int]:
    """The tensors of a Llama-family decoder, from the config: embeddings (and lm_head unless tied),
    per layer q/k/v/o projections (Qwen2: q/k/v biases; Qwen3: q/k norms), the gated MLP (three
    matrices; Mixtral: per expert, plus the router), two RMSNorms; the final norm."""
    h, heads, kv, hd = dims["hidden_size"], dims["attention_heads"], dims["kv_heads"], dims["head_dim"]
    vocab, inter = dims["vocab_size"], dims["intermediate_size"]
    if not vocab or not inter:
        raise ModelFileError("config.json: vocab_size and intermediate_size are needed to count the parameters "
                             "without safetensors files")
    attention = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    if dims["architecture"] == "Qwen2ForCausalLM":
        attention += heads * hd + 2 * kv * hd
    if dims["architecture"] == "Qwen3ForCausalLM":
        attention += 2 * hd
    expert_params = 0
    if dims["architecture"] == "MixtralForCausalLM":
        experts = dims["experts"] or 8
        expert_params = dims["layers"] * experts * 3 * h * inter
        mlp = experts * 3 * h * inter + experts * h
    else:
        mlp = 3 * h * inter
    per_layer = attention + mlp + 2 * h
    embeddings = vocab * h * (1 if dims["tie"] else 2)
    return dims["layers"] * per_layer + embeddings + h, expert_params
