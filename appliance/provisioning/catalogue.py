"""The stage catalogue: the fixed, ordered list of provisioning stages.

Adding a stage is a playbook (playbooks/stages/<name>.yml) and one entry below. An entry says which
node roles the stage acts on, may add extra variables (a vars provider: (run, nodes) -> dict), secrets
(a secrets provider: (run, nodes) -> {variable: {host: secret}}, passed as the BMC passwords are: in the
run's private vars file, masked everywhere else) and may refuse to start (a validation hook: (nodes) ->
list of error lines naming file:line), so that a bad input stops the run before anything is sent.

A provider may be named instead of given: an app above provisioning (telemetry) registers its providers
by name in its AppConfig.ready() (register_provider), since provisioning must not import it.

A deployment may replace the catalogue (a site with extra stages) by naming another Catalogue object
in the APPLIANCE_PROVISIONING_CATALOGUE environment variable or the PROVISIONING_CATALOGUE setting
("module.path:NAME"); the test suite uses that to drive the engine with playbooks of its own.
"""

import importlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.utils.translation import gettext_lazy as _

from appliance.inventory.choices import NODE_ROLES
from appliance.partitioning.renderers import stage_vars

from . import baseline

ALL_ROLES = frozenset(NODE_ROLES)

_PROVIDERS: dict[str, Callable] = {}


class UnknownProvider(LookupError):
    pass


def register_provider(name: str, function: Callable) -> None:
    """Make a vars or secrets provider known by name (an app's ready(); registering again replaces it)."""
    _PROVIDERS[name] = function


def provider(reference: Callable | str | None) -> Callable | None:
    if reference is None or callable(reference):
        return reference
    try:
        return _PROVIDERS[reference]
    except KeyError:
        raise UnknownProvider(f"no stage variables provider {reference!r} is registered (is the app that "
                              "provides it in INSTALLED_APPS?)") from None


@dataclass(frozen=True)
class Stage:
    name: str
    playbook: str  # relative to settings.PLAYBOOKS_DIR, or absolute
    # Lazy text, in the reader's language: not part of what makes two stages equal.
    description: str = field(compare=False)
    roles: frozenset[str] = ALL_ROLES
    vars_provider: Callable | str | None = field(default=None, compare=False)
    validate: Callable | None = field(default=None, compare=False)
    secrets_provider: Callable | str | None = field(default=None, compare=False)

    def playbook_path(self) -> Path:
        path = Path(self.playbook)
        return path if path.is_absolute() else Path(settings.PLAYBOOKS_DIR) / path

    def applies_to(self, node) -> bool:
        return node.role in self.roles

    def extra_vars(self, run, nodes) -> dict:
        function = provider(self.vars_provider)
        return dict(function(run, nodes)) if function else {}

    def secret_vars(self, run, nodes) -> dict[str, dict[str, str]]:
        function = provider(self.secrets_provider)
        return {name: dict(values) for name, values in function(run, nodes).items()} if function else {}

    def errors(self, nodes) -> list[str]:
        problems = []
        if not self.playbook_path().is_file():
            problems.append(f"stage {self.name}: playbook {self.playbook_path()} does not exist")
        if self.validate:
            problems.extend(self.validate(nodes))
        return problems


class UnknownStage(ValueError):
    pass


class Catalogue:
    def __init__(self, stages: Iterable[Stage]):
        self.stages = list(stages)
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names repeat in the catalogue: {names}")
        self._by_name = {s.name: s for s in self.stages}

    def __iter__(self):
        return iter(self.stages)

    def __len__(self):
        return len(self.stages)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    def get(self, name: str) -> Stage:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownStage(f"unknown stage {name!r} (stages: {', '.join(self.names)})") from None

    def select(self, only: Iterable[str] | None = None, start: str | None = None) -> list[Stage]:
        """Stages in catalogue order: `only` those named, or every stage from `start` on."""
        if only:
            wanted = {self.get(n).name for n in only}
            selected = [s for s in self.stages if s.name in wanted]
        else:
            selected = list(self.stages)
        if start:
            first = self.names.index(self.get(start).name)
            selected = [s for s in selected if self.names.index(s.name) >= first]
        return selected


def _firmware_baselines(nodes) -> list[str]:
    return baseline.validate_nodes(nodes)


DEFAULT = Catalogue([
    Stage("firmware", "stages/firmware.yml",
          _("BIOS settings over each node's BMC (Redfish): the platform baseline, checked against the "
           "attribute registry, changed attributes read back."),
          validate=_firmware_baselines),
    Stage("os", "stages/os.yml",
          _("Kernel command line (IOMMU passthrough, nouveau off), memlock limits for RDMA, CPU governor, "
           "chrony, PCIe ACS off on bridges at boot.")),
    Stage("gpu", "stages/gpu.yml",
          _("NVIDIA driver, persistence daemon, fabric manager (NVSwitch), DCGM; verified through NVML."),
          roles=frozenset({"gpu"})),
    Stage("fabric", "stages/fabric.yml",
          _("RDMA stack and InfiniBand tools, the subnet manager (opensm with priority, or the site's "
           "external one), IPoIB interfaces with partition keys; every port verified Active, LinkUp, at "
           "the platform's rate, error counters below thresholds."),
          vars_provider=stage_vars.fabric_stage_vars),
    Stage("gpudirect", "stages/gpudirect.yml",
          _("GPUDirect RDMA (nvidia-peermem) and Storage (nvidia-fs, cufile.json, gdscheck -p enforced); "
           "each GPU's nearest HCA from the topology recorded and checked against the platform."),
          roles=frozenset({"gpu"}), vars_provider=stage_vars.gpudirect_stage_vars),
    Stage("storage", "stages/storage.yml",
          _("Parallel filesystem clients (Lustre over o2ib, BeeGFS with RDMA, NFS over RDMA) as systemd "
           "mount units, each verified with its declared options, and a throughput smoke test."),
          vars_provider=stage_vars.storage_stage_vars),
    Stage("workloads", "stages/workloads.yml",
          _("Slurm for the training pool (slurm.conf, gres.conf, cgroup.conf, munge key, node health "
           "check) and the Kubernetes inference pool (GPU operator values, time-slicing, labels, taints)."),
          vars_provider=stage_vars.workloads_stage_vars),
    Stage("partitioning", "stages/partitioning.yml",
          _("GPU partitioning: each GPU brought to its planned MIG layout through NVML (explicit placements, "
            "one compute instance each; Slurm nodes drained first and resumed after), time-slicing for the "
            "device plugin, the instances recorded as facts; a run without a plan keeps the recorded layout."),
          roles=frozenset({"gpu"}), vars_provider=stage_vars.partitioning_stage_vars),
    Stage("monitoring", "stages/monitoring.yml",
          _("The telemetry collector on every node (NVML with GPM, InfiniBand, filesystems, jobs): its "
            "package and Python dependencies from the appliance's repository, its configuration and ingest "
            "token, a systemd unit enabled and started; its rollups go to the appliance, raw points to the "
            "site's InfluxDB when one is set, and /metrics serves the DCGM exporter's names."),
          vars_provider="telemetry.monitoring_stage_vars", secrets_provider="telemetry.monitoring_stage_secrets"),
    Stage("acceptance", "stages/acceptance.yml",
          _("The result checked against the platform's expectations: GPUs, driver, persistence, NVLink, "
           "BIOS values, the settings of the other stages, the fabric, GPUDirect, NCCL and InfiniBand "
           "bandwidth, DCGM diagnostics, XID errors and each node's collector answering on /metrics; each "
           "partitioned GPU's MIG instances through NVML against the applied partition plan."),
          vars_provider=stage_vars.acceptance_stage_vars),
])


def active() -> Catalogue:
    reference = (getattr(settings, "PROVISIONING_CATALOGUE", "")
                 or os.environ.get("APPLIANCE_PROVISIONING_CATALOGUE", ""))
    if not reference:
        return DEFAULT
    module_name, _, attribute = reference.partition(":")
    catalogue = getattr(importlib.import_module(module_name), attribute or "CATALOGUE")
    if not isinstance(catalogue, Catalogue):
        raise TypeError(f"{reference} is not a provisioning Catalogue")
    return catalogue
