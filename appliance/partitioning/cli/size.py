"""manage.py partition size: the sizing advisor from a model's files (--model-dir) or typed values.

    partition size --model-dir /models/llama-3-70b --dtype bf16 --context 8192 --concurrency 4 --gpu h100-80gb
    partition size --params 70553706496 --layers 80 --kv-heads 8 --head-dim 128 --json
"""

from __future__ import annotations

import json
import os

from django.core.management.base import CommandError

from .. import modelfiles, profiles, sizing

TYPED = ("params", "layers", "kv_heads", "head_dim")
OPTIONAL = ("hidden_size", "attention_heads", "intermediate_size", "vocab_size")


def _count(text: str) -> int:
    """A whole number, with optional _ or , between digits: 70553706496, 70_553_706_496."""
    cleaned = text.replace("_", "").replace(",", "")
    if not cleaned.isdigit() or len(cleaned) > 15:
        raise ValueError(text)
    return int(cleaned)


_count.__name__ = "whole number"


def add_arguments(parser) -> None:
    source = parser.add_argument_group("the model: its directory, or typed values")
    source.add_argument("--model-dir", metavar="DIR",
                        help="a Hugging Face model directory (config.json and safetensors files; no weight is loaded)")
    source.add_argument("--params", type=_count, metavar="N", help="parameters")
    source.add_argument("--layers", type=_count, metavar="N", help="transformer layers")
    source.add_argument("--kv-heads", type=_count, metavar="N", help="key/value heads")
    source.add_argument("--head-dim", type=_count, metavar="N", help="dimension of one attention head")
    source.add_argument("--hidden-size", type=_count, metavar="N", help="hidden size (estimated when not given)")
    source.add_argument("--attention-heads", type=_count, metavar="N",
                        help="attention heads (TP must divide them; only the KV heads are checked when not given)")
    source.add_argument("--intermediate-size", type=_count, metavar="N", help="MLP size (estimated when not given)")
    source.add_argument("--vocab-size", type=_count, metavar="N", help="vocabulary (Llama 3's when not given)")
    parser.add_argument("--dtype", choices=sizing.WEIGHT_DTYPES,
                        help="the weights' precision (default: the model files' dtype, else bf16)")
    parser.add_argument("--kv-dtype", choices=sizing.KV_DTYPES, help="the KV cache's precision (default: bf16; "
                        "fp16 for fp16 weights)")
    parser.add_argument("--context", type=_count, default=4096, metavar="TOKENS",
                        help="context length per sequence (default 4096)")
    parser.add_argument("--concurrency", type=_count, default=1, metavar="N",
                        help="sequences served at once (default 1)")
    parser.add_argument("--gpu", default="h100-80gb", choices=list(profiles.MODELS), help="GPU model (default h100-80gb)")
    parser.add_argument("--gpus-per-node", type=_count, default=8, metavar="N", help="GPUs per node (default 8)")
    parser.add_argument("--nodes", type=_count, metavar="N", help="nodes available (default: no limit)")
    parser.add_argument("--request", metavar="NAME",
                        help="also print the planner request for this service name (partition plan's requests)")
    parser.add_argument("--replicas", type=_count, default=1, metavar="N", help="replicas of the request (default 1)")
    parser.add_argument("--isolation", choices=sizing.ISOLATIONS, default="soft",
                        help="the request's isolation (default soft; a model on several GPUs is exclusive)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of text")


def handle(command, options) -> int:
    typed = {name: options.get(name) for name in TYPED + OPTIONAL}
    if options.get("model_dir"):
        given = [f"--{name.replace('_', '-')}" for name, value in typed.items() if value is not None]
        if given:
            raise CommandError(f"--model-dir reads the model's shape from its files: drop {', '.join(given)}")
        try:
            model = modelfiles.read_model_dir(os.path.abspath(options["model_dir"]))
        except modelfiles.ModelFileError as exc:
            raise CommandError(str(exc)) from None
    else:
        missing = [f"--{name.replace('_', '-')}" for name in TYPED if typed[name] is None]
        if missing:
            raise CommandError(f"give --model-dir DIR, or the model's shape: missing {', '.join(missing)}")
        model = typed
    try:
        result = sizing.size(model, dtype=options.get("dtype"), kv_dtype=options.get("kv_dtype"),
                             context=options["context"], concurrency=options["concurrency"],
                             gpu_model=options["gpu"], gpus_per_node=options["gpus_per_node"],
                             nodes=options.get("nodes"))
        if options.get("request"):
            result["request"] = sizing.request_for(result, options["request"], replicas=options["replicas"],
                                                   isolation=options["isolation"])
    except sizing.SizingError as exc:
        raise CommandError(str(exc)) from None
    if isinstance(model, modelfiles.ModelShape):
        result["source"] = model.source
        result["model"]["architecture"] = model.architecture
    if options.get("json"):
        command.stdout.write(json.dumps(result, indent=2))
    else:
        command.stdout.write(summary(result))
    return 0


def summary(result: dict) -> str:
    model = result["model"]
    lines = [
        f"Model: {model['params']:,} parameters, {model['layers']} layers, {model['kv_heads']} KV heads x "
        f"{model['head_dim']}; {result['dtype']} weights, {result['kv_dtype']} KV cache",
        f"Serving: {result['concurrency']} sequence(s) x {result['context']:,} tokens on {result['gpu_model']}",
        "",
        f"  weights          {result['display']['weights']:>12}  ({result['weights_bytes']:,} bytes)",
        f"  KV per token     {result['display']['kv_per_token']:>12}  ({result['kv_bytes_per_token']:,} bytes)",
        f"  KV cache         {result['display']['kv']:>12}  ({result['kv_bytes']:,} bytes)",
        f"  activations      {sizing.human_bytes(result['activation_bytes']):>12}",
        f"  runtime overhead {sizing.human_bytes(result['overhead_bytes']):>12}",
        f"  total            {result['display']['total']:>12}",
        "",
    ]
    placement = result["placement"]
    if placement is None:
        lines.append(f"Placement: none: {result['reason']}")
    else:
        where = {"mig": f"MIG {placement['profile']} instance", "gpu": "one GPU",
                 "tp": f"tensor parallel over {placement['tp']} GPUs",
                 "tp_pp": f"TP {placement['tp']} x PP {placement['pp']} = {placement['gpus']} GPUs"}[placement["kind"]]
        lines.append(f"Placement: {where}, {sizing.human_bytes(placement['per_gpu_bytes'])} of "
                     f"{sizing.human_bytes(placement['usable_bytes'])} usable per GPU")
    lines += [
        f"Decode ceiling: {result['decode_tokens_per_s_ceiling']:,} tokens/s "
        f"({result['decode_tokens_per_s_per_sequence_ceiling']:,} per sequence)",
        f"Prefill ceiling: {result['prefill']['tokens_per_s_ceiling']:,} tokens/s "
        f"({result['prefill']['seconds_for_context']} s for one full context)",
    ]
    if "request" in result:
        lines.append(f"Planner request: {json.dumps(result['request'])}")
    lines += ["", "Assumptions:"] + [f"  - {text}" for text in result["assumptions"]]
    return "\n".join(lines) + "\n"
