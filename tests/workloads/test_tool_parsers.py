"""The parsers behind the fabric, gpudirect, storage and acceptance modules, on the tools' real formats."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "playbooks" / "collections" / "ansible_collections" / "appliance" / "hgx" / "plugins" / "module_utils"))

import appliance_fabric_parsers as parsers  # noqa: E402

IBSTAT = """CA 'mlx5_0'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tHardware version: 0
\tNode GUID: 0x946DAE0300D2A0D2
\tSystem image GUID: 0x946dae0300d2a0d2
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 400
\t\tBase lid: 5
\t\tLMC: 0
\t\tSM lid: 1
\t\tCapability mask: 0xa651e848
\t\tPort GUID: 0x946dae0300d2a0d2
\t\tLink layer: InfiniBand
CA 'mlx5_1'
\tCA type: MT4129
\tNumber of ports: 1
\tPort 1:
\t\tState: Down
\t\tPhysical state: Polling
\t\tRate: 10
\t\tLink layer: InfiniBand
"""

TOPO = """\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tPIX\tSYS\t0-55,112-167\t0\t\tN/A
GPU1\tNV18\t X \tSYS\tPIX\t56-111,168-223\t1\t\tN/A
NIC0\tPIX\tSYS\t X \tSYS
NIC1\tSYS\tPIX\tSYS\t X

Legend:

  X    = Self
  PIX  = Connection traversing at most a single PCIe bridge

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""

GDSCHECK_OK = """ GDS release version: 1.9.1.3
 nvidia_fs version:  2.20 libcufile version: 2.12
 =====================
 DRIVER CONFIGURATION:
 =====================
 DDN EXAScaler      : Supported
 NFS                : Supported
 BeeGFS             : Unsupported
 --Mellanox PeerDirect : Enabled
 --rdma_device_status  : Up: 8 Down: 0
 =========
 GPU INFO:
 =========
 GPU index 0 NVIDIA H100 80GB HBM3 bar:1 bar size (MiB):131072 supports GDS, IOMMU State: Disabled
 ==============
 PLATFORM INFO:
 ==============
 IOMMU: Pass-through or disabled
 ACS: disabled on all PCIe bridges
 Platform verification succeeded
"""


def test_ibstat_ports():
    cas = parsers.parse_ibstat(IBSTAT)
    assert cas["mlx5_0"]["ports"][1] == {"state": "Active", "physical_state": "LinkUp", "rate_gbps": 400,
                                         "port_guid": "0x946dae0300d2a0d2", "link_layer": "InfiniBand"}
    assert cas["mlx5_0"]["node_guid"] == "0x946dae0300d2a0d2"
    assert cas["mlx5_1"]["ports"][1]["state"] == "Down"
    with pytest.raises(parsers.ParseError, match="no CA"):
        parsers.parse_ibstat("ibwarn: no devices\n")


def test_topology_affinity_and_contradiction():
    matrix = parsers.parse_topo_matrix(TOPO)
    assert matrix["gpus"][0] == {"mlx5_0": "PIX", "mlx5_1": "SYS"}
    assert parsers.affinity(matrix, {0: "mlx5_0", 1: "mlx5_1"}) == ({0: "mlx5_0", 1: "mlx5_1"}, [])
    found, problems = parsers.affinity(matrix, {0: "mlx5_1", 1: "mlx5_1"})
    assert found[0] == "mlx5_0"
    assert problems == ["GPU 0: nearest NIC is mlx5_0 (PIX), the platform expects mlx5_1 (connection SYS)"]
    # drivers before the NIC legend name the devices in the header
    older = TOPO.replace("NIC0", "mlx5_0").replace("NIC1", "mlx5_1").split("NIC Legend")[0]
    assert parsers.parse_topo_matrix(older)["gpus"][1] == {"mlx5_0": "SYS", "mlx5_1": "PIX"}


def test_gpu_cores_follow_the_nodes_own_cpu_numbering():
    """CPU Affinity -> Slurm's abstract core ids through /proc/cpuinfo, not arithmetic on CPU ids: here the
    two threads of a core are adjacent (CPUs 0 and 1 are core 0), as on many AMD EPYC servers."""
    assert parsers.parse_topo_matrix(TOPO)["cpu_affinity"] == {0: "0-55,112-167", 1: "56-111,168-223"}
    cpuinfo = "".join(f"processor\t: {cpu}\nphysical id\t: {cpu // 8}\ncore id\t\t: {cpu % 8 // 2}\n\n"
                      for cpu in range(16))  # 2 sockets x 4 cores x 2 threads, siblings adjacent
    cores = parsers.parse_cpuinfo(cpuinfo)
    assert cores[0] == cores[1] == (0, 0) and cores[9] == (1, 0)
    assert parsers.gpu_cores({0: "0-7", 1: "8-15", 2: "2-3,10-11"}, cores) == {0: "0-3", 1: "4-7", 2: "1,5"}
    with pytest.raises(parsers.ParseError, match=r"GPU 0: CPU Affinity 0-31 names CPUs /proc/cpuinfo does not list \(16-31\)"):
        parsers.gpu_cores({0: "0-31"}, cores)
    with pytest.raises(parsers.ParseError, match="expected ids like 0-55,112-167, read '7-3'"):
        parsers.gpu_cores({0: "7-3"}, cores)


def test_gdscheck_findings():
    report = parsers.parse_gdscheck(GDSCHECK_OK)
    assert report["verified"] is True and report["nvidia_fs"] == "2.20"
    assert parsers.gdscheck_problems(report, ["lustre", "nfs-rdma"]) == []
    assert parsers.gdscheck_problems(report, ["beegfs"]) == ["BeeGFS (beegfs) is Unsupported, not Supported"]
    broken = (GDSCHECK_OK.replace("ACS: disabled on all PCIe bridges", "ACS: enabled on 2 PCIe bridge(s): 0000:17:00.0")
              .replace("Platform verification succeeded", "Platform verification error :\n   ACS is enabled")
              .replace("nvidia_fs version:  2.20", "nvidia_fs version:  not loaded"))
    problems = parsers.gdscheck_problems(parsers.parse_gdscheck(broken))
    assert problems[0] == "platform verification did not succeed (ACS is enabled)"
    assert any(p.startswith("PCIe ACS is enabled") for p in problems)
    assert "nvidia_fs is not loaded (no nvidia_fs version)" in problems
    iommu = parsers.parse_gdscheck(GDSCHECK_OK.replace("IOMMU: Pass-through or disabled", "IOMMU: enabled"))
    assert parsers.gdscheck_problems(iommu)[0].startswith("IOMMU is enabled")


def test_benchmark_outputs():
    nccl = "#   8589934592 2147483648 float sum -1 36000 238.6 478.7 0\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 478.7135\n"
    assert parsers.parse_nccl_busbw(nccl) == 478.7135
    with pytest.raises(parsers.ParseError, match="out-of-bounds"):
        parsers.parse_nccl_busbw(nccl.replace("values : 0", "values : 3"))
    perftest = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
                " 65536      5000             392.61             392.55               0.748718\n")
    assert parsers.parse_ib_write_bw(perftest) == 392.55
    with pytest.raises(parsers.ParseError):
        parsers.parse_ib_write_bw(" Unable to Connect the HCA's through the link\n")
    # `dcgmi diag -r 2 -j` in DCGM 3.x's shape, after the "Deserialize real output" sample of NVIDIA/DCGM's
    # JsonResult tests (a 3.1 run on 8 GPUs: nulls between tests, one Deployment result for all GPUs) with a
    # failing per-GPU test as nvvs/src/JsonOutput.cpp writes it; dcgmi printed a warning line first.
    dcgm = """WARNING: THIS SHOULD NOT HAPPEN
{
\t"DCGM GPU Diagnostic" : {
\t\t"test_categories" : [
\t\t\t{"category" : "Deployment", "tests" : [
\t\t\t\t{"name" : "Denylist", "results" : [{"gpu_ids" : "0,1,2,3,4,5,6,7", "status" : "PASS"}]},
\t\t\t\tnull,
\t\t\t\t{"name" : "Persistence Mode", "results" : [{"gpu_ids" : "0,1,2,3,4,5,6,7", "status" : "FAIL",
\t\t\t\t\t"warnings" : [{"warning" : "GPU 3: persistence mode is disabled", "error_id" : 17}]}]}
\t\t\t]},
\t\t\t{"category" : "Integration", "tests" : [
\t\t\t\t{"name" : "PCIe", "results" : [{"gpu_ids" : "0", "status" : "Pass"},
\t\t\t\t\t{"gpu_ids" : "1", "status" : "Skip", "info" : ["not supported"]}]},
\t\t\t\t{"name" : "NVLink", "results" : [{"gpu_ids" : "0", "status" : "Pass"},
\t\t\t\t\t{"gpu_ids" : "1", "status" : "Fail", "warnings" : [{"warning" : "GPU 1: NVLink 3 down", "error_id" : 25}]}]}
\t\t\t]}
\t\t],
\t\t"version" : "3.1.0"
\t}
}
"""
    assert parsers.parse_dcgmi_diag_json(dcgm) == [("Denylist", "Pass"),
                                                   ("Persistence Mode", "Fail (GPU 3: persistence mode is disabled)"),
                                                   ("PCIe", "Pass"), ("NVLink", "Fail (GPU 1: NVLink 3 down)")]
    with pytest.raises(parsers.ParseError, match=r"dcgmi diag -j printed malformed JSON \(Expecting"):
        parsers.parse_dcgmi_diag_json(dcgm[:-40])
    with pytest.raises(parsers.ParseError, match="no JSON document: Error: Unable to connect to host engine"):
        parsers.parse_dcgmi_diag_json("Error: Unable to connect to host engine.\n")
    with pytest.raises(parsers.ParseError, match="test 'PCIe' has unknown status 'broken'"):
        parsers.parse_dcgmi_diag_json(dcgm.replace('"status" : "Skip"', '"status" : "broken"'))


def test_mounts_fio_and_xids():
    findmnt = json.dumps({"filesystems": [{"target": "/", "source": "/dev/sda1", "fstype": "ext4", "options": "rw",
                                           "children": [{"target": "/mnt/scratch", "source": "10.10.1.1@o2ib:/scratch",
                                                         "fstype": "lustre", "options": "rw,flock,noatime"}]}]})
    mounts = parsers.parse_findmnt(findmnt)
    assert mounts["/mnt/scratch"]["options"] == ["rw", "flock", "noatime"]
    assert parsers.missing_options(["_netdev", "flock", "noatime"], mounts["/mnt/scratch"]["options"]) == []
    assert parsers.missing_options(["nconnect=8"], ["rw", "proto=rdma"]) == ["nconnect=8"]
    fio = json.dumps({"jobs": [{"jobname": "x", "error": 0, "read": {"bw_bytes": 21400000000}, "write": {"bw_bytes": 0}}]})
    assert parsers.parse_fio("note: both iodepth >= 1\n" + fio) == {"read_mbps": 21400.0, "write_mbps": 0.0}
    log = "[  12.3] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n[  1.0] other\n"
    assert parsers.parse_xids(log) == [{"pci": "0000:18:00", "xid": 79, "text": "pid=0, GPU has fallen off the bus."}]


def _sysfs_port(root, device, port, state, phys_state, rate, guid="946d:ae03:00d2:a0d2"):
    base = root / "sys" / "class" / "infiniband" / device
    (base / "ports" / str(port) / "gids").mkdir(parents=True)
    (base / "node_guid").write_text(f"{guid}\n")
    files = {"state": state, "phys_state": phys_state, "rate": rate, "link_layer": "InfiniBand",
             "gids/0": f"fe80:0000:0000:0000:{guid}"}
    for name, text in files.items():
        (base / "ports" / str(port) / name).write_text(text + "\n")


def test_infiniband_ports_from_sysfs(tmp_path):
    # The kernel's formats (drivers/infiniband/core/sysfs.c), as a ConnectX-7 node shows them; a port
    # without a link reports 2.5 Gb/sec at 1X and no speed name (SDR is written as nothing).
    _sysfs_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")
    _sysfs_port(tmp_path, "mlx5_1", 1, "1: DOWN", "2: Polling", "2.5 Gb/sec (1X)", guid="946d:ae03:00d2:a0d3")
    assert parsers.read_infiniband_sysfs(str(tmp_path)) == {
        "mlx5_0": {"node_guid": "0x946dae0300d2a0d2", "ports": {1: {
            "state": "Active", "physical_state": "LinkUp", "rate_gbps": 400, "port_guid": "0x946dae0300d2a0d2",
            "link_layer": "InfiniBand"}}},
        "mlx5_1": {"node_guid": "0x946dae0300d2a0d3", "ports": {1: {
            "state": "Down", "physical_state": "Polling", "rate_gbps": 2.5, "port_guid": "0x946dae0300d2a0d3",
            "link_layer": "InfiniBand"}}},
    }
    assert parsers.read_infiniband_sysfs(str(tmp_path / "no-hca")) == {}
    (tmp_path / "sys/class/infiniband/mlx5_1/ports/1/rate").write_text("fast\n")
    with pytest.raises(parsers.ParseError, match=r"mlx5_1/ports/1/rate: expected '<rate> Gb/sec .*read 'fast'"):
        parsers.read_infiniband_sysfs(str(tmp_path))
