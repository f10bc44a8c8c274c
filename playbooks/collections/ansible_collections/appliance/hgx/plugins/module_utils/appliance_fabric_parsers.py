# Parsers of the tools the fabric, gpudirect, storage and acceptance stages read: the InfiniBand ports in
# sysfs (and ibstat), `nvidia-smi topo -m`, `gdscheck -p`, NCCL's all_reduce_perf, perftest's ib_write_bw,
# `dcgmi diag -j`, `findmnt -rn`, fio's JSON report and the kernel log's NVRM Xid lines.
#
# Pure functions of text: the modules run the tools (found on the PATH, so that a simulated node
# answers with its own), these functions read what they print in the format the real tools use. The one
# reader of files, read_infiniband_sysfs, reads the kernel's own files under a root (a simulated node's
# sysroot, where the simulation writes them in the kernel's format).

from __future__ import annotations

import json
import os
import re


class ParseError(ValueError):
    """The tool printed something these parsers do not recognise; the message quotes it."""


# ---- ibstat -----------------------------------------------------------------------------------------

def parse_ibstat(text):
    """ibstat output -> {device: {node_guid, firmware, ports: {port: {state, physical_state, rate_gbps,
    port_guid, link_layer}}}}."""
    cas = {}
    current = port = None
    for raw in text.splitlines():
        line = raw.strip()
        match = re.match(r"^CA '([^']+)'$", line)
        if match:
            current = cas.setdefault(match.group(1), {"node_guid": "", "firmware": "", "ports": {}})
            port = None
            continue
        if current is None or not line:
            continue
        match = re.match(r"^Port (\d+):$", line)
        if match:
            port = current["ports"].setdefault(int(match.group(1)), {})
            continue
        key, _sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if port is None:
            if key == "Node GUID":
                current["node_guid"] = value.lower()
            elif key == "Firmware version":
                current["firmware"] = value
            continue
        if key == "State":
            port["state"] = value
        elif key == "Physical state":
            port["physical_state"] = value
        elif key == "Rate":
            try:
                port["rate_gbps"] = int(float(value.split()[0]))
            except (ValueError, IndexError):
                raise ParseError(f"ibstat: unreadable rate {value!r}") from None
        elif key == "Port GUID":
            port["port_guid"] = value.lower()
        elif key == "Link layer":
            port["link_layer"] = value
    if not cas:
        raise ParseError("ibstat printed no CA: " + (text.strip()[:200] or "(nothing)"))
    return cas


# ---- InfiniBand ports in sysfs ----------------------------------------------------------------------

# The kernel's files (drivers/infiniband/core/sysfs.c): ports/<n>/state "4: ACTIVE", phys_state
# "5: LinkUp", rate "400 Gb/sec (4X NDR)", link_layer "InfiniBand", gids/0 the subnet prefix and the port
# GUID, node_guid "946d:ae03:00d2:a0d2". The logical states are reported under ibstat's names, which the
# checks and the inventory use.
SYSFS_PORT_STATES = {"NOP": "Nop", "DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed", "ACTIVE": "Active",
                     "ACTIVE_DEFER": "ActiveDefer"}
_SYSFS_CODED = re.compile(r"^(\d+):\s*(\S.*?)\s*$")
_SYSFS_RATE = re.compile(r"^(\d+(?:\.\d+)?) Gb/sec \((\d+)X(?: ?(\w+))?\)$")
_SYSFS_GUID = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{4}):([0-9a-f]{4}):([0-9a-f]{4})$")


def parse_sysfs_coded(text, where):
    """"4: ACTIVE" -> (4, "ACTIVE")."""
    match = _SYSFS_CODED.match(text.strip())
    if not match:
        raise ParseError(f"{where}: expected '<code>: <name>', read {text.strip()[:80]!r}")
    return int(match.group(1)), match.group(2)


def parse_sysfs_rate(text, where):
    """"400 Gb/sec (4X NDR)" -> 400 (a fractional rate, "2.5 Gb/sec (1X)", stays a float)."""
    match = _SYSFS_RATE.match(text.strip())
    if not match:
        raise ParseError(f"{where}: expected '<rate> Gb/sec (<width>X <speed>)', read {text.strip()[:80]!r}")
    rate = float(match.group(1))
    return int(rate) if rate.is_integer() else rate


def sysfs_guid(text, where):
    """The last four groups of a GID or node_guid ("fe80:0000:0000:0000:946d:ae03:00d2:a0d2") -> "0x946dae0300d2a0d2"."""
    groups = text.strip().lower().split(":")
    match = _SYSFS_GUID.match(":".join(groups[-4:]))
    if not match:
        raise ParseError(f"{where}: expected a GUID in groups of four hex digits, read {text.strip()[:80]!r}")
    return "0x" + "".join(match.groups())


def read_infiniband_sysfs(root):
    """/sys/class/infiniband under `root` -> {device: {node_guid, ports: {port: {state, physical_state,
    rate_gbps, port_guid, link_layer}}}}, ibstat's shape. No device is an empty dict (no HCA, or its
    driver not loaded); an unreadable or malformed file is a ParseError naming it."""
    base = os.path.join(root or "/", "sys", "class", "infiniband")
    try:
        devices = sorted(os.listdir(base))
    except FileNotFoundError:
        return {}

    def read(path):
        try:
            with open(path) as handle:
                return handle.read()
        except OSError as exc:
            raise ParseError(f"{path}: unreadable ({exc.strerror or exc})") from None

    cas = {}
    for device in devices:
        device_dir = os.path.join(base, device)
        node_guid_path = os.path.join(device_dir, "node_guid")
        ca = {"node_guid": sysfs_guid(read(node_guid_path), node_guid_path), "ports": {}}
        ports_dir = os.path.join(device_dir, "ports")
        try:
            numbers = sorted((name for name in os.listdir(ports_dir) if name.isdigit()), key=int)
        except OSError as exc:
            raise ParseError(f"{ports_dir}: unreadable ({exc.strerror or exc})") from None
        for name in numbers:
            port_dir = os.path.join(ports_dir, name)
            path = os.path.join(port_dir, "state")
            state = parse_sysfs_coded(read(path), path)[1]
            path = os.path.join(port_dir, "phys_state")
            physical = parse_sysfs_coded(read(path), path)[1]
            path = os.path.join(port_dir, "rate")
            rate = parse_sysfs_rate(read(path), path)
            path = os.path.join(port_dir, "gids", "0")
            ca["ports"][int(name)] = {
                "state": SYSFS_PORT_STATES.get(state.upper(), state),
                "physical_state": physical,
                "rate_gbps": rate,
                "port_guid": sysfs_guid(read(path), path),
                "link_layer": read(os.path.join(port_dir, "link_layer")).strip(),
            }
        cas[device] = ca
    return cas


# ---- nvidia-smi topo -m -----------------------------------------------------------------------------

# Fewer PCIe hops first: a GPU's nearest NIC is the one with the best of these.
CONNECTION_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SOC": 5, "SYS": 5}


def parse_topo_matrix(text):
    """`nvidia-smi topo -m` -> {"gpus": {index: {nic_device: connection}}, "cpu_affinity": {index: "0-55,112-167"}},
    NIC columns named by their RDMA device (the NIC legend maps NIC0 -> mlx5_0 in newer drivers; older ones
    print the device names); a GPU whose CPU Affinity column is N/A (or absent) has no cpu_affinity entry."""
    lines = [line.rstrip() for line in text.splitlines()]
    header = None
    for line in lines:
        if re.match(r"^\s+GPU0(\s|$)", line) or re.match(r"^\s*\S*\s*GPU0\t", line):
            header = line.split()
            break
    if header is None:
        raise ParseError("nvidia-smi topo -m printed no matrix header (GPU0 ...): " + (text.strip()[:200] or "(nothing)"))
    columns = []
    for name in header:
        if name in ("CPU", "NUMA", "GPU") or name.startswith(("Affinity", "ID")):
            break
        columns.append(name)
    legend = {}
    for line in lines:
        match = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if match:
            legend[match.group(1)] = match.group(2)
    has_cpu_column = "CPU" in header
    gpus, cpu_affinity = {}, {}
    for line in lines:
        match = re.match(r"^(GPU(\d+))\s+(.*)$", line)
        if not match:
            continue
        cells = match.group(3).split()
        row = {}
        for column, cell in zip(columns, cells):
            if column.startswith("GPU"):
                continue
            row[legend.get(column, column)] = cell
        gpus[int(match.group(2))] = row
        if has_cpu_column and len(cells) > len(columns) and re.match(r"^\d+(-\d+)?(,\d+(-\d+)?)*$", cells[len(columns)]):
            cpu_affinity[int(match.group(2))] = cells[len(columns)]
    if not gpus:
        raise ParseError("nvidia-smi topo -m printed no GPU row")
    return {"gpus": gpus, "cpu_affinity": cpu_affinity}


def parse_id_list(text, where):
    """Linux/Slurm id list "0-55,112-167" -> sorted ids."""
    ids = set()
    for part in str(text).strip().split(","):
        match = re.match(r"^(\d+)(?:-(\d+))?$", part.strip())
        if not match or (match.group(2) and int(match.group(2)) < int(match.group(1))):
            raise ParseError(f"{where}: expected ids like 0-55,112-167, read {text!r}")
        ids.update(range(int(match.group(1)), int(match.group(2) or match.group(1)) + 1))
    return sorted(ids)


def format_id_list(ids):
    """Sorted ids -> "0-55,112-167" (the ranges Linux and Slurm write)."""
    ranges, ordered = [], sorted(set(ids))
    for value in ordered:
        if ranges and value == ranges[-1][1] + 1:
            ranges[-1][1] = value
        else:
            ranges.append([value, value])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def parse_cpuinfo(text):
    """/proc/cpuinfo -> {processor: (physical id, core id)}."""
    cpus, current = {}, {}
    for line in text.splitlines() + [""]:
        if not line.strip():
            if "processor" in current:
                try:
                    cpus[int(current["processor"])] = (int(current.get("physical id", 0)), int(current["core id"]))
                except (KeyError, ValueError):
                    raise ParseError(f"/proc/cpuinfo: processor {current.get('processor')} has no numeric "
                                     "'physical id' and 'core id'") from None
            current = {}
            continue
        key, _sep, value = line.partition(":")
        current[key.strip()] = value.strip()
    if not cpus:
        raise ParseError("/proc/cpuinfo lists no processor: " + (text.strip()[:200] or "(empty)"))
    return cpus


def slurm_core_ids(cpuinfo):
    """{processor: Slurm's abstract core id}. Slurm (gres.conf Cores=) numbers cores as hwloc's logical
    index: core 0 is the first core of the first socket, then the next core of that socket, and so on;
    a core's hardware threads share its id. Cores are ordered by socket, then by their first processor."""
    first = {}
    for cpu, core in sorted(cpuinfo.items()):
        first.setdefault(core, cpu)
    order = sorted(first, key=lambda core: (core[0], first[core]))
    index = {core: position for position, core in enumerate(order)}
    return {cpu: index[core] for cpu, core in cpuinfo.items()}


def gpu_cores(cpu_affinity, cpuinfo):
    """{GPU index: "0-55,112-167"} (nvidia-smi's CPU Affinity) -> {GPU index: "0-55"} (gres.conf Cores=)."""
    core_of = slurm_core_ids(cpuinfo)
    result = {}
    for index, cpus in sorted(cpu_affinity.items()):
        ids = parse_id_list(cpus, f"GPU {index}: CPU Affinity")
        unknown = [cpu for cpu in ids if cpu not in core_of]
        if unknown:
            raise ParseError(f"GPU {index}: CPU Affinity {cpus} names CPUs /proc/cpuinfo does not list "
                             f"({format_id_list(unknown)})")
        result[index] = format_id_list(core_of[cpu] for cpu in ids)
    return result


def nearest_nics(row):
    """The NICs with the best connection of a GPU's row, and that connection."""
    ranked = [(CONNECTION_RANK[c], nic, c) for nic, c in row.items() if c in CONNECTION_RANK]
    if not ranked:
        return [], None
    best = min(rank for rank, _nic, _connection in ranked)
    nics = sorted(nic for rank, nic, _connection in ranked if rank == best)
    return nics, next(connection for rank, _nic, connection in ranked if rank == best)


def affinity(matrix, expected):
    """Each GPU's nearest NIC, checked against expected {gpu_index: device}.

    Returns ({gpu_index: device}, [problem, ...]). A tie at the best connection is resolved in favour
    of the expected device; a GPU whose expected device is not among its nearest is a contradiction."""
    found, problems = {}, []
    for index in sorted(matrix["gpus"]):
        nics, connection = nearest_nics(matrix["gpus"][index])
        want = expected.get(index)
        if not nics:
            if want:
                problems.append(f"GPU {index}: no NIC in the topology, the platform expects {want}")
            continue
        chosen = want if want in nics else nics[0]
        found[index] = chosen
        if want and want not in nics:
            actual = matrix["gpus"][index].get(want, "absent")
            problems.append(f"GPU {index}: nearest NIC is {', '.join(nics)} ({connection}), the platform expects "
                            f"{want} (connection {actual})")
    for index, want in sorted(expected.items()):
        if index not in matrix["gpus"]:
            problems.append(f"GPU {index}: not in the topology, the platform expects it next to {want}")
    return found, problems


# ---- gdscheck -p ------------------------------------------------------------------------------------

GDS_FILESYSTEM_LINES = {"lustre": "DDN EXAScaler", "nfs-rdma": "NFS", "beegfs": "BeeGFS"}


def parse_gdscheck(text):
    """`gdscheck -p` -> {"settings": {key: value}, "gpus": [{index, supports_gds, iommu}], "iommu": str,
    "verified": bool|None, "warnings": [line], "nvidia_fs": str}."""
    result = {"settings": {}, "gpus": [], "iommu": "", "verified": None, "warnings": [], "nvidia_fs": "", "acs": [],
              "errors": []}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("="):
            continue
        if result["verified"] is False:
            result["errors"].append(line)  # the reasons gdscheck lists under its verdict
            continue
        if re.search(r"\bWARN", line) or line.startswith(("WARN", "ERR")):
            result["warnings"].append(line)
        match = re.match(r"^GPU index (\d+) (.*)$", line)
        if match:
            rest = match.group(2)
            iommu = re.search(r"IOMMU State:\s*(\w+)", rest)
            result["gpus"].append({"index": int(match.group(1)),
                                   "supports_gds": "supports GDS" in rest and "not support" not in rest,
                                   "iommu": iommu.group(1).lower() if iommu else ""})
            continue
        match = re.search(r"nvidia_fs version:\s*(\S+)", line)
        if match and match.group(1)[0].isdigit():
            result["nvidia_fs"] = match.group(1)
        if line.startswith("Platform verification succeeded"):
            result["verified"] = True
            continue
        if line.startswith("Platform verification") and "succeeded" not in line:
            result["verified"] = False
            continue
        if re.search(r"\bACS\b", line):
            result["acs"].append(line)
        key, sep, value = line.partition(":")
        if sep:
            key = key.strip().lstrip("-").strip()
            result["settings"][key] = value.strip()
            if key == "IOMMU":
                result["iommu"] = value.strip()
    if result["verified"] is None and not result["gpus"] and not result["settings"]:
        raise ParseError("gdscheck -p printed nothing recognisable: " + (text.strip()[:200] or "(nothing)"))
    return result


def gdscheck_problems(report, filesystem_types=()):
    """What in a gdscheck report breaks GPUDirect Storage (empty list: nothing)."""
    problems = []
    if report["verified"] is not True:
        problems.append("platform verification did not succeed"
                        + (f" ({'; '.join(report['errors'])})" if report["errors"] else ""))
    iommu = report["iommu"].lower()
    if iommu and iommu != "disabled" and "pass-through" not in iommu and "passthrough" not in iommu:
        problems.append(f"IOMMU is {report['iommu']} (GPUDirect needs it off or in pass-through: iommu=pt)")
    for line in report["acs"]:
        if re.search(r"enabled", line, re.IGNORECASE) and not re.search(r"disabled", line, re.IGNORECASE):
            problems.append(f"PCIe ACS is enabled ({line}): peer-to-peer traffic goes through the root complex")
    if not report["nvidia_fs"]:
        problems.append("nvidia_fs is not loaded (no nvidia_fs version)")
    peer_direct = report["settings"].get("Mellanox PeerDirect", "")
    if peer_direct and peer_direct.lower() != "enabled":
        problems.append(f"Mellanox PeerDirect is {peer_direct} (nvidia-peermem)")
    for gpu in report["gpus"]:
        if not gpu["supports_gds"]:
            problems.append(f"GPU {gpu['index']} does not support GDS")
        if gpu["iommu"] == "enabled":
            problems.append(f"GPU {gpu['index']}: IOMMU enabled")
    for fs_type in sorted(set(filesystem_types)):
        line = GDS_FILESYSTEM_LINES.get(fs_type)
        if line and report["settings"].get(line, "").lower() != "supported":
            problems.append(f"{line} ({fs_type}) is {report['settings'].get(line) or 'not reported'}, not Supported")
    return problems


# ---- NCCL all_reduce_perf, ib_write_bw, dcgmi diag ----------------------------------------------------

def parse_nccl_busbw(text):
    """The `# Avg bus bandwidth    : 482.4` line of nccl-tests, in GB/s."""
    match = re.search(r"#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", text)
    if not match:
        raise ParseError("all_reduce_perf printed no '# Avg bus bandwidth' line: " + (text.strip()[-200:] or "(nothing)"))
    errors = re.search(r"#\s*Out of bounds values\s*:\s*(\d+)", text)
    if errors and int(errors.group(1)):
        raise ParseError(f"all_reduce_perf found {errors.group(1)} out-of-bounds values (wrong results)")
    return float(match.group(1))


def parse_ib_write_bw(text):
    """BW average [Gb/sec] of the last result line of perftest (run with --report_gbits)."""
    header_seen, value = False, None
    for line in text.splitlines():
        if re.search(r"BW average\[Gb/sec\]", line):
            header_seen = True
            continue
        if header_seen:
            fields = line.split()
            if len(fields) >= 4 and fields[0].isdigit():
                value = float(fields[3])
    if value is None:
        raise ParseError("ib_write_bw printed no result line under 'BW average[Gb/sec]': "
                         + (text.strip()[-200:] or "(nothing)"))
    return value


# `dcgmi diag -r N -j` (DCGM 3.x): {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests":
# [{"name", "results": [{"gpu_ids", "status", "warnings": [{"warning", "error_id"}], "info": [...]}]}]}],
# "version"}}. Deployment tests give one result for all GPUs ("gpu_ids": "0,1,...,7"), the others one per
# GPU. Source: NVIDIA/DCGM nvvs/src/JsonOutput.cpp (its format comment) and its JsonResult test "Deserialize
# real output" (a DCGM 3.1 run on 8 GPUs). dcgmi may print a line before the document; it is skipped.
DCGM_STATUS_ORDER = ("fail", "warn", "pass", "skip")


def _dcgm_messages(result):
    messages = []
    for warning in result.get("warnings") or []:
        text = warning.get("warning") if isinstance(warning, dict) else warning
        if text:
            messages.append(str(text).strip())
    return messages


def parse_dcgmi_diag_json(text):
    """`dcgmi diag -r N -j` -> [(test, result)] for every test, in the report's order. A test's result is
    its worst status over its results (Fail, Warn, Pass, Skip, title-cased), a failure or warning followed
    by the GPUs' warnings in parentheses: ("Persistence Mode", "Fail (GPU 3: persistence mode is disabled)")."""
    start = text.find("{")
    if start < 0:
        raise ParseError("dcgmi diag -j printed no JSON document: " + (text.strip()[:200] or "(nothing)"))
    try:
        document = json.loads(text[start:])
    except ValueError as exc:
        raise ParseError(f"dcgmi diag -j printed malformed JSON ({exc}): {text[start:start + 200]!r}") from None
    report = document.get("DCGM GPU Diagnostic") if isinstance(document, dict) else None
    categories = report.get("test_categories") if isinstance(report, dict) else None
    if not isinstance(categories, list):
        raise ParseError("dcgmi diag -j: no \"DCGM GPU Diagnostic\".test_categories in the document: "
                         + json.dumps(document)[:200])
    rows = []
    for category in categories:
        for test in (category or {}).get("tests") or []:
            if not isinstance(test, dict):
                continue  # DCGM writes null between some tests (its JSON arrays are sparse)
            name = str(test.get("name") or "").strip()
            results = [r for r in test.get("results") or [] if isinstance(r, dict)]
            if not name or not results:
                raise ParseError(f"dcgmi diag -j: a test without a name or results in {category.get('category')!r}: "
                                 + json.dumps(test)[:200])
            statuses = [str(r.get("status") or "").strip().lower() for r in results]
            unknown = sorted({status for status in statuses if status not in DCGM_STATUS_ORDER})
            if unknown:
                raise ParseError(f"dcgmi diag -j: test {name!r} has unknown status {', '.join(unknown)!r}")
            worst = min(statuses, key=DCGM_STATUS_ORDER.index)
            result = worst.capitalize()
            if worst in ("fail", "warn"):
                details = [m for r, status in zip(results, statuses) if status == worst for m in _dcgm_messages(r)]
                details = details or [f"GPU {r.get('gpu_ids')}" for r, status in zip(results, statuses) if status == worst]
                result += f" ({'; '.join(details)})"
            rows.append((name, result))
    if not rows:
        raise ParseError("dcgmi diag -j reported no test: " + json.dumps(document)[:200])
    return rows


# ---- mounts, fio, kernel log --------------------------------------------------------------------------

def _unescape(field):
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), field)


def parse_findmnt(text):
    """`findmnt -J -o TARGET,SOURCE,FSTYPE,OPTIONS` -> {target: {source, fstype, options: [...]}}; the tree
    findmnt prints (children under their parent mount) is flattened."""
    try:
        report = json.loads(text) if text.strip() else {"filesystems": []}
    except ValueError as exc:
        raise ParseError(f"findmnt printed no JSON: {exc}") from None
    mounts = {}
    pending = list(report.get("filesystems") or [])
    while pending:
        entry = pending.pop(0)
        pending.extend(entry.get("children") or [])
        options = entry.get("options") or ""
        mounts[entry.get("target", "")] = {"source": entry.get("source", ""), "fstype": entry.get("fstype", ""),
                                           "options": options.split(",") if options else []}
    return mounts


# Options mount(8) and systemd act on without handing them to the kernel: never listed by findmnt.
USERSPACE_OPTIONS = ("_netdev", "nofail", "noauto", "auto", "defaults", "user", "users", "nouser")


def missing_options(declared, present):
    present_set = set(present)
    return [o for o in declared if o not in present_set and o not in USERSPACE_OPTIONS and not o.startswith("x-")]


def parse_fio(text):
    """fio --output-format=json -> {"read_mbps": float, "write_mbps": float} (MB/s, 10^6 bytes)."""
    start = text.find("{")
    try:
        report = json.loads(text[start:]) if start >= 0 else None
    except ValueError as exc:
        raise ParseError(f"fio printed no JSON report: {exc}") from None
    if not report or not report.get("jobs"):
        raise ParseError("fio's report has no job")
    read = sum(job.get("read", {}).get("bw_bytes", 0) for job in report["jobs"])
    write = sum(job.get("write", {}).get("bw_bytes", 0) for job in report["jobs"])
    errors = [job.get("jobname", "?") for job in report["jobs"] if job.get("error")]
    if errors:
        raise ParseError(f"fio job(s) {', '.join(errors)} ended with an error")
    return {"read_mbps": round(read / 1e6, 1), "write_mbps": round(write / 1e6, 1)}


def parse_xids(text):
    """NVRM Xid lines of the kernel log -> [{pci, xid, text}]."""
    found = []
    for line in text.splitlines():
        match = re.search(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+),?\s*(.*)$", line)
        if match:
            found.append({"pci": match.group(1), "xid": int(match.group(2)), "text": match.group(3).strip()})
    return found
