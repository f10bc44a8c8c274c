"""nvidia-smi: --query-gpu (csv), -L, -pm, -mig, mig (-cgi/-C/-lgi/-lgip/-lgipp/-dci/-dgi), topo -m, nvlink -s."""

from __future__ import annotations

from .. import cpus, gpu_ops
from ..state import effective_hcas, visible_gpus

# field -> (header unit, getter(gpu, state) -> (value with unit, value without unit))
_BOOL = {True: "Enabled", False: "Disabled"}


def _mib(value: int) -> int:
    return value // 2**20


def _fields() -> dict:
    def plain(getter):
        return lambda gpu, state: (str(getter(gpu, state)),) * 2

    def unit(getter, suffix, fmt="{}"):
        def get(gpu, state):
            value = fmt.format(getter(gpu, state))
            return f"{value} {suffix}", value
        return get

    retired = lambda key: plain(lambda gpu, state: len(gpu["retired_pages"].get(key, [])))  # noqa: E731
    return {
        "index": ("", plain(lambda gpu, state: gpu["index"])),
        "count": ("", plain(lambda gpu, state: len(visible_gpus(state)))),
        "name": ("", plain(lambda gpu, state: gpu["name"])),
        "gpu_name": ("", plain(lambda gpu, state: gpu["name"])),
        "uuid": ("", plain(lambda gpu, state: gpu["uuid"])),
        "gpu_uuid": ("", plain(lambda gpu, state: gpu["uuid"])),
        "serial": ("", plain(lambda gpu, state: gpu["serial"])),
        "pci.bus_id": ("", plain(lambda gpu, state: gpu["pci_bus_id"])),
        "gpu_bus_id": ("", plain(lambda gpu, state: gpu["pci_bus_id"])),
        "driver_version": ("", plain(lambda gpu, state: state["driver"].get("version", ""))),
        "vbios_version": ("", plain(lambda gpu, state: "96.00.74.00.01")),
        "compute_cap": ("", plain(lambda gpu, state: ".".join(str(n) for n in gpu["compute_capability"]))),
        "memory.total": ("MiB", unit(lambda gpu, state: _mib(gpu["memory_total_bytes"]), "MiB")),
        "memory.used": ("MiB", unit(lambda gpu, state: _mib(gpu["memory_used_bytes"]), "MiB")),
        "memory.free": ("MiB", unit(lambda gpu, state: _mib(gpu["memory_total_bytes"] - gpu["memory_used_bytes"]), "MiB")),
        "persistence_mode": ("", plain(lambda gpu, state: _BOOL[gpu["persistence_mode"]])),
        "mig.mode.current": ("", plain(lambda gpu, state: _BOOL[gpu["mig"]["current"]] if gpu["mig"]["capable"] else "[N/A]")),
        "mig.mode.pending": ("", plain(lambda gpu, state: _BOOL[gpu["mig"]["pending"]] if gpu["mig"]["capable"] else "[N/A]")),
        "temperature.gpu": ("", plain(lambda gpu, state: gpu["temperature_c"])),
        "power.draw": ("W", unit(lambda gpu, state: gpu["power_draw_mw"] / 1000, "W", "{:.2f}")),
        "power.limit": ("W", unit(lambda gpu, state: gpu["power_limit_mw"] / 1000, "W", "{:.2f}")),
        "enforced.power.limit": ("W", unit(lambda gpu, state: gpu["power_limit_mw"] / 1000, "W", "{:.2f}")),
        "utilization.gpu": ("%", unit(lambda gpu, state: gpu["utilization_gpu"], "%")),
        "utilization.memory": ("%", unit(lambda gpu, state: gpu["utilization_memory"], "%")),
        "pcie.link.gen.current": ("", plain(lambda gpu, state: gpu["pcie"]["generation_current"])),
        "pcie.link.gen.max": ("", plain(lambda gpu, state: gpu["pcie"]["generation_max"])),
        "pcie.link.width.current": ("", plain(lambda gpu, state: gpu["pcie"]["width_current"])),
        "pcie.link.width.max": ("", plain(lambda gpu, state: gpu["pcie"]["width_max"])),
        "retired_pages.single_bit_ecc.count": ("", retired("single_bit")),
        "retired_pages.sbe": ("", retired("single_bit")),
        "retired_pages.double_bit.count": ("", retired("double_bit")),
        "retired_pages.dbe": ("", retired("double_bit")),
        "retired_pages.pending": ("", plain(lambda gpu, state: "Yes" if gpu["retired_pages"].get("pending") else "No")),
        "clocks_event_reasons.active": ("", plain(lambda gpu, state: "0x0000000000000000")),
        "clocks_throttle_reasons.active": ("", plain(lambda gpu, state: "0x0000000000000000")),
        "ecc.errors.uncorrected.volatile.total": ("", plain(lambda gpu, state: 0)),
    }


FIELDS = _fields()


class Options:
    def __init__(self, argv: list[str]):
        self.ids: list[str] | None = None
        self.query: list[str] | None = None
        self.format: set[str] = set()
        self.rest: list[str] = []
        iterator = iter(argv)
        for arg in iterator:
            if arg in ("-i", "--id"):
                self.ids = next(iterator, "").split(",")
            elif arg.startswith("--id="):
                self.ids = arg.split("=", 1)[1].split(",")
            elif arg.startswith("--query-gpu="):
                self.query = [field.strip() for field in arg.split("=", 1)[1].split(",") if field.strip()]
            elif arg == "--query-gpu":
                self.query = [field.strip() for field in next(iterator, "").split(",") if field.strip()]
            elif arg.startswith("--format="):
                self.format = {part.strip() for part in arg.split("=", 1)[1].split(",")}
            elif arg == "--format":
                self.format = {part.strip() for part in next(iterator, "").split(",")}
            else:
                self.rest.append(arg)


def _selected(state: dict, ids: list[str] | None) -> list[dict]:
    gpus = visible_gpus(state)
    if ids is None:
        return gpus
    chosen = []
    for ident in ids:
        match = [gpu for gpu in gpus if str(gpu["index"]) == ident or gpu["uuid"] == ident
                 or gpu["pci_bus_id"].lower() == ident.lower()]
        if not match:
            raise gpu_ops.GpuError(gpu_ops.NVML_ERROR_NOT_FOUND, f"No devices were found matching the identifier {ident}")
        chosen.extend(match)
    return chosen


def _query(tool, state: dict, options: Options) -> int:
    if "csv" not in options.format:
        raise tool.fail("--query-gpu needs --format=csv[,noheader][,nounits] in the simulation", 2)
    unknown = [field for field in options.query if field not in FIELDS]
    if unknown:
        raise tool.fail(f'Field "{unknown[0]}" is not a valid field to query.', 2)
    nounits = "nounits" in options.format
    if "noheader" not in options.format:
        tool.print(", ".join(f"{field} [{FIELDS[field][0]}]" if FIELDS[field][0] else field for field in options.query))
    for gpu in _selected(state, options.ids):
        values = [FIELDS[field][1](gpu, state)[1 if nounits else 0] for field in options.query]
        tool.print(", ".join(values))
    return 0


def _list(tool, state: dict) -> int:
    for gpu in visible_gpus(state):
        tool.print(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})")
        device = 0
        for instance in gpu["mig"]["gpu_instances"]:
            for compute in instance["compute_instances"]:
                tool.print(f"  MIG {instance['profile']:<10} Device {device:>2}: (UUID: {compute['uuid']})")
                device += 1
    return 0


def _on_off(tool, value: str, option: str) -> bool:
    if value not in ("0", "1", "ENABLED", "DISABLED"):
        raise tool.fail(f'Invalid value "{value}" for {option}: use 0/DISABLED or 1/ENABLED', 2)
    return value in ("1", "ENABLED")


def _set_mode(tool, options: Options, option: str) -> int:
    value = options.rest[options.rest.index(option) + 1] if len(options.rest) > options.rest.index(option) + 1 else ""
    enabled = _on_off(tool, value, option)
    with tool.update() as state:
        lines = []
        for gpu in _selected(state, options.ids):
            if option in ("-pm", "--persistence-mode"):
                changed = gpu_ops.set_persistence(state, gpu["index"], enabled)
                verb = "Enabled" if enabled else "Disabled"
                lines.append(f"{verb} persistence mode for GPU {gpu['pci_bus_id']}." if changed else
                             f"Persistence mode is already {verb} for GPU {gpu['pci_bus_id']}.")
            else:
                gpu_ops.set_mig_mode(state, gpu["index"], enabled)
                lines.append(f"{'Enabled' if enabled else 'Disabled'} MIG Mode for GPU {gpu['pci_bus_id']}")
    for line in lines:
        tool.print(line)
    tool.print("All done.")
    return 0


def _profile_argument(gpu: dict, token: str) -> tuple[dict, int | None]:
    name, _, placement = token.strip().partition(":")
    if name.isdigit():
        chosen = gpu_ops.profile(gpu, profile_id=int(name))
    else:
        chosen = gpu_ops.profile(gpu, name=name.removeprefix("MIG "))
    return chosen, int(placement) if placement else None


def _mig(tool, state_args: Options) -> int:
    rest = state_args.rest[1:]
    if "-cgi" in rest or "--create-gpu-instance" in rest:
        flag = "-cgi" if "-cgi" in rest else "--create-gpu-instance"
        tokens = rest[rest.index(flag) + 1].split(",")
        with_compute = "-C" in rest or "--default-compute-instance" in rest
        lines = []
        with tool.update() as state:
            gpu_ops.require_driver(state)
            for gpu in _selected(state, state_args.ids):
                for token in tokens:
                    chosen, placement = _profile_argument(gpu, token)
                    gi_id = gpu_ops.create_gpu_instance(state, gpu["index"], chosen["id"], placement)
                    lines.append(f"Successfully created GPU instance ID {gi_id:>2} on GPU {gpu['index']:>2} using "
                                 f"profile MIG {chosen['name']} (ID {chosen['id']:>2})")
                    if with_compute:
                        ci_id = gpu_ops.create_compute_instance(state, gpu["index"], gi_id)
                        lines.append(f"Successfully created compute instance ID {ci_id:>2} on GPU {gpu['index']:>2} "
                                     f"GPU instance ID {gi_id:>2} using profile MIG {chosen['name']} "
                                     f"(ID {gpu_ops.COMPUTE_PROFILES[chosen['compute_slices']]:>2})")
        for line in lines:
            tool.print(line)
        return 0
    if "-dci" in rest or "-dgi" in rest:
        lines = []
        with tool.update() as state:
            gpu_ops.require_driver(state)
            for gpu in _selected(state, state_args.ids):
                for instance in list(gpu["mig"]["gpu_instances"]):
                    if "-dci" in rest:
                        for compute in list(instance["compute_instances"]):
                            gpu_ops.destroy_compute_instance(state, gpu["index"], instance["id"], compute["id"])
                            lines.append(f"Successfully destroyed compute instance ID {compute['id']:>2} from GPU "
                                         f"{gpu['index']:>2} GPU instance ID {instance['id']:>2}")
                    if "-dgi" in rest:
                        gpu_ops.destroy_gpu_instance(state, gpu["index"], instance["id"])
                        lines.append(f"Successfully destroyed GPU instance ID {instance['id']:>2} from GPU {gpu['index']:>2}")
        if not lines:
            raise tool.fail("No GPU instances found: Not Found", 6)
        for line in lines:
            tool.print(line)
        return 0
    state = tool.state()
    gpu_ops.require_driver(state)
    if "-lgi" in rest:
        tool.print("+-------------------------------------------------------+")
        tool.print("| GPU instances:                                        |")
        tool.print("| GPU   Name             Profile  Instance   Placement  |")
        tool.print("|                          ID       ID       Start:Size |")
        tool.print("|=======================================================|")
        for gpu in _selected(state, state_args.ids):
            for instance in gpu["mig"]["gpu_instances"]:
                tool.print(f"|  {gpu['index']:<3} MIG {instance['profile']:<12} {instance['profile_id']:>4} "
                           f"{instance['id']:>8} {instance['placement_start']:>8}:{instance['placement_size']:<3} |")
        tool.print("+-------------------------------------------------------+")
        return 0
    if "-lgip" in rest or "-lgipp" in rest:
        mig_gpus = [gpu for gpu in _selected(state, state_args.ids) if gpu["mig"]["current"]]
        if not mig_gpus:
            raise tool.fail("No MIG-enabled devices found.", 6)
    if "-lgipp" in rest:
        # As nvidia-smi prints them: the allowed first memory slices of each profile, then its size.
        for gpu in mig_gpus:
            for chosen in gpu["mig"]["profiles"]:
                label = "Placements:" if len(chosen["placements"]) > 1 else "Placement :"
                tool.print(f"GPU {gpu['index']:>2} Profile ID {chosen['id']:>2} {label} "
                           f"{{{','.join(str(start) for start in chosen['placements'])}}}:{chosen['memory_slices']}")
        return 0
    if "-lgip" in rest:
        rule = "+" + "-" * 77 + "+"
        tool.print(rule)
        tool.print("| GPU instance profiles:".ljust(78) + "|")
        tool.print("| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |")
        tool.print("|                              Free/Total   GiB              CE    JPEG  OFA  |")
        tool.print("|" + "=" * 77 + "|")
        for gpu in mig_gpus:
            for chosen in gpu["mig"]["profiles"]:
                units = gpu_ops.engines(chosen)
                free = gpu_ops.remaining_capacity(gpu, chosen)
                tool.print(f"|  {gpu['index']:>2}  MIG {chosen['name']:<13} {chosen['id']:>3}  {free:>5}/{chosen['max']:<5}"
                           f"{chosen['memory_mib'] / 1024:>10.2f}       No  {chosen['multiprocessors']:>5} "
                           f"{units['decoders']:>5} {units['encoders']:>5}   |")
                tool.print(f"|{'':<58}{units['copy']:>5} {units['jpeg']:>5} {units['ofa']:>5}   |")
                tool.print(rule)
        return 0
    raise tool.unsupported(state_args.rest)


def _topology(tool, state: dict) -> int:
    gpus = visible_gpus(state)
    hcas = effective_hcas(state)
    columns = [f"GPU{gpu['index']}" for gpu in gpus] + [f"NIC{n}" for n in range(len(hcas))]
    tool.print("\t" + "\t".join(columns) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID")
    links = len(gpus[0]["nvlinks"]) if gpus else 0
    # A GPU's CPUs are its NUMA node's socket (appliance.simulation.cpus: Linux's numbering).
    cpu = state.get("cpu") or {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2}

    def relation(numa_a, numa_b, pix):
        if pix:
            return "PIX"
        return "NODE" if numa_a == numa_b else "SYS"

    for gpu in gpus:
        cells = []
        for other in gpus:
            if other is gpu:
                cells.append(" X ")
            elif gpu["nvlinks"] and other["nvlinks"] and all(link == "up" for link in gpu["nvlinks"]):
                cells.append(f"NV{links}")
            else:
                cells.append(relation(gpu["numa_node"], other["numa_node"], False))
        for hca in hcas:
            cells.append(relation(gpu["numa_node"], hca["numa_node"], hca.get("closest_gpu") == gpu["index"]))
        near = cpus.socket_cpus(cpu, gpu["numa_node"])
        tool.print(f"GPU{gpu['index']}\t" + "\t".join(cells) + f"\t{near}\t{gpu['numa_node']}\t\tN/A")
    for position, hca in enumerate(hcas):
        cells = [relation(hca["numa_node"], gpu["numa_node"], hca.get("closest_gpu") == gpu["index"]) for gpu in gpus]
        cells += [" X " if other is hca else relation(hca["numa_node"], other["numa_node"], False) for other in hcas]
        tool.print(f"NIC{position}\t" + "\t".join(cells))
    tool.print("""
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:
""")
    for position, hca in enumerate(hcas):
        tool.print(f"  NIC{position}: {hca['device']}")
    return 0


def _nvlink_status(tool, state: dict, options: Options) -> int:
    for gpu in _selected(state, options.ids):
        tool.print(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})")
        for link, link_state in enumerate(gpu["nvlinks"]):
            tool.print(f"\t Link {link}: 26.562 GB/s" if link_state == "up" else f"\t Link {link}: <inactive>")
    return 0


def main(tool, argv: list[str]) -> int:
    options = Options(argv)
    try:
        if options.rest[:1] == ["topo"]:
            if options.rest[1:] not in (["-m"], ["--matrix"]):
                raise tool.unsupported(argv)
            state = tool.state()
            gpu_ops.require_driver(state)
            return _topology(tool, state)
        if options.rest[:1] == ["mig"]:
            return _mig(tool, options)
        if options.rest[:1] == ["nvlink"]:
            if options.rest[1:] not in (["-s"], ["--status"]):
                raise tool.unsupported(argv)
            state = tool.state()
            gpu_ops.require_driver(state)
            return _nvlink_status(tool, state, options)
        if "-pm" in options.rest or "--persistence-mode" in options.rest:
            state = tool.state()
            gpu_ops.require_driver(state)
            return _set_mode(tool, options, "-pm" if "-pm" in options.rest else "--persistence-mode")
        if "-mig" in options.rest or "--multi-instance-gpu" in options.rest:
            state = tool.state()
            gpu_ops.require_driver(state)
            return _set_mode(tool, options, "-mig" if "-mig" in options.rest else "--multi-instance-gpu")
        state = tool.state()
        gpu_ops.require_driver(state)
        if options.query is not None:
            return _query(tool, state, options)
        if options.rest in (["-L"], ["--list-gpus"]):
            return _list(tool, state)
        raise tool.unsupported(argv)
    except gpu_ops.GpuError as exc:
        raise tool.fail(exc.message, exc.code) from None
