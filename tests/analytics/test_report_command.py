"""`manage.py analytics report` (text and --json, a pool, a trace's figures with --source) and `analytics
attribute`: figures from ledger rows written by hand; bad input ends in one error naming the option."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from appliance.analytics.models import AttributionCursor, CauseHour
from tests.analytics.test_efficiency import ledger_rows
from tests.analytics.test_efficiency_api import T0, attributed_job  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command("analytics", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def rows(db):
    ledger_rows()


def test_report_as_json_and_as_text(rows):
    data = json.loads(run("report", "--since", "2026-01-01", "--until", "2026-01-03", "--json"))
    assert (data["total"]["gpu_hours"], data["total"]["by_cause"]["memory-only"]) == (6.1429, 1.0)
    assert [(p["key"], p["gpu_hours"]) for p in data["pools"]] == [("inference", 2.1429), ("training", 4.0)]
    assert [(j["job"], j["idle_hours"]) for j in data["top_jobs"]] == [("4182", 1.1667), ("chat-7b", 1.0)]
    text = run("report", "--since", "2026-01-01", "--until", "2026-01-03", "--pool", "inference")
    assert "Where the GPU-hours went, 2026-01-01T00:00:00+00:00 to 2026-01-03T00:00:00+00:00, pool inference" in text
    assert "  2.1 GPU-hours, 1.1 allocated, 0.1 used (5.2 %), idle 93.3 %" in text
    assert "  Memory only                     1.0 GPU-h   46.7 %" in text
    assert "  bob                             1.1 GPU-h, used   9.8 %, idle  87.5 %" in text


@pytest.mark.parametrize(("args", "message"), [
    (["report", "--since", "last week"], "--since: 'last week' is not a time"),
    (["report", "--pool", "nosuch"], "--pool: no pool is named 'nosuch'"),
    (["report", "--since", "2026-01-03", "--until", "2026-01-01"], "--until: 2026-01-01T00:00:00[+]00:00 is not"),
    (["report", "--source", "nosuch"], "--source: "),
    (["report", "--source", "x", "--pool", "training"], "--source: a trace's report takes no --since"),
    (["attribute", "--max-minutes", "0"], "--max-minutes: 0 is not a positive number of minutes"),
    (["attribute", "--until", "soon"], "--until: 'soon' is not a time"),
])
def test_bad_input_names_the_option(rows, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)


def test_attribute_runs_the_ledger_once_per_minute(attributed_job):  # noqa: F811
    # The fixture attributed its three minutes; nothing is left until then, and a rebuild attributes them again.
    assert run("attribute", "--until", T0.isoformat()) == (
        "Attributed 0 minutes (0 GPU rows, 0.00 GPU-hours); the ledger is complete until 2026-02-01T09:03:00+00:00\n")
    assert run("attribute", "--rebuild-since", "2026-02-01T09:00:00Z", "--until", "2026-02-01T09:03:00Z") == (
        "Attributed 3 minutes (3 GPU rows, 0.05 GPU-hours); the ledger is complete until 2026-02-01T09:03:00+00:00\n")
    assert CauseHour.objects.get(job="4190").gpu_seconds == 180.0
    assert AttributionCursor.objects.get().attributed_until.isoformat() == "2026-02-01T09:03:00+00:00"


def test_report_of_an_imported_trace(db, tmp_path):
    from appliance.traces import services as traces

    trace = tmp_path / "trace.csv"
    trace.write_text("ts,gpu,util\n0,a,0\n60,a,0\n120,a,50\n0,b,100\n60,b,100\n120,b,100\n")
    traces.import_trace(trace, name="tiny", value="util", time="ts", entity="gpu", scale="percent")
    data = json.loads(run("report", "--source", "tiny", "--json"))
    utilization, entities = data["utilization"], data["entities"]
    # Six samples 0, 0, 50, 100, 100, 100; entity a is at 0 % in two of its three.
    assert (utilization["zero_share"], utilization["p50"], utilization["p90"]) == (pytest.approx(1 / 3, abs=1e-4),
                                                                                    75.0, 100.0)
    assert utilization["mean"] == pytest.approx(58.333, abs=1e-3)
    assert (entities["count"], entities["idle_majority_share"]) == (2, 0.5)
    assert "Trace tiny: 2 entities" in run("report", "--source", "tiny")
