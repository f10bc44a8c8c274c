"""On the simulated appliance a model is registered from the path its site declares, as on a real one: the
shared filesystem's mount point (/mnt/scratch/...) names the directory that stands for that filesystem."""

import pytest

from appliance.lifecycle import services
from appliance.lifecycle.errors import LifecycleError
from appliance.lifecycle.roots import simulated_filesystem_dir

from .deploy_support import demo, people  # noqa: F401 (fixtures)
from .registry_support import write_model


def test_a_model_under_the_sites_mount_point_is_registered_from_that_path(demo, people, settings):  # noqa: F811
    settings.LIFECYCLE_ARTIFACT_ROOTS = []
    write_model(simulated_filesystem_dir("scratch") / "models" / "llama-tiny" / "v1")
    version = services.register_version("llama-tiny", source="/mnt/scratch/models/llama-tiny/v1",
                                        user=people["erin"])
    assert (version.model.name, version.number) == ("llama-tiny", 1)
    assert sorted(artifact.path for artifact in version.artifacts.all()) == [
        "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    # The same through a file:// URI; another filesystem's mount point is its own directory.
    write_model(simulated_filesystem_dir("datasets") / "llm-v2", seed=3)
    again = services.register_version("llama-tiny", source="file:///mnt/datasets/llm-v2", user=people["erin"])
    assert again.number == 2


@pytest.mark.parametrize("source", ["/mnt/scratch/models/absent", "/mnt/scratchy/models/llama-tiny/v1",
                                    "/mnt/scratch/../datasets/llm-v2", "/mnt/scratch"])
def test_what_the_mount_point_does_not_hold_is_refused(demo, people, settings, source):  # noqa: F811
    settings.LIFECYCLE_ARTIFACT_ROOTS = []
    write_model(simulated_filesystem_dir("datasets") / "llm-v2")
    with pytest.raises(LifecycleError) as refused:
        services.register_version("llama-tiny", source=source, user=people["erin"])
    assert refused.value.field == "source"
    expected = {
        "/mnt/scratch/models/absent": "source: /mnt/scratch/models/absent does not exist",
        "/mnt/scratchy/models/llama-tiny/v1": "source: /mnt/scratchy/models/llama-tiny/v1 is not inside an "
                                               "artifact root (the appliance's model storage: APPLIANCE_MODEL_ROOTS, "
                                               "or its shared filesystems)",
        "/mnt/scratch/../datasets/llm-v2": "source: '..' is not allowed in '/mnt/scratch/../datasets/llm-v2'",
        "/mnt/scratch": "source: /mnt/scratch is an artifact root itself; give the model's own directory",
    }[source]
    assert str(refused.value) == expected
