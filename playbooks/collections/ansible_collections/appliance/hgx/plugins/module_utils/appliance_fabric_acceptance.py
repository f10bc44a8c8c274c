# Acceptance checks of the fabric, GPUDirect and benchmark gates of one node, in the record format of
# the acceptance stage: {check, node, expected, measured, passed, source, message}, one per check,
# passed or not. A value that cannot be measured is a failed check that says why.
#
# Gates come from the platform file's `acceptance:` section ({min|max, source}); the tools are found on
# the PATH (a simulated node answers with its own).

from __future__ import annotations

import os
import shutil
import subprocess
import time

try:
    from ansible_collections.appliance.hgx.plugins.module_utils.appliance_fabric_parsers import (
        ParseError, gdscheck_problems, parse_dcgmi_diag_json, parse_gdscheck, parse_ib_write_bw,
        parse_nccl_busbw, parse_xids,
    )
except ImportError:  # imported outside Ansible (unit tests put module_utils on sys.path)
    from appliance_fabric_parsers import (
        ParseError, gdscheck_problems, parse_dcgmi_diag_json, parse_gdscheck, parse_ib_write_bw,
        parse_nccl_busbw, parse_xids,
    )

GDS_TOOLS = "/usr/local/cuda/gds/tools"
NCCL_TESTS = "/usr/local/nccl-tests/build"


class Tools:
    """Runs a tool from the PATH; `timeout` bounds a benchmark that hangs on a broken fabric."""

    def __init__(self, extra_dirs=(GDS_TOOLS, NCCL_TESTS)):
        self.extra_dirs = extra_dirs

    def which(self, name):
        path = shutil.which(name)
        if path:
            return path
        for directory in self.extra_dirs:
            candidate = os.path.join(directory, name)
            if os.access(candidate, os.X_OK):
                return candidate
        return None

    def run(self, argv, timeout=600):
        binary = self.which(argv[0])
        if binary is None:
            return 127, "", f"{argv[0]} is not on the PATH"
        try:
            done = subprocess.run([binary, *argv[1:]], capture_output=True, text=True, timeout=timeout, check=False,
                                  env={**os.environ, "LC_ALL": "C"})
        except subprocess.TimeoutExpired:
            return 124, "", f"{argv[0]} did not finish within {timeout} s"
        return done.returncode, done.stdout, done.stderr

    def start(self, argv):
        binary = self.which(argv[0])
        if binary is None:
            return None
        return subprocess.Popen([binary, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "LC_ALL": "C"})


class FabricContext:
    def __init__(self, node, sysroot="", platform=None, platform_file="", ports=(), filesystem_types=(), tools=None):
        self.node = node
        self.sysroot = sysroot or ""
        self.platform = platform or {}
        self.platform_file = platform_file or f"firmware/platforms/{self.platform.get('id', '?')}.yaml"
        self.ports = list(ports) or [{"device": p["device"], "port": p.get("port", 1)}
                                     for p in (self.platform.get("hcas") or {}).get("ports") or []]
        self.filesystem_types = list(filesystem_types)
        self.tools = tools or Tools()

    def record(self, check, expected, measured, passed, source, message):
        return {"check": check, "node": self.node, "expected": expected, "measured": measured,
                "passed": bool(passed), "source": source, "message": message}

    def gate(self, name):
        gate = (self.platform.get("acceptance") or {}).get(name)
        return gate if isinstance(gate, dict) else {}

    def gate_source(self, name):
        gate = self.gate(name)
        return f"{self.platform_file}: acceptance.{name}" + (f" ({gate['source']})" if gate.get("source") else "")

    def path(self, absolute):
        return os.path.join(self.sysroot, absolute.lstrip("/")) if self.sysroot else absolute


def _failure(ctx, check, expected, source, rc, out, err, what):
    detail = (err or out).strip().splitlines()
    return ctx.record(check, expected, None, False, source,
                      f"{what} failed (rc {rc}): {detail[-1] if detail else 'no output'}")


def nccl_checks(ctx):
    gpus = int((ctx.platform.get("gpu") or {}).get("count") or 0)
    gate = ctx.gate("nccl_all_reduce_busbw_gbs")
    if gpus < 2 or "min" not in gate:
        return []
    expected = f">= {gate['min']} GB/s"
    source = ctx.gate_source("nccl_all_reduce_busbw_gbs")
    # One large message size: the gate is the bandwidth plateau, which an average over small sizes hides.
    argv = ["all_reduce_perf", "-b", "8G", "-e", "8G", "-f", "2", "-g", str(gpus)]
    rc, out, err = ctx.tools.run(argv)
    if rc != 0:
        return [_failure(ctx, "nccl.all_reduce_busbw", expected, source, rc, out, err, " ".join(argv))]
    try:
        busbw = parse_nccl_busbw(out)
    except ParseError as exc:
        return [ctx.record("nccl.all_reduce_busbw", expected, None, False, source, str(exc))]
    passed = busbw >= float(gate["min"])
    return [ctx.record("nccl.all_reduce_busbw", expected, busbw, passed, source,
                       f"all_reduce_perf on {gpus} GPUs: average bus bandwidth {busbw} GB/s"
                       + ("" if passed else f", below {gate['min']} GB/s"))]


def ib_write_bw_checks(ctx):
    gate = ctx.gate("ib_write_bw_gbps")
    if "min" not in gate:
        return []
    expected = f">= {gate['min']} Gb/s"
    source = ctx.gate_source("ib_write_bw_gbps")
    closest = {str(p["device"]): p.get("closest_gpu") for p in (ctx.platform.get("hcas") or {}).get("ports") or []}
    records = []
    for port in ctx.ports:
        device, number = str(port["device"]), int(port.get("port", 1))
        check = f"ib_write_bw.{device}"
        common = ["-d", device, "-i", str(number), "--report_gbits", "-F", "-D", "5"]
        if closest.get(device) is not None:
            common.append(f"--use_cuda={closest[device]}")  # GPUDirect RDMA: buffers in the rail GPU's memory
        # perftest measures between a server and a client: both on this node, looped through the switch.
        server = ctx.tools.start(["ib_write_bw", *common])
        if server is None:
            records.append(ctx.record(check, expected, None, False, source, "ib_write_bw is not on the PATH"))
            continue
        try:
            time.sleep(0.2)
            rc, out, err = ctx.tools.run(["ib_write_bw", *common, "localhost"], timeout=120)
        finally:
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        if rc != 0:
            records.append(_failure(ctx, check, expected, source, rc, out, err, f"ib_write_bw -d {device}"))
            continue
        try:
            bandwidth = parse_ib_write_bw(out)
        except ParseError as exc:
            records.append(ctx.record(check, expected, None, False, source, str(exc)))
            continue
        passed = bandwidth >= float(gate["min"])
        records.append(ctx.record(check, expected, bandwidth, passed, source,
                                  f"{device}/{number}: {bandwidth} Gb/s average" + ("" if passed else f", below {gate['min']}")))
    return records


def gdscheck_checks(ctx):
    if not int((ctx.platform.get("gpu") or {}).get("count") or 0):
        return []
    source = "NVIDIA GPUDirect Storage installation guide: gdscheck -p platform verification"
    rc, out, err = ctx.tools.run(["gdscheck", "-p"], timeout=120)
    if rc != 0 and not out.strip():
        return [_failure(ctx, "gds.gdscheck", "platform verified", source, rc, out, err, "gdscheck -p")]
    try:
        problems = gdscheck_problems(parse_gdscheck(out), ctx.filesystem_types)
    except ParseError as exc:
        return [ctx.record("gds.gdscheck", "platform verified", None, False, source, str(exc))]
    measured = "verified" if not problems else "; ".join(problems)
    return [ctx.record("gds.gdscheck", "platform verified", measured, not problems, source,
                       "gdscheck -p: platform verification succeeded" if not problems else f"gdscheck -p: {measured}")]


def dcgm_checks(ctx):
    if not int((ctx.platform.get("gpu") or {}).get("count") or 0):
        return []
    level = int((ctx.platform.get("acceptance") or {}).get("dcgm_diag_level") or 1)
    check, expected = f"dcgm.diag_r{level}", "every test Pass"
    source = f"{ctx.platform_file}: acceptance.dcgm_diag_level (NVIDIA DCGM diagnostics, run level {level})"
    rc, out, err = ctx.tools.run(["dcgmi", "diag", "-r", str(level), "-j"], timeout=1800)
    try:
        rows = parse_dcgmi_diag_json(out)
    except ParseError as exc:
        if rc != 0:
            return [_failure(ctx, check, expected, source, rc, out, err, f"dcgmi diag -r {level} -j")]
        return [ctx.record(check, expected, None, False, source, str(exc))]
    failed = [f"{name}: {result}" for name, result in rows if result.lower().startswith(("fail", "error"))]
    passed_count = sum(1 for _name, result in rows if result.lower().startswith("pass"))
    measured = f"{passed_count} pass, {len(failed)} fail, {len(rows) - passed_count - len(failed)} skip"
    ok = not failed and rc == 0
    message = f"dcgmi diag -r {level} -j: {measured}" + (f" ({'; '.join(failed)})" if failed else "")
    if rc != 0 and not failed:
        message += f" (exit status {rc})"
    return [ctx.record(check, expected, measured, ok, source, message)]


def read_kernel_log(path):
    """The kernel's ring buffer from /dev/kmsg (records since boot), or a kept copy when it is a file."""
    if not os.path.exists(path):
        raise OSError(f"{path} does not exist")
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(descriptor, 8192)
            except BlockingIOError:
                break  # /dev/kmsg: no more records
            except OSError as exc:
                if exc.errno == 32:  # EPIPE: a record was overwritten while reading; go on with the next
                    continue
                raise
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(descriptor)
    return b"".join(chunks).decode(errors="replace")


def xid_checks(ctx):
    if not int((ctx.platform.get("gpu") or {}).get("count") or 0):
        return []
    gate = ctx.gate("xid_errors")
    maximum = int(gate.get("max", 0))
    source = ctx.gate_source("xid_errors")
    path = ctx.path("/dev/kmsg")
    try:
        xids = parse_xids(read_kernel_log(path))
    except OSError as exc:
        return [ctx.record("gpu.xid_errors", f"<= {maximum}", None, False, source, f"cannot read the kernel log: {exc}")]
    described = "; ".join(f"Xid {x['xid']} on {x['pci']}: {x['text']}" for x in xids[:5])
    return [ctx.record("gpu.xid_errors", f"<= {maximum}", len(xids), len(xids) <= maximum, source,
                       "no NVRM Xid in the kernel log since boot" if not xids else f"{len(xids)} Xid errors: {described}")]


GROUPS = {
    "nccl": nccl_checks,
    "ib_write_bw": ib_write_bw_checks,
    "gdscheck": gdscheck_checks,
    "dcgm": dcgm_checks,
    "xid": xid_checks,
}


def run_groups(ctx, names):
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        raise ValueError(f"unknown fabric acceptance group(s) {', '.join(unknown)} (known: {', '.join(GROUPS)})")
    records = []
    for name in names:
        records.extend(GROUPS[name](ctx))
    return records
