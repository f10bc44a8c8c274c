"""all_reduce_perf / all_gather_perf (nccl-tests), ib_write_bw / ib_read_bw (perftest) and fio.

Figures come from the node's nominal `benchmarks` (a healthy node of its platform); a `bandwidth_low`
fault (test=<command>, value=<figure>) replaces the figure, a `port_rate` fault scales ib_*_bw, and
the preconditions of the real programs hold: CUDA needs the driver and, on NVSwitch systems, the
fabric manager; GPUDirect (--use_cuda) needs nvidia_peermem; a port that is down fails the test.
ib_*_bw runs as the client of a simulated peer, so no server process is needed.
"""

from __future__ import annotations

import json

from ..state import effective_hcas, faults, visible_gpus


def _size(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    text = text.strip().upper()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


def _figure(state: dict, test: str, nominal: float) -> float:
    for fault in faults(state, "bandwidth_low"):
        if fault.get("test") == test:
            return float(fault["value"])
    return nominal


def _nccl(tool, argv: list[str]) -> int:
    options = {"-b": "8", "-e": "128M", "-f": "2", "-g": "1", "-n": "20", "-w": "5", "-c": "1"}
    iterator = iter(argv)
    for arg in iterator:
        key = arg.split("=", 1)[0] if arg.startswith("--") else arg
        aliases = {"--minbytes": "-b", "--maxbytes": "-e", "--stepfactor": "-f", "--ngpus": "-g", "--iters": "-n",
                   "--warmup_iters": "-w", "--check": "-c"}
        key = aliases.get(key, key)
        if key not in options:
            raise tool.unsupported(argv)
        options[key] = arg.split("=", 1)[1] if "=" in arg else next(iterator, "")
    state = tool.state()
    if "nvidia" not in state["modules"]:
        raise tool.fail("Cuda failure common.cu:892 'CUDA driver version is insufficient for CUDA runtime version'", 1)
    if state.get("nvswitch_count") and not state["services"].get("nvidia-fabricmanager.service", {}).get("active"):
        raise tool.fail("Cuda failure common.cu:892 'system not yet initialized' (NVSwitch fabric not configured: "
                        "nvidia-fabricmanager is not running)", 1)
    gpus = visible_gpus(state)
    ngpus = int(options["-g"])
    if ngpus > len(gpus):
        raise tool.fail(f"Cuda failure common.cu:892 'invalid device ordinal' ({ngpus} GPUs asked, {len(gpus)} present)", 1)
    peak = _figure(state, tool.name, state["benchmarks"]["all_reduce_perf"])
    if tool.name == "all_gather_perf":
        peak = _figure(state, tool.name, peak * 0.97)
    factor = 2 * (ngpus - 1) / ngpus if tool.name == "all_reduce_perf" else (ngpus - 1) / ngpus
    minimum, maximum, step = _size(options["-b"]), _size(options["-e"]), int(options["-f"])
    tool.print(f"# nThread 1 nGpus {ngpus} minBytes {minimum} maxBytes {maximum} step: {step}(factor) warmup iters: "
               f"{options['-w']} iters: {options['-n']} agg iters: 1 validation: {options['-c']} graph: 0")
    tool.print("#\n# Using devices")
    for gpu in gpus[:ngpus]:
        tool.print(f"#  Rank {gpu['index']:>2} Group  0 Pid   4242 on {state['node']} device {gpu['index']:>2} "
                   f"[{gpu['pci_bus_id'][4:].lower()}] {gpu['name']}")
    tool.print("#\n#                                                              out-of-place                       in-place\n"
               "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
               "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)")
    size = minimum
    total = count = 0.0
    while size <= maximum:
        # Bandwidth climbs with the message size and reaches its plateau from 1 GiB on.
        busbw = (peak if size >= 2**30 else peak * size / (size + 64 * 2**20)) if ngpus > 1 else 0.0
        algbw = busbw / factor if factor else 0.0
        time_us = size / (algbw * 1e9) * 1e6 if algbw else 0.0
        tool.print(f"{size:>12} {size // 4:>13}     float     sum      -1 {time_us:>8.1f} {algbw:>7.2f} {busbw:>7.2f}"
                   f"      0 {time_us:>8.1f} {algbw:>7.2f} {busbw:>7.2f}      0")
        total += busbw
        count += 1
        size *= step
    # nccl-tests averages over every size: a gate on the plateau runs one large size (-b 8G -e 8G).
    tool.print("# Out of bounds values : 0 OK")
    tool.print(f"# Avg bus bandwidth    : {total / count if count else 0:.4f}")
    return 0


def _perftest(tool, argv: list[str]) -> int:
    device, use_cuda, report_gbits, size = None, None, False, 65536
    iterator = iter(argv)
    for arg in iterator:
        if arg in ("-d", "--ib-dev"):
            device = next(iterator, "")
        elif arg.startswith("--ib-dev="):
            device = arg.split("=", 1)[1]
        elif arg.startswith("--use_cuda"):
            use_cuda = arg.split("=", 1)[1] if "=" in arg else next(iterator, "0")
        elif arg == "--report_gbits":
            report_gbits = True
        elif arg in ("-s", "--size"):
            size = int(next(iterator, "65536"))
        elif arg in ("-i", "--ib-port", "-D", "--duration", "-n", "--iters", "-q", "--qp", "-x", "--gid-index"):
            next(iterator, None)
        elif arg in ("-F", "-a", "--all", "-R", "--rdma_cm") or not arg.startswith("-"):
            continue  # CPU-frequency warning off, all sizes, connection method, the server address
        else:
            raise tool.unsupported(argv)
    state = tool.state()
    hcas = effective_hcas(state)
    hca = next((hca for hca in hcas if hca["device"] == device), None) if device else (hcas[0] if hcas else None)
    if hca is None:
        raise tool.fail(f" IB device {device} not found\n Unable to find the Infiniband/RoCE device", 1)
    port = hca["ports"][0]
    if port["state"] != "Active":
        raise tool.fail(f" Failed to modify QP to RTR: port {port['port']} of {hca['device']} is {port['state']}\n"
                        " Unable to Connect the HCA's through the link", 1)
    if use_cuda is not None:
        if "nvidia_peermem" not in state["modules"]:
            raise tool.fail("Couldn't allocate MR with GPUDirect: nvidia_peermem is not loaded", 1)
        if int(use_cuda) >= len(visible_gpus(state)):
            raise tool.fail(f"CUDA device {use_cuda} not found", 1)
    nominal = state["benchmarks"]["ib_write_bw"] * port["rate_gbps"] / 400
    gbits = _figure(state, tool.name, nominal if tool.name == "ib_write_bw" else nominal * 0.99)
    value = gbits if report_gbits else gbits * 1000 / 8
    unit = "Gb/sec" if report_gbits else "MB/sec"
    title = "RDMA_Write BW Test" if tool.name == "ib_write_bw" else "RDMA_Read BW Test"
    line = "-" * 87
    tool.print(f"{line}\n                    {title}\n Dual-port       : OFF\t\tDevice         : {hca['device']}\n"
               f" Number of qps   : 1\t\tTransport type : IB\n Connection type : RC\t\tUsing SRQ      : OFF\n"
               f" Link type       : IB\n"
               + (f" CUDA device     : {use_cuda} (GPUDirect RDMA)\n" if use_cuda is not None else "") + line)
    tool.print(f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]")
    tool.print(f" {size:<10} {5000:<14} {value * 1.0002:.2f}            {value:.2f}\t\t   {gbits * 1e9 / 8 / size / 1e6:.6f}")
    tool.print(line)
    return 0




# fio: MB/s (10^6 bytes) a node reaches on each kind of filesystem with large direct sequential I/O.
FIO_RATES = {"lustre": (21400, 18200), "beegfs": (19000, 16500), "nfs": (11800, 9600), "nfs4": (11800, 9600)}
LOCAL_DISK = (3200, 2800)


def _fio(tool, argv: list[str]) -> int:
    options = {}
    for arg in argv:
        if not arg.startswith("--"):
            raise tool.unsupported(argv)
        key, _, value = arg[2:].partition("=")
        options[key] = value
    if options.get("output-format") != "json" or options.get("rw") not in ("read", "write"):
        raise tool.fail("the simulated fio runs --rw=read|write with --output-format=json", 2)
    directory = "/" + options.get("directory", "").strip("/")
    if not tool.path(directory).is_dir():
        raise tool.fail(f"{directory}: No such file or directory", 1)
    state = tool.state()
    mount = max((m for m in state["mounts"] if directory == m["target"] or directory.startswith(m["target"].rstrip("/") + "/")),
                key=lambda m: len(m["target"]), default=None)
    read, write = FIO_RATES.get(mount["fstype"], LOCAL_DISK) if mount else LOCAL_DISK
    for fault in faults(state, "bandwidth_low"):
        if fault.get("test") == "fio":
            read = write = float(fault["value"])
    rate = (read if options["rw"] == "read" else write) * 1e6
    size = _size(options.get("size", "1G"))
    job = {"jobname": options.get("name", "fio"), "error": 0,
           "read": {"bw_bytes": int(rate) if options["rw"] == "read" else 0, "io_bytes": size if options["rw"] == "read" else 0},
           "write": {"bw_bytes": int(rate) if options["rw"] == "write" else 0, "io_bytes": size if options["rw"] == "write" else 0}}
    # Nothing is written: the simulated filesystem holds no data, and a smoke test's gigabytes must not
    # land in the sysroot.
    tool.print(json.dumps({"fio version": "fio-3.28", "jobs": [job]}, indent=2))
    return 0


def main(tool, argv: list[str]) -> int:
    if tool.name == "fio":
        return _fio(tool, argv)
    return _nccl(tool, argv) if tool.name.endswith("_perf") else _perftest(tool, argv)
