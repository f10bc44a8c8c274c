"""manage.py partition apply: a plan number or a planner result file, refused with one message naming the
place when the plan cannot be applied."""

import json

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from appliance.inventory.models import Appliance
from appliance.inventory.services import import_site
from appliance.partitioning.cli.apply import describe_disruption
from appliance.partitioning.models import Plan
from appliance.simulation.services import demo_site_text, ensure_demo_credential


@pytest.fixture
def demo(db, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "KEYS_DIR", tmp_path / "keys")
    ensure_demo_credential()
    import_site(demo_site_text(), str(settings.DEMO_SITE))
    return Appliance.objects.get(name="demo")


def test_unknown_plan_number_and_bad_file_are_named(demo, tmp_path):
    with pytest.raises(CommandError, match="PLAN: appliance demo has no plan 7"):
        call_command("partition", "apply", "7")
    broken = tmp_path / "plan.yaml"
    broken.write_text("gpus:\n  - id: gpu04/gpu0\n    mig: [ {profile: 3g.40gb, start: 0}\n")
    with pytest.raises(CommandError, match=r"plan\.yaml:\d+: not YAML or JSON"):
        call_command("partition", "apply", str(broken))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"gpus": [{"id": "gpu04/gpu0", "mig": [{"profile": "3g.40gb", "start": 1}]}]}))
    with pytest.raises(CommandError) as refused:
        call_command("partition", "apply", str(bad))
    assert str(refused.value) == (f"{bad}: gpus[0] (gpu04/gpu0).mig: 3g.40gb cannot start at memory slice 1 "
                                  "(allowed: [0, 4])")
    assert not Plan.objects.exists()
    with pytest.raises(CommandError, match="--appliance: no appliance nope"):
        call_command("partition", "apply", "1", "--appliance", "nope")


def test_a_plan_that_changes_nothing_is_refused_after_its_diff(demo, tmp_path, capsys):
    same = tmp_path / "same.json"
    # gpu04/gpu0 as it is: its pool (demo.yml) time-slices it x4.
    same.write_text(json.dumps({"gpus": [{"id": "gpu04/gpu0", "mig": None, "time_slicing": {"replicas": 4}}]}))
    with pytest.raises(CommandError, match="plan 1 changes no GPU"):
        call_command("partition", "apply", str(same))
    assert Plan.objects.get(number=1).description == f"from {same}"


def test_the_diff_is_one_line_per_changed_gpu():
    disruption = {"gpus_changed": ["gpu04/gpu0", "gpu04/gpu1"],
                  "destroyed": [{"gpu": "gpu04/gpu0", "profile": "7g.80gb", "start": 0}],
                  "created": [{"gpu": "gpu04/gpu0", "profile": "3g.40gb", "start": 0},
                              {"gpu": "gpu04/gpu0", "profile": "3g.40gb", "start": 4}],
                  "mig_mode_changes": [], "time_slicing_changes": [{"gpu": "gpu04/gpu1", "from": 0, "to": 4}]}
    assert describe_disruption(disruption) == [
        "  gpu04/gpu0: destroy 7g.80gb@0; create 3g.40gb@0, 3g.40gb@4",
        "  gpu04/gpu1: time-slicing - -> 4 replicas"]
