"""MIG profiles and placements per GPU model, as data: the one table the planner, the partitioning
stage, the sizing advisor, the portal and the simulated NVML read.

Sources:
- Profile names, memory and compute fractions, instance counts and the "+me" rule (a single 1g instance
  may take the media extensions): NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
  (docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html), tables for A100-40GB,
  A100-80GB, H100-80GB, H100 NVL, H200 and B200.
- Placements (first memory slice of each allowed position, on the 8 memory slices): the same guide's
  placement diagrams and `nvidia-smi mig -lgipp` on A100 and H100, which print them as {starts}:size;
  the same geometry holds on every board listed here (7 compute slices, 8 memory slices).
- NVML profile constants: nvml.h, NVML_GPU_INSTANCE_PROFILE_1_SLICE (0x0) ... NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1
  (0x7, the 1g profile with media extensions) and NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 (0x9, the 1g
  profile with two memory slices).
- Profile ids (what `nvidia-smi mig -lgip` prints in its ID column and `nvidia-smi mig -cgi` takes):
  the same on every board listed: 19 (1g), 20 (1g+me), 15 (1g, double memory), 14 (2g), 9 (3g),
  5 (4g), 0 (7g).
- Multiprocessor counts: the guide's tables (A100: 14 per compute slice, 98 in all; Hopper: 16, 32,
  60, 64, 132); B200's are not published per profile and are left out.

Pure Python, no Django: the simulation's stdlib-only tools import it too.
"""

from __future__ import annotations

from dataclasses import dataclass

MEMORY_SLICES = 8
COMPUTE_SLICES = 7

# NVML_GPU_INSTANCE_PROFILE_* (nvml.h)
NVML_PROFILE_1_SLICE = 0x0
NVML_PROFILE_2_SLICE = 0x1
NVML_PROFILE_3_SLICE = 0x2
NVML_PROFILE_4_SLICE = 0x3
NVML_PROFILE_7_SLICE = 0x4
NVML_PROFILE_1_SLICE_REV1 = 0x7   # 1g with media extensions (+me)
NVML_PROFILE_1_SLICE_REV2 = 0x9   # 1g with two memory slices


@dataclass(frozen=True)
class Profile:
    """One GPU instance profile of one GPU model."""

    name: str                 # "1g.10gb", "1g.10gb+me", "3g.40gb", ...
    compute_slices: int       # of 7
    memory_slices: int        # of 8
    memory_gb: int            # as the name says (what people size by)
    max_instances: int        # per GPU
    placements: tuple[int, ...]  # allowed first memory slices
    nvml_profile: int         # NVML_GPU_INSTANCE_PROFILE_*
    profile_id: int           # nvidia-smi's profile id
    media_extensions: bool = False
    multiprocessors: int | None = None

    def slices_at(self, start: int) -> range:
        """The memory slices an instance of this profile placed at `start` takes."""
        return range(start, start + self.memory_slices)


@dataclass(frozen=True)
class GpuModel:
    id: str                   # "h100-80gb"
    names: tuple[str, ...]    # what NVML's nvmlDeviceGetName reports for it
    memory_gb: int            # nominal
    profiles: tuple[Profile, ...]

    def profile(self, name: str) -> Profile:
        for candidate in self.profiles:
            if candidate.name == name:
                return candidate
        raise KeyError(f"GPU model {self.id} has no MIG profile {name!r} "
                       f"(profiles: {', '.join(p.name for p in self.profiles)})")

    def profile_by_id(self, profile_id: int) -> Profile:
        for candidate in self.profiles:
            if candidate.profile_id == profile_id:
                return candidate
        raise KeyError(f"GPU model {self.id} has no MIG profile id {profile_id}")

    @property
    def whole(self) -> Profile:
        """The 7g profile: the whole GPU as one instance."""
        return next(p for p in self.profiles if p.compute_slices == COMPUTE_SLICES)


# (compute slices, memory slices, media extensions) -> geometry shared by every board listed here:
# (max instances, placements, NVML profile, nvidia-smi profile id)
_GEOMETRY = {
    (1, 1, False): (7, (0, 1, 2, 3, 4, 5, 6), NVML_PROFILE_1_SLICE, 19),
    (1, 1, True): (1, (0, 1, 2, 3, 4, 5, 6), NVML_PROFILE_1_SLICE_REV1, 20),
    (1, 2, False): (4, (0, 2, 4, 6), NVML_PROFILE_1_SLICE_REV2, 15),
    (2, 2, False): (3, (0, 2, 4), NVML_PROFILE_2_SLICE, 14),
    (3, 4, False): (2, (0, 4), NVML_PROFILE_3_SLICE, 9),
    (4, 4, False): (1, (0,), NVML_PROFILE_4_SLICE, 5),
    (7, 8, False): (1, (0,), NVML_PROFILE_7_SLICE, 0),
}
_ORDER = [(1, 1, False), (1, 1, True), (1, 2, False), (2, 2, False), (3, 4, False), (4, 4, False), (7, 8, False)]


def _model(model_id: str, names: tuple[str, ...], memory_gb: int, gb_per: dict[int, int],
           multiprocessors: dict[int, int] | None) -> GpuModel:
    """gb_per: memory slices -> the GB figure in the profile names (1, 2, 4, 8 slices)."""
    profiles = []
    for compute, memory, media in _ORDER:
        max_instances, placements, nvml_profile, profile_id = _GEOMETRY[(compute, memory, media)]
        name = f"{compute}g.{gb_per[memory]}gb" + ("+me" if media else "")
        profiles.append(Profile(name=name, compute_slices=compute, memory_slices=memory, memory_gb=gb_per[memory],
                                max_instances=max_instances, placements=placements, nvml_profile=nvml_profile,
                                profile_id=profile_id, media_extensions=media,
                                multiprocessors=(multiprocessors or {}).get(compute)))
    return GpuModel(id=model_id, names=names, memory_gb=memory_gb, profiles=tuple(profiles))


_AMPERE_SMS = {1: 14, 2: 28, 3: 42, 4: 56, 7: 98}
_HOPPER_SMS = {1: 16, 2: 32, 3: 60, 4: 64, 7: 132}

MODELS: dict[str, GpuModel] = {m.id: m for m in (
    _model("a100-40gb", ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"), 40,
           {1: 5, 2: 10, 4: 20, 8: 40}, _AMPERE_SMS),
    _model("a100-80gb", ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"), 80,
           {1: 10, 2: 20, 4: 40, 8: 80}, _AMPERE_SMS),
    _model("h100-80gb", ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"), 80,
           {1: 10, 2: 20, 4: 40, 8: 80}, _HOPPER_SMS),
    _model("h100-nvl", ("NVIDIA H100 NVL",), 94, {1: 12, 2: 24, 4: 47, 8: 94}, _HOPPER_SMS),
    _model("h200", ("NVIDIA H200", "NVIDIA H200 141GB HBM3e"), 141, {1: 18, 2: 35, 4: 71, 8: 141}, _HOPPER_SMS),
    _model("b200", ("NVIDIA B200",), 180, {1: 23, 2: 45, 4: 90, 8: 180}, None),
)}


class UnknownModel(KeyError):
    pass


def model(model_id: str) -> GpuModel:
    try:
        return MODELS[model_id]
    except KeyError:
        raise UnknownModel(f"unknown GPU model {model_id!r} (known: {', '.join(MODELS)})") from None


def model_for_name(nvml_name: str) -> GpuModel | None:
    """The table's model for the name NVML reports, or None for a GPU without MIG (or not listed)."""
    for candidate in MODELS.values():
        if nvml_name in candidate.names:
            return candidate
    return None


def layout_errors(gpu_model: GpuModel, instances: list[tuple[str, int]]) -> list[str]:
    """Why a layout of (profile name, start) pairs cannot exist on one GPU of `gpu_model`, or [] when it
    can: unknown profile, a start the profile does not allow, overlapping memory slices, more instances
    of a profile than it allows, more than one instance with media extensions, more than 7 compute slices."""
    errors = []
    used: dict[int, str] = {}
    counts: dict[str, int] = {}
    compute = 0
    media = 0
    for name, start in instances:
        try:
            profile = gpu_model.profile(name)
        except KeyError as exc:
            errors.append(str(exc.args[0]))
            continue
        if start not in profile.placements:
            errors.append(f"{name} cannot start at memory slice {start} (allowed: {list(profile.placements)})")
            continue
        for memory_slice in profile.slices_at(start):
            if memory_slice in used:
                errors.append(f"{name} at {start} overlaps {used[memory_slice]} on memory slice {memory_slice}")
                break
        else:
            for memory_slice in profile.slices_at(start):
                used[memory_slice] = f"{name} at {start}"
        counts[name] = counts.get(name, 0) + 1
        if counts[name] == profile.max_instances + 1:
            errors.append(f"at most {profile.max_instances} instance(s) of {name} fit one GPU")
        compute += profile.compute_slices
        media += profile.media_extensions
    if media > 1:
        errors.append("only one instance per GPU may hold the media extensions (+me)")
    if compute > COMPUTE_SLICES:
        errors.append(f"the instances take {compute} compute slices; a GPU has {COMPUTE_SLICES}")
    return errors
