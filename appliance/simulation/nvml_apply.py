"""The state-changing calls of the simulated NVML library, run by simnvml.c as
`python -I tools/runner.py _nvml-apply <sysroot> <operation> <arguments...>`.

The C library only reads (the nvml.state view); its few writes come here so that the JSON state stays
the single source of truth and its lock is honoured. Prints `result <nvml return code> [value]`.
"""

from __future__ import annotations

from pathlib import Path

from . import gpu_ops
from . import state as node_state

NVML_ERROR_UNKNOWN = 999


def _apply(current: dict, operation: str, numbers: list[int]) -> int | None:
    gpu_ops.require_driver(current)
    if operation == "persistence":
        gpu_ops.set_persistence(current, numbers[0], bool(numbers[1]))
    elif operation == "mig-mode":
        gpu_ops.set_mig_mode(current, numbers[0], bool(numbers[1]))
    elif operation == "create-gi":
        placement = numbers[2] if len(numbers) > 2 and numbers[2] >= 0 else None
        return gpu_ops.create_gpu_instance(current, numbers[0], numbers[1], placement)
    elif operation == "create-ci":
        return gpu_ops.create_compute_instance(current, numbers[0], numbers[1], numbers[2])
    elif operation == "destroy-gi":
        gpu_ops.destroy_gpu_instance(current, numbers[0], numbers[1])
    elif operation == "destroy-ci":
        gpu_ops.destroy_compute_instance(current, numbers[0], numbers[1], numbers[2])
    else:
        raise ValueError(f"unknown operation {operation}")
    return None


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(f"result {gpu_ops.NVML_ERROR_INVALID_ARGUMENT}")
        return 2
    sysroot, operation = Path(argv[0]), argv[1]
    try:
        numbers = [int(value) for value in argv[2:]]
        with node_state.update(sysroot) as current:
            value = _apply(current, operation, numbers)
    except gpu_ops.GpuError as exc:
        print(f"result {exc.code}")
        print(exc.message)
        return 1
    except (ValueError, IndexError, node_state.StateError) as exc:
        print(f"result {NVML_ERROR_UNKNOWN}")
        print(exc)
        return 1
    print("result 0" + (f" {value}" if value is not None else ""))
    return 0
