"""Platform files (firmware/platforms/<id>.yaml): loading, checking the parts the inventory uses,
and the values of the matching Platform row.

A platform file is data owned by the firmware baselines: it holds many sections (BIOS baseline, OS
tuning, acceptance gates) read by other parts of the suite. Here only `id`, `name`, `gpu` and `hcas`
are checked, because those are what the inventory creates GPUs, HCAs and ports from.
"""

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from .sitedef import Cursor, ErrorCollector, SiteValidationError, load_yaml, to_plain

PLATFORM_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
LINK_LAYERS = ("InfiniBand", "Ethernet")


@dataclass(frozen=True)
class PortSpec:
    device: str
    port: int
    closest_gpu: int | None


@dataclass(frozen=True)
class PlatformSpec:
    slug: str
    name: str
    path: Path
    digest: str
    gpu_count: int
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    mig_capable: bool = False
    nvlink_all_to_all: bool = False
    hca_model: str = ""
    hca_link_layer: str = "InfiniBand"
    hca_rate_gbps: int = 0
    ports: tuple[PortSpec, ...] = ()
    spec: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def hca_devices(self) -> list[str]:
        return list(dict.fromkeys(p.device for p in self.ports))

    def nvlink_peers(self, index: int) -> list[int]:
        # NVSwitch boards connect every GPU to every other one; without NVLink there are no peers.
        if not self.nvlink_all_to_all:
            return []
        return [i for i in range(self.gpu_count) if i != index]

    def row_values(self) -> dict:
        """Field values of the Platform row describing this file."""
        return {
            "name": self.name,
            "file": self.path.name,
            "digest": self.digest,
            "gpu_model": self.gpu_model,
            "gpu_count": self.gpu_count,
            "gpu_memory_mib": self.gpu_memory_mib,
            "hca_count": len(self.hca_devices),
            "spec": self.spec,
        }


def platforms_dir() -> Path:
    return Path(settings.FIRMWARE_DIR) / "platforms"


def available_platforms() -> list[str]:
    return sorted(p.stem for p in platforms_dir().glob("*.yaml"))


def platform_path(slug: str) -> Path | None:
    """The file of platform `slug`, or None when no such platform exists."""
    if not PLATFORM_ID.fullmatch(slug):
        return None
    path = platforms_dir() / f"{slug}.yaml"
    return path if path.is_file() else None


def load_platform(slug: str) -> PlatformSpec:
    """Read and check platform `slug`; raises SiteValidationError naming the platform file's lines,
    or LookupError when the platform does not exist."""
    path = platform_path(slug)
    if path is None:
        raise LookupError(f"unknown platform {slug!r} (known: {', '.join(available_platforms()) or 'none'})")
    text = path.read_text()
    display = str(path.relative_to(settings.BASE_DIR)) if path.is_relative_to(settings.BASE_DIR) else str(path)
    collector = ErrorCollector(display)
    root = load_yaml(text, collector)
    spec = _parse(root, slug, path, hashlib.sha256(text.encode()).hexdigest()) if root else None
    collector.raise_if_any()
    assert spec is not None
    return spec


def load_all_platforms() -> list[PlatformSpec]:
    specs, errors = [], []
    for slug in available_platforms():
        try:
            specs.append(load_platform(slug))
        except SiteValidationError as exc:
            errors.extend(exc.errors)
    if errors:
        raise SiteValidationError(errors)
    return specs


def _parse(root: Cursor, slug: str, path: Path, digest: str) -> PlatformSpec | None:
    top = root.mapping()
    if top is None:
        return None
    top_id = root.require(top, "id")
    platform_id = top_id.text() if top_id else None
    if platform_id is not None and platform_id != slug:
        top_id.error(f"is {platform_id!r} but the file is {path.name}: the id must be the file name")
    name_cursor = root.require(top, "name")
    name = name_cursor.text() if name_cursor else None

    values: dict = {}
    gpu_cursor = root.require(top, "gpu")
    gpu = gpu_cursor.mapping() if gpu_cursor else None
    gpu_count = 0
    if gpu is not None:
        count = gpu_cursor.require(gpu, "count")
        gpu_count = (count.integer(minimum=0, maximum=64) if count else None) or 0
        if gpu_count:
            model = gpu_cursor.require(gpu, "model")
            memory = gpu_cursor.require(gpu, "memory_mib")
            values["gpu_model"] = (model.text() if model else None) or ""
            values["gpu_memory_mib"] = (memory.integer(minimum=1) if memory else None) or 0
            if "mig_capable" in gpu:
                values["mig_capable"] = bool(gpu_cursor.child("mig_capable").boolean())
            _check_mig_model(gpu_cursor, gpu, values)
            values["nvlink_all_to_all"] = any(bool(gpu[key].value) for key in ("nvlink", "nvswitch_count")
                                              if key in gpu)

    ports: list[PortSpec] = []
    if "hcas" in top:
        hcas_cursor = root.child("hcas")
        hcas = hcas_cursor.mapping()
        if hcas is not None:
            if "model" in hcas:
                values["hca_model"] = hcas_cursor.child("model").text() or ""
            if "link_layer" in hcas:
                values["hca_link_layer"] = hcas_cursor.child("link_layer").choice(LINK_LAYERS) or "InfiniBand"
            if "rate_gbps" in hcas:
                values["hca_rate_gbps"] = hcas_cursor.child("rate_gbps").integer(minimum=1) or 0
            ports_cursor = hcas_cursor.require(hcas, "ports")
            seen: dict[tuple[str, int], Cursor] = {}
            for item in (ports_cursor.sequence() if ports_cursor else None) or []:
                port_fields = item.mapping()
                if port_fields is None:
                    continue
                device = item.require(port_fields, "device")
                device_name = device.text() if device else None
                number = item.child("port").integer(minimum=1, maximum=255) if "port" in port_fields else 1
                closest = None
                if "closest_gpu" in port_fields:
                    closest_cursor = item.child("closest_gpu")
                    closest = closest_cursor.integer(minimum=0)
                    if closest is not None and closest >= gpu_count:
                        closest_cursor.error(f"GPU {closest} does not exist (the platform has {gpu_count} GPUs)")
                        closest = None
                if device_name is None or number is None:
                    continue
                if (device_name, number) in seen:
                    item.error(f"port {device_name}/{number} is listed twice (first at line {seen[device_name, number].line})")
                    continue
                seen[device_name, number] = item
                ports.append(PortSpec(device_name, number, closest))

    if platform_id is None or name is None:
        return None
    return PlatformSpec(slug=slug, name=name, path=path, digest=digest, gpu_count=gpu_count,
                        ports=tuple(ports), spec=to_plain(root.value), **values)


def _check_mig_model(gpu_cursor: Cursor, gpu: dict, values: dict) -> None:
    """gpu.mig_model names the GPU's model in the one MIG profile table (appliance/partitioning/profiles.py),
    which the simulated hardware, the planner and the partitioning stage read; a MIG-capable GPU needs it,
    and the table's model must be the one whose NVML name gpu.model gives."""
    from appliance.partitioning import profiles

    if "mig_model" not in gpu:
        if values.get("mig_capable"):
            gpu_cursor.error(f"mig_capable is true but mig_model is missing (one of: {', '.join(profiles.MODELS)})")
        return
    cursor = gpu_cursor.child("mig_model")
    model_id = cursor.choice(tuple(profiles.MODELS))
    if model_id is None:
        return
    table_model = profiles.MODELS[model_id]
    name = values.get("gpu_model")
    if name and name not in table_model.names:
        cursor.error(f"is {model_id!r}, whose GPUs NVML names {', '.join(map(repr, table_model.names))}, "
                     f"but gpu.model is {name!r}")
