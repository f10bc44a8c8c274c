"""manage.py partition plan: files in, the plan out (JSON or a table), one clear error naming the file,
line and field for bad input, and --appliance/--save against the demo appliance's inventory."""

import json
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from appliance.audit.models import AuditRecord
from appliance.inventory.models import Appliance
from appliance.inventory.services import import_site
from appliance.partitioning.models import Plan
from appliance.simulation.services import demo_site_text, ensure_demo_credential

SMALL = """\
gpus:
  - {id: n1/gpu0, model: h100-80gb}
  - {id: n1/gpu1, model: h100-80gb}
requests:
  - name: chat
    memory_gb: 10
    replicas: 2
    isolation: hard
  - name: embed
    memory_gb: 30
    isolation: soft
"""


def run(*args) -> str:
    out = StringIO()
    call_command("partition", "plan", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def write(tmp_path):
    def write(name, text):
        path = tmp_path / name
        path.write_text(text)
        return str(path)
    return write


def test_json_for_a_small_case(db, write):
    result = json.loads(run("--requests", write("plan.yaml", SMALL), "--json"))
    assert result == {
        "gpus": [
            {"id": "n1/gpu0", "model": "h100-80gb",
             "mig": [{"profile": "1g.10gb", "start": 0}, {"profile": "1g.10gb", "start": 1},
                     {"profile": "3g.40gb", "start": 4}],
             "time_slicing": None},
            {"id": "n1/gpu1", "model": "h100-80gb", "mig": None, "time_slicing": None},
        ],
        "placed": [
            {"request": "chat", "replica": 0, "gpu": "n1/gpu0", "profile": "1g.10gb", "start": 0, "kind": "mig"},
            {"request": "chat", "replica": 1, "gpu": "n1/gpu0", "profile": "1g.10gb", "start": 1, "kind": "mig"},
            {"request": "embed", "replica": 0, "gpu": "n1/gpu0", "profile": "3g.40gb", "start": 4, "kind": "mig"},
        ],
        "unplaced": [],
        "served_weight": 3.0,
        "total_weight": 3.0,
        "disruption": {
            "destroyed": [],
            "created": [{"gpu": "n1/gpu0", "profile": "1g.10gb", "start": 0},
                        {"gpu": "n1/gpu0", "profile": "1g.10gb", "start": 1},
                        {"gpu": "n1/gpu0", "profile": "3g.40gb", "start": 4}],
            "kept": [],
            "mig_mode_changes": [{"gpu": "n1/gpu0", "enabled": True}],
            "time_slicing_changes": [],
            "gpus_changed": ["n1/gpu0"],
        },
        "optimality": {"status": "optimal", "gap_percent": 0.0, "bound_weight": 3, "plan_from": "greedy",
                       "solver": result["optimality"]["solver"], "solver_status": "not needed",
                       "note": "the greedy plan places every replica that fits some GPU"},
    }


def test_json_file_and_current_file(db, write):
    plan = write("plan.json", json.dumps({
        "gpus": [{"id": "n1/gpu0", "model": "h100-80gb"}],
        "requests": [{"name": "llm", "memory_gb": 35, "isolation": "hard"}]}))
    current = write("current.json", json.dumps([
        {"id": "n1/gpu0", "mig": [{"profile": "3g.40gb", "start": 4}], "time_slicing": None}]))
    result = json.loads(run("--requests", plan, "--current", current, "--json"))
    assert result["placed"] == [{"request": "llm", "replica": 0, "gpu": "n1/gpu0", "profile": "3g.40gb",
                                 "start": 4, "kind": "mig"}]
    assert result["disruption"]["gpus_changed"] == []


def test_table(db, write):
    text = run("--requests", write("plan.yaml", SMALL))
    assert text == (
        "GPU      MODEL      LAYOUT\n"
        "n1/gpu0  h100-80gb  MIG 1g.10gb@0 1g.10gb@1 3g.40gb@4\n"
        "n1/gpu1  h100-80gb  whole\n"
        "\n"
        "Served weight 3 of 3: 3 replicas placed, 0 not\n"
        "Optimal: no plan serves more weight (bound 3). (greedy plan; the greedy plan places every replica that "
        "fits some GPU)\n"
        "REQUEST  REPLICA  GPU      KIND  PROFILE\n"
        "chat     0        n1/gpu0  MIG   1g.10gb@0\n"
        "chat     1        n1/gpu0  MIG   1g.10gb@1\n"
        "embed    0        n1/gpu0  MIG   3g.40gb@4\n"
        "\n"
        "Disruption: 3 instances created, 0 destroyed, 0 kept; 1 GPUs change\n"
        "  n1/gpu0: MIG mode on\n"
        "  n1/gpu0: created 1g.10gb@0\n"
        "  n1/gpu0: created 1g.10gb@1\n"
        "  n1/gpu0: created 3g.40gb@4\n")


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.yaml", SMALL.replace("memory_gb: 30", "memory_gb: -4"),
     "bad.yaml:10: requests[1].memory_gb: -4 must be greater than 0"),
    ("bad.yaml", SMALL.replace("isolation: soft", "isolation: strict"),
     "bad.yaml:11: requests[1].isolation: 'strict' is not one of hard, soft, exclusive"),
    ("bad.yaml", SMALL.replace("model: h100-80gb}\nrequests", "model: v100}\nrequests"),
     "bad.yaml:3: gpus[1].model: 'v100' is not a GPU model of the profile table (a100-40gb, a100-80gb, h100-80gb, "
     "h100-nvl, h200, b200)"),
    ("bad.yaml", SMALL.replace("    replicas: 2\n", "    replicas: 2\n    replica: 3\n"),
     "bad.yaml:5: requests[0]: unknown field 'replica' (fields: compute_slices, isolation, memory_gb, name, pool, "
     "replicas, weight)"),
    ("bad.yaml", SMALL.replace("  - name: embed", "  - name: embed\n   oops: [")[:-1],
     "bad.yaml:10: not YAML or JSON"),
    ("bad.yaml", "requests: []\n", "bad.yaml: gpus: missing (or give --appliance to plan its GPUs)"),
    ("bad.yaml", "- a\n", "bad.yaml: a mapping with gpus and requests is needed"),
    ("bad.yaml", SMALL + "extra: 1\n", "bad.yaml:12: extra: unknown key (keys: gpus, requests)"),
    ("bad.json", '{"gpus": [], "requests": [{"name": "x", "memory_gb": 0, "isolation": "hard"}]}',
     "bad.json:1: requests[0].memory_gb: 0 must be greater than 0"),
])
def test_bad_files_name_file_line_and_field(db, write, name, text, message):
    path = write(name, text)
    with pytest.raises(CommandError) as caught:
        run("--requests", path, "--json")
    assert str(caught.value).startswith(path.rsplit("/", 1)[0] + "/" + message)


def test_bad_current_file_names_its_line(db, write):
    plan = write("plan.yaml", SMALL)
    current = write("current.yaml", "- id: n1/gpu0\n  mig:\n    - {profile: 3g.40gb, start: 2}\n")
    with pytest.raises(CommandError) as caught:
        run("--requests", plan, "--current", current)
    assert str(caught.value) == (f"{current}:3: current[0].mig: not a valid layout for h100-80gb: 3g.40gb cannot "
                                 "start at memory slice 2 (allowed: [0, 4])")


def test_missing_file_and_save_without_appliance(db, write, tmp_path):
    with pytest.raises(CommandError) as caught:
        run("--requests", str(tmp_path / "nope.yaml"))
    assert str(caught.value) == f"--requests {tmp_path / 'nope.yaml'}: not a readable file"
    with pytest.raises(CommandError) as caught:
        run("--requests", write("plan.yaml", SMALL), "--save")
    assert str(caught.value) == "--save needs --appliance: a plan is saved for an appliance"


@pytest.fixture
def demo(db, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "KEYS_DIR", tmp_path / "keys")
    ensure_demo_credential()
    import_site(demo_site_text(), str(settings.DEMO_SITE))
    return Appliance.objects.get(name="demo")


def test_appliance_gpus_and_save(demo, write):
    requests = write("requests.yaml", "requests:\n  - {name: chat, memory_gb: 10, replicas: 3, isolation: hard, "
                                      "pool: inference}\n")
    result = json.loads(run("--requests", requests, "--appliance", "demo", "--json"))
    assert [p["gpu"] for p in result["placed"]] == ["gpu04/gpu0"] * 3
    assert len(result["gpus"]) == 32
    assert Plan.objects.count() == 0

    saved = json.loads(run("--requests", requests, "--appliance", "demo", "--save", "--json",
                           "--description", "three chat replicas"))
    plan = Plan.objects.get(appliance=demo, number=saved["plan"])
    assert plan.description == "three chat replicas"
    assert [p["gpu"] for p in plan.result["placed"]] == ["gpu04/gpu0"] * 3
    assert AuditRecord.objects.filter(event="partitioning.plan.create").count() == 1


def test_appliance_refuses_gpus_it_does_not_have(demo, write):
    requests = write("requests.yaml", "gpus:\n  - {id: gpu09/gpu0, model: h100-80gb}\n"
                                      "requests:\n  - {name: chat, memory_gb: 10, isolation: hard}\n")
    with pytest.raises(CommandError) as caught:
        run("--requests", requests, "--appliance", "demo")
    assert str(caught.value) == f"{requests}:2: gpus[0].id: 'gpu09/gpu0' is not a GPU of appliance demo with MIG profiles"
    with pytest.raises(CommandError) as caught:
        run("--requests", requests, "--appliance", "nowhere")
    assert str(caught.value) == "appliance nowhere: no such appliance"
