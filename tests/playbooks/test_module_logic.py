"""The pure logic of the playbooks' modules: BIOS baseline checks against the registry, the
acceptance checks' verdicts, package version matching, and the NVML contradictions."""

import importlib.util
import sys
from pathlib import Path

import pytest
from django.conf import settings
from ruamel.yaml import YAML

MODULE_UTILS = Path(settings.COLLECTION_DIR) / "plugins" / "module_utils"
LIBRARY = Path(settings.COLLECTION_DIR) / "plugins" / "modules"
sys.path.insert(0, str(MODULE_UTILS))

import appliance_acceptance  # noqa: E402
import appliance_bios  # noqa: E402
import appliance_nvml  # noqa: E402


def load_yaml(path):
    return YAML(typ="safe").load(Path(path).read_text())


@pytest.fixture(scope="module")
def platform():
    return load_yaml(Path(settings.FIRMWARE_DIR) / "platforms" / "hgx-h100-8gpu.yaml")


@pytest.fixture(scope="module")
def registry():
    return load_yaml(Path(settings.FIRMWARE_DIR) / "registries" / "dell-xe9680-bios.yaml")["attributes"]


def test_the_shipped_baseline_matches_its_registry(platform, registry):
    assert appliance_bios.validate_baseline(platform["bios"]["baseline"], registry) == []


@pytest.mark.parametrize("baseline, expected", [
    ({"SysProfile": "Turbo"}, "SysProfile: 'Turbo' is not one of PerfPerWattOptimizedDapc"),
    ({"NoSuchThing": "Enabled"}, "NoSuchThing: unknown attribute"),
    ({"AcPwrRcvryDelay": 241}, "AcPwrRcvryDelay: 241 is above the maximum 240"),
    ({"AcPwrRcvryDelay": -1}, "AcPwrRcvryDelay: -1 is below the minimum 0"),
    ({"AcPwrRcvryDelay": "30"}, "AcPwrRcvryDelay: '30' is not an integer"),
    ({"AcPwrRcvryDelay": True}, "AcPwrRcvryDelay: True is not an integer"),
    ({"ProcCStates": False}, "ProcCStates: False is not one of Enabled, Disabled"),
])
def test_a_bad_baseline_value_is_named(registry, baseline, expected):
    errors = appliance_bios.validate_baseline(baseline, registry)
    assert len(errors) == 1 and errors[0].startswith(expected), errors


def test_registry_values_that_yaml_1_1_would_turn_into_booleans_stay_strings(registry):
    assert appliance_bios.validate_baseline({"SerialComm": "Off", "EmbeddedSata": "Off"}, registry) == []


def test_differences_list_only_what_changes_and_tolerate_numbers_as_strings():
    current = {"SysProfile": "PerfPerWattOptimizedDapc", "ProcTurboMode": "Enabled", "AcPwrRcvryDelay": "30"}
    baseline = {"SysProfile": "PerfOptimized", "ProcTurboMode": "Enabled", "AcPwrRcvryDelay": 30}
    assert appliance_bios.differences(baseline, current) == [
        {"attribute": "SysProfile", "old": "PerfPerWattOptimizedDapc", "new": "PerfOptimized"}]


def test_the_settings_object_is_followed_not_built():
    bios = {"@odata.id": "/redfish/v1/Systems/x/BIOS",
            "@Redfish.Settings": {"SettingsObject": {"@odata.id": "/redfish/v1/Systems/x/BIOS/Pending"}}}
    assert appliance_bios.settings_target(bios) == "/redfish/v1/Systems/x/BIOS/Pending"
    assert appliance_bios.settings_target({"@odata.id": "/redfish/v1/Systems/x/Bios"}) == "/redfish/v1/Systems/x/Bios"


def _gpus(platform, overrides=None):
    gpus = []
    for index in range(8):
        gpu = {"index": index, "uuid": f"GPU-{index}", "name": platform["gpu"]["model"],
               "memory_mib": platform["gpu"]["memory_mib"], "pci_bus_id": f"00000000:{index:02X}:00.0",
               "persistence_mode": True, "mig_mode": "disabled", "nvlink_peers": [],
               "nvlink_links_up": 18, "nvlink_links_present": 18, "pcie_link_width": 16, "retired_pages": 0}
        gpu.update((overrides or {}).get(index, {}))
        gpus.append(gpu)
    return gpus


def _gpu_checks(platform, gpus, driver="550.90.07"):
    context = appliance_acceptance.Context("gpu01", platform=platform)
    return {r["check"]: r for r in appliance_acceptance.gpu_checks(
        context, measure=lambda: (gpus, {"version": driver, "cuda": "12.4"}))}


def test_a_healthy_node_passes_every_gpu_check(platform):
    checks = _gpu_checks(platform, _gpus(platform))
    assert set(checks) == {"gpu.count", "gpu.model", "gpu.memory_mib", "driver.version", "gpu.persistence_mode",
                           "nvlink.links_up", "pcie.link_width", "gpu.retired_pages"}
    assert all(c["passed"] for c in checks.values()), [c for c in checks.values() if not c["passed"]]
    assert checks["pcie.link_width"]["source"].startswith("H100 SXM5 host interface")


def test_each_gpu_fault_fails_its_check_with_expected_and_measured(platform):
    gpus = _gpus(platform, {3: {"pcie_link_width": 8}, 5: {"nvlink_links_up": 12, "retired_pages": 2},
                            6: {"persistence_mode": False}})
    checks = _gpu_checks(platform, gpus, driver="535.104.05")
    failed = {name: c for name, c in checks.items() if not c["passed"]}
    assert set(failed) == {"driver.version", "pcie.link_width", "nvlink.links_up", "gpu.retired_pages",
                           "gpu.persistence_mode"}
    assert failed["pcie.link_width"]["measured"] == 8 and "GPU 3: 8" in failed["pcie.link_width"]["message"]
    assert failed["nvlink.links_up"]["expected"] == 18 and failed["nvlink.links_up"]["measured"] == 12
    assert failed["driver.version"]["measured"] == "535.104.05"
    assert "off: GPU 6" in failed["gpu.persistence_mode"]["message"]


def test_a_missing_gpu_fails_the_count(platform):
    checks = _gpu_checks(platform, _gpus(platform)[:7])
    assert not checks["gpu.count"]["passed"] and checks["gpu.count"]["measured"] == 7


def test_nvml_unavailable_fails_every_gpu_check_with_the_reason(platform):
    def broken():
        raise appliance_nvml.NvmlUnavailable("nvmlInit failed: Driver Not Loaded")
    context = appliance_acceptance.Context("gpu01", platform=platform)
    records = appliance_acceptance.gpu_checks(context, measure=broken)
    assert records and all(not r["passed"] and "Driver Not Loaded" in r["message"] for r in records)


def test_os_checks_read_the_sysroot(tmp_path, platform):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cmdline").write_text("BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt\n")
    (tmp_path / "proc" / "modules").write_text("nouveau 16384 0 - Live 0x0\n")
    limits = tmp_path / "etc" / "security" / "limits.d"
    limits.mkdir(parents=True)
    (limits / "90-appliance-rdma.conf").write_text("* soft memlock unlimited\n* hard memlock unlimited\n")
    (limits / "95-site.conf").write_text("*  hard  memlock  65536\n")
    context = appliance_acceptance.Context("gpu01", sysroot=str(tmp_path), platform=platform,
                                           kernel_cmdline=platform["os"]["kernel_cmdline"])
    checks = {r["check"]: r for r in appliance_acceptance.os_checks(context)}
    assert not checks["os.kernel_cmdline"]["passed"]
    assert "pci=realloc=off modprobe.blacklist=nouveau nouveau.modeset=0" in checks["os.kernel_cmdline"]["message"]
    assert not checks["os.nouveau_unloaded"]["passed"]
    assert checks["os.memlock"]["measured"] == "soft unlimited, hard 65536" and not checks["os.memlock"]["passed"]


def test_bios_checks_compare_each_attribute(platform):
    baseline = platform["bios"]["baseline"]
    measured = dict(baseline, SysProfile="PerfPerWattOptimizedDapc")
    context = appliance_acceptance.Context("gpu01", platform=platform, bios_baseline=baseline, bios_measured=measured)
    failed = [r for r in appliance_acceptance.bios_checks(context) if not r["passed"]]
    assert [(r["check"], r["expected"], r["measured"]) for r in failed] == [
        ("bios.SysProfile", "PerfOptimized", "PerfPerWattOptimizedDapc")]
    unread = appliance_acceptance.Context("gpu01", platform=platform, bios_baseline=baseline,
                                          bios_error="gpu01: BMC https://127.0.0.1:1: is unreachable")
    records = appliance_acceptance.bios_checks(unread)
    assert len(records) == len(baseline) and all("unreachable" in r["message"] for r in records)


def slurm_node(tmp_path, mpi_default: str | None) -> "appliance_acceptance.Context":
    """A node's sysroot with a slurm.conf (only what `srun --mpi=list` reads from it matters)."""
    etc = tmp_path / "etc" / "slurm"
    etc.mkdir(parents=True)
    lines = ["ClusterName=appliance", "SlurmctldHost=mgmt01(127.0.0.1)", "SlurmctldPort=6817",
             "NodeName=gpu01 CPUs=8 State=UNKNOWN", "PartitionName=train Nodes=gpu01 Default=YES"]
    if mpi_default:
        lines.append(f"MpiDefault={mpi_default}")
    (etc / "slurm.conf").write_text("\n".join(lines) + "\n")
    return appliance_acceptance.Context("gpu01", sysroot=str(tmp_path))


@pytest.mark.parametrize("mpi_default, expected, passed", [
    ("pmi2", "pmi2", True),      # what the renderer chooses from Debian's packages
    (None, "none", True),        # Slurm's own default
    ("pmix_v9", "pmix_v9", False),
])
def test_the_slurm_group_checks_mpi_default_against_srun_mpi_list(tmp_path, mpi_default, expected, passed):
    """The real srun of this machine (Debian's slurm-client, a test package), with the node's slurm.conf."""
    [record] = appliance_acceptance.slurm_checks(slurm_node(tmp_path, mpi_default))
    assert (record["check"], record["expected"], record["passed"]) == ("slurm.mpi_default", expected, passed)
    assert {"pmi2", "none"} <= set(record["measured"].split(", ")), record
    if not passed:
        assert record["message"].startswith("MpiDefault=pmix_v9 is not a type srun --mpi=list gives on this node (")


def test_the_mpi_list_parser_keeps_types_only():
    printed = ("MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\n"
               "specific pmix plugin versions available: pmix_v4\n")
    assert appliance_acceptance.mpi_types(printed) == ["pmix", "none", "cray_shasta", "pmi2"]


def test_the_slurm_group_fails_with_the_reason_when_it_cannot_measure(tmp_path):
    [unread] = appliance_acceptance.slurm_checks(appliance_acceptance.Context("gpu01", sysroot=str(tmp_path)))
    assert not unread["passed"] and unread["message"].endswith("slurm.conf: No such file or directory")

    def broken(argv, **kwargs):
        import subprocess

        return subprocess.CompletedProcess(argv, 1, "", "srun: error: Couldn't find the specified plugin name\n")

    [failed] = appliance_acceptance.slurm_checks(slurm_node(tmp_path, "pmi2"), run=broken)
    assert (failed["passed"], failed["measured"]) == (False, "unknown")
    assert failed["message"] == ("srun --mpi=list (exit status 1): srun: error: Couldn't find the specified "
                                 "plugin name")


def test_unknown_check_group_is_refused():
    with pytest.raises(ValueError, match="unknown acceptance check group"):
        appliance_acceptance.run_groups(appliance_acceptance.Context("n"), ["os", "fabrik"])


def test_package_versions_match_on_the_upstream_part():
    spec = importlib.util.spec_from_file_location("appliance_package", LIBRARY / "appliance_package.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.version_matches("1:3.3.7-1", "3.3.7")
    assert module.version_matches("550.90.07-0ubuntu1", "550.90.07")
    assert module.version_matches("550.90.07", "550.90.07")
    assert not module.version_matches("550.90.12-0ubuntu1", "550.90.07")


def test_nvml_contradictions_name_each_gpu(platform):
    gpus = _gpus(platform, {2: {"memory_mib": 40960}})
    problems = appliance_nvml.contradictions(gpus[:7], {"version": "550.90.07"}, {
        "count": 8, "model": platform["gpu"]["model"], "memory_mib": 81559, "driver_version": "550.90.07"})
    assert problems == ["NVML sees 7 GPUs, the platform has 8", "expected 81559 MiB per GPU: GPU 2 has 40960 MiB"]
