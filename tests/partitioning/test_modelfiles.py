"""Reading a model's shape from its files: a small real safetensors model written here, sharded with an
index, Llama-3-70B's real tensor layout in header-only (sparse) shards, config.json alone, and the
refusals (paths, links, sizes, broken files)."""

import json
import os
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from appliance.partitioning import modelfiles, sizing
from appliance.partitioning.modelfiles import ModelFileError, read_model_dir

# A tiny Llama: vocab 64, hidden 16, 2 layers, 4 heads of 4, 2 KV heads, MLP 32, untied embeddings.
TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "intermediate_size": 32, "vocab_size": 64, "torch_dtype": "float16", "tie_word_embeddings": False}
# embeddings 64x16 = 1024, lm_head 1024; per layer q 256 + k 128 + v 128 + o 256 + MLP 3x16x32 = 1536
# + 2 norms 32 = 2336, x2 = 4672; final norm 16
TINY_PARAMS = 6736

# meta-llama/Meta-Llama-3-70B config.json (the published one, fields the reader uses)
LLAMA3_70B_CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
                     "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
                     "vocab_size": 128256, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
                     "rope_theta": 500000.0, "max_position_embeddings": 8192}
LLAMA3_8B_CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
                    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                    "vocab_size": 128256, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def llama_tensors(config):
    """Hugging Face Llama tensor names and shapes for a config (what the checkpoints hold)."""
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = config["num_key_value_heads"] * h // config["num_attention_heads"]
    tensors = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,), "lm_head.weight": (vocab, h)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update({p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                        p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                        p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                        p + "mlp.down_proj.weight": (h, inter), p + "input_layernorm.weight": (h,),
                        p + "post_attention_layernorm.weight": (h,)})
    return tensors


def write_tiny(directory, *, shards=1):
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps(TINY_CONFIG))
    rng = np.random.default_rng(1)
    arrays = {name: rng.standard_normal(shape).astype(np.float16) for name, shape in llama_tensors(TINY_CONFIG).items()}
    names = sorted(arrays)
    if shards == 1:
        save_file(arrays, str(directory / "model.safetensors"), metadata={"format": "pt"})
        return directory
    weight_map = {}
    for n in range(shards):
        file = f"model-{n + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: arrays[name] for name in names[n::shards]}
        save_file(part, str(directory / file), metadata={"format": "pt"})
        weight_map.update({name: file for name in part})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return directory


def write_header_only(path, tensors, dtype="BF16", width=2):
    """A safetensors file with a real header and a sparse (unwritten) data section of the right size."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors.items():
        size = int(np.prod(shape, dtype=np.int64)) * width
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(blob)))
        handle.write(blob)
        handle.truncate(8 + len(blob) + offset)


def test_a_small_real_model(tmp_path):
    shape = read_model_dir(str(write_tiny(tmp_path / "tiny")))
    assert (shape.params, shape.layers, shape.hidden_size, shape.attention_heads, shape.kv_heads, shape.head_dim,
            shape.dtype, shape.vocab_size, shape.intermediate_size) == (TINY_PARAMS, 2, 16, 4, 2, 4, "fp16", 64, 32)
    assert shape.architecture == "LlamaForCausalLM"
    assert shape.source["params"] == "safetensors headers: model.safetensors (exact, from tensor shapes)"
    assert shape.source["dtypes"] == {"fp16": TINY_PARAMS}
    result = sizing.size(shape, context=16, gpu_model="a100-40gb")
    assert result["weights_bytes"] == 2 * TINY_PARAMS
    assert result["kv_bytes_per_token"] == 2 * 2 * 2 * 4 * 2      # K and V x layers x KV heads x head dim x fp16
    assert result["dtype"] == "fp16"


def test_a_sharded_model_through_its_index(tmp_path):
    shape = read_model_dir(str(write_tiny(tmp_path / "sharded", shards=3)))
    assert shape.params == TINY_PARAMS
    assert shape.source["params"].startswith("model.safetensors.index.json shards: model-00001-of-00003.safetensors")


def test_llama3_70b_from_its_real_tensor_layout(tmp_path):
    directory = tmp_path / "llama-3-70b"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(LLAMA3_70B_CONFIG))
    tensors = llama_tensors(LLAMA3_70B_CONFIG)
    names = sorted(tensors)
    weight_map = {}
    for n in range(4):
        file = f"model-{n + 1:05d}-of-00004.safetensors"
        write_header_only(directory / file, {name: tensors[name] for name in names[n::4]})
        weight_map.update({name: file for name in names[n::4]})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    shape = read_model_dir(str(directory))
    assert shape.params == 70_553_706_496
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.dtype) == (80, 8, 128, "bf16")
    result = sizing.size(shape, context=8192, gpu_model="h100-80gb")
    assert (result["weights_bytes"], result["display"]["weights"]) == (141_107_412_992, "141.1 GB")
    assert (result["kv_bytes_per_token"], result["display"]["kv_per_token"]) == (327_680, "320 KiB")


@pytest.mark.parametrize("config, params", [(LLAMA3_70B_CONFIG, 70_553_706_496), (LLAMA3_8B_CONFIG, 8_030_261_248),
                                            (TINY_CONFIG, TINY_PARAMS)])
def test_config_alone_counts_a_llama(tmp_path, config, params):
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = read_model_dir(str(tmp_path))
    assert shape.params == params
    assert shape.source["params"] == "config.json (LlamaForCausalLM tensor formula; no safetensors file)"


def test_config_alone_of_an_unknown_architecture_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**TINY_CONFIG, "architectures": ["FalconForCausalLM"]}))
    with pytest.raises(ModelFileError, match="no safetensors file, and the parameters of architecture "
                                             "'FalconForCausalLM' cannot be computed"):
        read_model_dir(str(tmp_path))


def test_moe_active_parameters(tmp_path):
    config = {**TINY_CONFIG, "architectures": ["MixtralForCausalLM"], "num_local_experts": 4,
              "num_experts_per_tok": 2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    tensors = {}
    for name, shape in llama_tensors(TINY_CONFIG).items():
        if ".mlp." in name:
            for e in range(4):
                tensors[name.replace(".mlp.", f".block_sparse_moe.experts.{e}.")] = shape
        else:
            tensors[name] = shape
    for i in range(2):
        tensors[f"model.layers.{i}.block_sparse_moe.gate.weight"] = (4, 16)
    write_header_only(tmp_path / "model.safetensors", tensors)
    shape = read_model_dir(str(tmp_path))
    # dense part: 6736 - 2 x 1536 = 3664, + routers 2 x 64 = 3792; experts 2 layers x 4 x 1536 = 12288
    assert shape.params == 3792 + 12288
    assert shape.active_params == 3792 + 12288 * 2 // 4
    assert (shape.experts, shape.experts_per_token) == (4, 2)


# -- refusals ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path, message", [
    ("models/tiny", "expected an absolute path"),
    ("/tmp/a b", "expected an absolute path"),
    ("/tmp/$(reboot)", "expected an absolute path"),
    ("/tmp/../etc", "'..' is not allowed"),
    ("/tmp/tiny\n", "expected an absolute path"),  # `$` would match before the newline
    (None, "expected an absolute path"),
])
def test_bad_paths(path, message):
    with pytest.raises(ModelFileError, match=message.replace("(", r"\(").replace("$", r"\$")):
        read_model_dir(path)


def test_not_a_directory_and_missing_config(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelFileError, match="not a directory"):
        read_model_dir(str(tmp_path / "file"))
    with pytest.raises(ModelFileError, match=f"{tmp_path}/config.json: missing"):
        read_model_dir(str(tmp_path))


def test_a_link_out_of_the_directory_is_refused(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(TINY_CONFIG))
    model = tmp_path / "model"
    model.mkdir()
    os.symlink(secret, model / "config.json")
    with pytest.raises(ModelFileError, match="config.json: a link that leads outside the model directory"):
        read_model_dir(str(model))


def test_a_link_inside_the_directory_is_followed(tmp_path):
    model = write_tiny(tmp_path / "tiny")
    (model / "blobs").mkdir()
    os.rename(model / "model.safetensors", model / "blobs" / "abc")
    os.symlink(model / "blobs" / "abc", model / "model.safetensors")
    assert read_model_dir(str(model)).params == TINY_PARAMS


def test_a_linked_shard_out_of_the_directory_is_refused(tmp_path):
    model = write_tiny(tmp_path / "tiny")
    os.rename(model / "model.safetensors", tmp_path / "elsewhere.safetensors")
    os.symlink(tmp_path / "elsewhere.safetensors", model / "model.safetensors")
    with pytest.raises(ModelFileError, match="model.safetensors: a link that leads outside"):
        read_model_dir(str(model))


def test_roots(tmp_path):
    (tmp_path / "models").mkdir()
    model = write_tiny(tmp_path / "models" / "tiny")
    assert read_model_dir(str(model), roots=[str(tmp_path / "models")]).params == TINY_PARAMS
    with pytest.raises(ModelFileError, match="not under /srv/models"):
        read_model_dir(str(model), roots=["/srv/models"])


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "sub/x.safetensors", "x.bin", 7])
def test_index_names_only_files_of_the_directory(tmp_path, shard):
    model = write_tiny(tmp_path / "tiny", shards=2)
    index = json.loads((model / "model.safetensors.index.json").read_text())
    index["weight_map"]["lm_head.weight"] = shard
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelFileError, match=r"model.safetensors.index.json: weight_map\['lm_head.weight'\]: .* is "
                                             "not a file name ending in .safetensors"):
        read_model_dir(str(model))


def test_a_missing_shard_is_named(tmp_path):
    model = write_tiny(tmp_path / "tiny", shards=2)
    os.remove(model / "model-00002-of-00002.safetensors")
    with pytest.raises(ModelFileError, match="model-00002-of-00002.safetensors: missing"):
        read_model_dir(str(model))


def test_an_oversized_header_is_refused_before_the_library_reads_it(tmp_path):
    model = write_tiny(tmp_path / "tiny")
    with open(model / "model.safetensors", "r+b") as handle:
        handle.write(struct.pack("<Q", 1 << 40))
    with pytest.raises(ModelFileError, match=r"model.safetensors: header of 1099511627776 bytes \(at most 100000000\)"):
        read_model_dir(str(model))


def test_a_header_past_the_end_of_the_file_is_refused(tmp_path):
    model = write_tiny(tmp_path / "tiny")
    with open(model / "model.safetensors", "r+b") as handle:
        handle.write(struct.pack("<Q", 50_000))
    with pytest.raises(ModelFileError, match="header of 50000 bytes runs past the end of the file"):
        read_model_dir(str(model))


def test_a_broken_header_is_one_clear_error(tmp_path):
    model = write_tiny(tmp_path / "tiny")
    data = (model / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    (model / "model.safetensors").write_bytes(data[:8] + b"{" * length + data[8 + length:])
    with pytest.raises(ModelFileError, match="model.safetensors: not a valid safetensors file"):
        read_model_dir(str(model))


def test_a_short_file_is_refused(tmp_path):
    model = write_tiny(tmp_path / "tiny")
    (model / "model.safetensors").write_bytes(b"abc")
    with pytest.raises(ModelFileError, match="shorter than its 8-byte header length"):
        read_model_dir(str(model))


@pytest.mark.parametrize("text, message", [
    ("{\n  \"hidden_size\": 16,\n  oops\n}", r"config.json line 3 column 3: not valid JSON"),
    ("[1, 2]", "config.json: expected a JSON object"),
    (json.dumps({**TINY_CONFIG, "num_hidden_layers": "2"}), "config.json: num_hidden_layers: expected an integer"),
    (json.dumps({**TINY_CONFIG, "num_hidden_layers": -2}), "config.json: num_hidden_layers: expected an integer"),
    (json.dumps({k: v for k, v in TINY_CONFIG.items() if k != "num_hidden_layers"}),
     "config.json: missing num_hidden_layers"),
    (json.dumps({**TINY_CONFIG, "tie_word_embeddings": "no"}), "tie_word_embeddings: expected true or false"),
    (json.dumps({**TINY_CONFIG, "hidden_size": 18}), "hidden_size 18 is not a multiple of num_attention_heads 4"),
    (" " * (modelfiles.CONFIG_LIMIT + 1), r"config.json: larger than 1048576 bytes"),
    ("[" * 200_000 + "]" * 200_000, "config.json: nested too deeply"),
])
def test_bad_config(tmp_path, text, message):
    model = write_tiny(tmp_path / "tiny")
    (model / "config.json").write_text(text)
    with pytest.raises(ModelFileError, match=message):
        read_model_dir(str(model))


def test_a_nested_text_config(tmp_path):
    model = write_tiny(tmp_path / "tiny")
    (model / "config.json").write_text(json.dumps({"architectures": ["LlavaForConditionalGeneration"],
                                                   "text_config": {k: v for k, v in TINY_CONFIG.items()
                                                                   if k != "architectures"}}))
    shape = read_model_dir(str(model))
    assert (shape.layers, shape.kv_heads, shape.params) == (2, 2, TINY_PARAMS)


def test_a_config_that_is_not_a_regular_file_is_refused(tmp_path):
    model = write_tiny(tmp_path / "tiny")
    os.remove(model / "config.json")
    (model / "config.json").mkdir()
    with pytest.raises(ModelFileError, match="config.json: not a regular file"):
        read_model_dir(str(model))
    os.rmdir(model / "config.json")
    os.mkfifo(model / "config.json")     # reading a FIFO would wait for a writer forever
    with pytest.raises(ModelFileError, match="config.json: not a regular file"):
        read_model_dir(str(model))


def test_multi_head_latent_attention_caches_the_latent(tmp_path):
    # deepseek-ai/DeepSeek-V3 config.json: 61 layers, 128 heads (num_key_value_heads 128), kv_lora_rank 512,
    # qk_rope_head_dim 64: one 576-element latent per layer and token, 70,272 bytes in bf16
    config = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
              "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
              "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_header_only(tmp_path / "model.safetensors", {"model.embed_tokens.weight": (129280, 7168)})
    shape = read_model_dir(str(tmp_path))
    assert (shape.kv_heads, shape.head_dim) == (1, 288)
    result = sizing.size(shape, context=1024, gpu_model="h200")
    assert result["kv_bytes_per_token"] == 70_272
    assert result["assumptions"][0] == ("KV cache: multi-head latent attention: kv_lora_rank 512 + qk_rope_head_dim "
                                        "64 elements per layer and token, counted as 1 KV head of head dim 288")


def test_a_tensor_in_two_files_is_refused(tmp_path):
    model = write_tiny(tmp_path / "tiny")
    save_file({"lm_head.weight": np.zeros((64, 16), dtype=np.float16)}, str(model / "extra.safetensors"))
    with pytest.raises(ModelFileError, match="tensor 'lm_head.weight' is also in extra.safetensors"):
        read_model_dir(str(model))


def test_mistral_consolidated_copy_is_not_counted_twice(tmp_path):
    model = write_tiny(tmp_path / "tiny")
    save_file({"tok_embeddings.weight": np.zeros((64, 16), dtype=np.float16)},
              str(model / "consolidated.safetensors"))
    assert read_model_dir(str(model)).params == TINY_PARAMS


def test_gptq_int4_weights_are_unpacked(tmp_path):
    # GPTQ 4-bit, group size 8: each linear layer's weight [out, in] is stored as qweight int32 [in / 8, out],
    # qzeros int32 [in / 8, out / 8] and scales fp16 [in / 8, out]
    config = {**TINY_CONFIG, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 8}}
    tensors, dtypes = {}, {}
    for name, shape in llama_tensors(TINY_CONFIG).items():
        if name.endswith("proj.weight"):
            out, inner = shape
            stem = name[: -len(".weight")]
            tensors[stem + ".qweight"], dtypes[stem + ".qweight"] = (inner // 8, out), ("I32", 4)
            tensors[stem + ".qzeros"], dtypes[stem + ".qzeros"] = (inner // 8, out // 8), ("I32", 4)
            tensors[stem + ".scales"], dtypes[stem + ".scales"] = (inner // 8, out), ("F16", 2)
        else:
            tensors[name], dtypes[name] = shape, ("F16", 2)
    directory = tmp_path / "gptq"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    for kind, width in (("I32", 4), ("F16", 2)):
        write_header_only(directory / f"model-{kind}.safetensors",
                          {n: s for n, s in tensors.items() if dtypes[n] == (kind, width)}, kind, width)
    shape = read_model_dir(str(directory))
    assert shape.params == TINY_PARAMS
    # linear weights: 2 layers x (256 + 128 + 128 + 256 + 3 x 512) = 4608; the rest fp16
    assert shape.source["dtypes"] == {"fp16": TINY_PARAMS - 4608, "int4": 4608}
    assert shape.dtype == "int4"
    # qzeros: 2 x (2x2 + 2x1 + 2x1 + 2x2 + 2x4 + 2x4 + 4x2) = 72; scales: 2 x (32 + 16 + 16 + 32 + 64 + 64 + 64) = 576
    assert shape.source["quantization"] == ("gptq 4-bit: each int32 of a qweight counted as 8 weights; 648 "
                                            "elements of scales, zeros and group indices are not parameters")
