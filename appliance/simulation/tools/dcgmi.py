"""dcgmi discovery -l and dcgmi diag -r 1|2|3 [-j]: answers while nvidia-dcgm.service (the host engine) runs."""

from __future__ import annotations

import json

from ..state import visible_gpus

NO_HOST_ENGINE = ("Error: unable to establish a connection to the specified host: localhost\n"
                  "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.")


def _checks(state: dict, level: int) -> list[tuple[str, str, list[tuple[int, bool, str]]]]:
    """(category, test, [(gpu index, passed, detail)])"""
    gpus = visible_gpus(state)
    expected = len(state["gpus"])
    results = [
        ("Deployment", "Denylist", [(gpu["index"], True, "") for gpu in gpus]),
        ("Deployment", "NVML Library", [(gpu["index"], True, "") for gpu in gpus]),
        ("Deployment", "CUDA Main Library", [(gpu["index"], True, "") for gpu in gpus]),
        ("Deployment", "Permissions and OS Blocks", [(gpu["index"], True, "") for gpu in gpus]),
        ("Deployment", "Persistence Mode", [(gpu["index"], gpu["persistence_mode"],
                                              "" if gpu["persistence_mode"] else "persistence mode is disabled")
                                             for gpu in gpus]),
        ("Deployment", "Environment Variables", [(gpu["index"], True, "") for gpu in gpus]),
        ("Deployment", "Page Retirement/Row Remap", [
            (gpu["index"], not (gpu["retired_pages"]["single_bit"] or gpu["retired_pages"]["double_bit"]
                                or gpu["retired_pages"].get("pending")), "retired pages present") for gpu in gpus]),
        ("Deployment", "Graphics Processes", [(gpu["index"], True, "") for gpu in gpus]),
        ("Deployment", "Inforom", [(gpu["index"], True, "") for gpu in gpus]),
    ]
    if len(gpus) != expected:
        results.append(("Deployment", "GPU Count", [(-1, False, f"{len(gpus)} GPUs found, {expected} expected")]))
    if level >= 2:
        results += [
            ("Integration", "PCIe", [(gpu["index"], gpu["pcie"]["width_current"] == gpu["pcie"]["width_max"],
                                      f"PCIe link width x{gpu['pcie']['width_current']}") for gpu in gpus]),
            ("Integration", "NVLink", [(gpu["index"], all(link == "up" for link in gpu["nvlinks"]),
                                        "NVLink down") for gpu in gpus]),
            ("Hardware", "GPU Memory", [(gpu["index"], True, "") for gpu in gpus]),
            ("Stress", "Targeted Power", [(gpu["index"], True, "") for gpu in gpus]),
        ]
    if level >= 3:
        results.append(("Hardware", "Diagnostic", [(gpu["index"], True, "") for gpu in gpus]))
    return results


_WIDTH_NAME, _WIDTH_RESULT = 27, 48


def _row(name: str, result: str) -> str:
    return f"| {name:<{_WIDTH_NAME - 2}} | {result:<{_WIDTH_RESULT - 2}} |"


def _section(title: str) -> str:
    left = f"|-----  {title}  "
    return left + "-" * (_WIDTH_NAME + 1 - len(left)) + "+" + "-" * _WIDTH_RESULT + "|"


def _table(tool, checks, state: dict) -> None:
    """The table `dcgmi diag` prints: sections, one row per test, a continuation row per failing GPU."""
    border = "+" + "-" * _WIDTH_NAME + "+" + "-" * _WIDTH_RESULT + "+"
    tool.print("Successfully ran diagnostic for group.")
    tool.print(border)
    tool.print(_row("Diagnostic", "Result"))
    tool.print("+" + "=" * _WIDTH_NAME + "+" + "=" * _WIDTH_RESULT + "+")
    tool.print(_section("Metadata"))
    tool.print(_row("DCGM Version", state.get("software", {}).get("dcgm_version", "")))
    tool.print(_row("Driver Version Detected", state["driver"].get("version", "")))
    tool.print(_row("GPU Device IDs Detected", ",".join("2330" for _ in visible_gpus(state))))
    section = None
    for category, test, results in checks:
        if category != section:
            section = category
            tool.print(_section(category))
        bad = [(index, detail) for index, passed, detail in results if not passed]
        tool.print(_row(test, "Fail" if bad else "Pass"))
        for index, detail in bad:
            tool.print(_row("", (f"GPU {index}: " if index >= 0 else "") + detail)[: _WIDTH_NAME + _WIDTH_RESULT + 3])
    tool.print(border)


# Deployment (software) tests give one result for all GPUs; the others one per GPU.
_SOFTWARE_CATEGORY = "Deployment"


def _json_report(checks, state: dict) -> dict:
    """`dcgmi diag -r N -j` in DCGM 3.x's shape: {"DCGM GPU Diagnostic": {"test_categories": [{"category",
    "tests": [{"name", "results": [{"gpu_ids", "status", "warnings": [{"warning", "error_id"}]}]}]}],
    "version"}}, status Pass|Fail|Warn|Skip. Source: NVIDIA/DCGM, nvvs/src/JsonOutput.cpp (the format comment)
    and the "JsonResult: Deserialize real output" test case (a DCGM 3.1 run on 8 GPUs), and its dcgmi diag
    -j test that reads ["results"][0]["gpu_ids"] == "<id>" and ["status"] == "Fail"."""
    gpu_ids = ",".join(str(gpu["index"]) for gpu in visible_gpus(state))
    categories: dict[str, list] = {}
    for category, test, results in checks:
        if category == _SOFTWARE_CATEGORY:
            bad = [(index, detail) for index, passed, detail in results if not passed]
            entry = {"gpu_ids": gpu_ids, "status": "Fail" if bad else "Pass"}
            if bad:
                entry["warnings"] = [{"warning": (f"GPU {index}: " if index >= 0 else "") + detail, "error_id": 0}
                                     for index, detail in bad]
            entries = [entry]
        else:
            entries = []
            for index, passed, detail in results:
                entry = {"gpu_ids": str(index), "status": "Pass" if passed else "Fail"}
                if not passed:
                    entry["warnings"] = [{"warning": f"GPU {index}: {detail}", "error_id": 0}]
                entries.append(entry)
        categories.setdefault(category, []).append({"name": test, "results": entries})
    return {"DCGM GPU Diagnostic": {
        "test_categories": [{"category": name, "tests": tests} for name, tests in categories.items()],
        "version": state.get("software", {}).get("dcgm_version", ""),
    }}


def main(tool, argv: list[str]) -> int:
    state = tool.state()
    if not state["services"].get("nvidia-dcgm.service", {}).get("active"):
        raise tool.fail(NO_HOST_ENGINE, 255)
    if argv in (["discovery", "-l"], ["discovery", "--list"]):
        gpus = visible_gpus(state)
        tool.print(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} found.")
        tool.print("+--------+----------------------------------------------------------------------+")
        tool.print("| GPU ID | Device Information                                                   |")
        tool.print("+--------+----------------------------------------------------------------------+")
        for gpu in gpus:
            tool.print(f"| {gpu['index']:<6} | Name: {gpu['name']:<63}|")
            tool.print(f"|        | PCI Bus ID: {gpu['pci_bus_id']:<57}|")
            tool.print(f"|        | Device UUID: {gpu['uuid']:<56}|")
        tool.print("+--------+----------------------------------------------------------------------+")
        return 0
    if argv[:1] == ["diag"]:
        level = None
        as_json = "-j" in argv or "--json" in argv
        for position, arg in enumerate(argv):
            if arg in ("-r", "--run") and position + 1 < len(argv):
                level = argv[position + 1]
        if level not in ("1", "2", "3", "short", "medium", "long"):
            raise tool.fail("diag needs -r 1|2|3 (short|medium|long) in the simulation", 2)
        number = {"short": 1, "medium": 2, "long": 3}.get(level) or int(level)
        checks = _checks(state, number)
        failed = any(not passed for _, _, results in checks for _, passed, _ in results)
        if as_json:
            tool.print(json.dumps(_json_report(checks, state), indent=4))
        else:
            _table(tool, checks, state)
        return 1 if failed else 0
    raise tool.unsupported(argv)
