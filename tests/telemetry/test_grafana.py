"""The Grafana dashboards shipped in the package (appliance/telemetry/grafana/): valid dashboards that pick
their data source through a variable (no data source uid of the author's Grafana), and every metric, field,
label and tag they query is one a collector really emits: the names are taken from a real sweep of a
simulated H100 node (GPU 6 in MIG mode), as /metrics serves it and as the InfluxDB sink writes it."""

import json
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from appliance.simulation import gpu_ops, nvml
from appliance.simulation import state as node_state
from appliance.telemetry.collector import Collector
from appliance.telemetry.exposition import render
from appliance.telemetry.sinks import InfluxSink, LineFormatter
from tests.telemetry.simnode import make_node
from tests.telemetry.vmserver import VictoriaMetrics

GRAFANA = Path(__file__).resolve().parents[2] / "appliance" / "telemetry" / "grafana"
PANEL_TYPES = {"row", "timeseries", "heatmap", "state-timeline", "stat", "bargauge", "table"}
SECOND = 10**9
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "offset", "inf", "nan"}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    sysroot = tmp_path_factory.mktemp("grafana") / "gpu01"
    make_node(sysroot)
    with node_state.update(sysroot) as current:
        gpu_ops.set_mig_mode(current, 6, True)
        instance = gpu_ops.create_gpu_instance(current, 6, gpu_ops.profile(current["gpus"][6], name="3g.40gb")["id"])
        gpu_ops.create_compute_instance(current, 6, instance)
        # the job has written a checkpoint (Lustre's stats list a counter once it is not zero)
        current["filesystem_io"]["/mnt/scratch"].update(write_ops=64, write_bytes=2**30)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("APPLIANCE_SIM_SYSROOT", str(sysroot))
        yield {"sysroot": sysroot, "library": str(nvml.library_path())}


def sweeps(node, count: int) -> list:
    """`count` real sweeps of the node, its host CPU moving on between them (30% busy, 30% iowait)."""
    out = []
    with Collector("gpu01", node["sysroot"], node["library"]) as collector:
        for _ in range(count):
            out.append(collector.sweep())
            with node_state.update(node["sysroot"]) as current:
                current["host"]["cpu_ticks"] = {name: value + {"user": 30, "iowait": 30, "idle": 40}.get(name, 0)
                                                for name, value in current["host"]["cpu_ticks"].items()}
    return out


@pytest.fixture(scope="module")
def emitted(node):
    """What one node's collector emits: {"prometheus": {metric: label names}, "influx": {measurement:
    {"fields", "tags"}}}, from real sweeps (the second has the CPU ratios)."""
    sweep = sweeps(node, 2)[-1]
    prometheus: dict[str, set[str]] = {}
    for line in render(sweep).splitlines():
        if line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            labels = set(re.findall(r'(\w+)="', rest.rsplit("}", 1)[0])) if rest else set()
            prometheus.setdefault(name.split(" ")[0], set()).update(labels)
    # a label a series has without a value this time (a GPU without a job: no hpc_job) is still queried
    measurement_labels: dict[str, set[str]] = {}
    for series in sweep.series:
        measurement_labels.setdefault(series.measurement, set()).update(name for name, _ in series.labels)
    for series in sweep.series:
        for field in series.fields:
            name = field.partition(":")[0]
            prometheus[name] |= measurement_labels[series.measurement] | ({"mode"} if ":" in field else set())
    influx: dict[str, dict[str, set[str]]] = {}
    body, _ = LineFormatter().format(sweep)
    for line in body.splitlines():
        key, fields, _ = re.split(r"(?<!\\) ", line)
        measurement, *tags = re.split(r"(?<!\\),", key)
        entry = influx.setdefault(measurement, {"fields": set(), "tags": set()})
        entry["tags"].update(tag.split("=", 1)[0] for tag in tags)
        entry["fields"].update(item.rsplit("=", 1)[0] for item in re.split(r"(?<!\\),", fields))
    for measurement, labels in measurement_labels.items():
        influx[measurement]["tags"] |= labels
    return {"prometheus": prometheus, "influx": influx,
            "measurement_of": {field.partition(":")[0]: series.measurement
                               for series in sweep.series for field in series.fields}}


def load(name: str) -> dict:
    return json.loads((GRAFANA / name).read_text())


def walk(value):
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


def check_dashboard(dashboard: dict, kind: str) -> list[dict]:
    """The checks Grafana's import makes and a few of ours; returns the panels that query."""
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and dashboard["title"] and dashboard["time"]["from"].startswith("now-")
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == kind
    assert {"node", "gpu", "hpc_job"} <= set(variables)
    expected = {"type": kind, "uid": "${datasource}"}
    for holder in walk(dashboard):  # no uid of the author's data sources anywhere (the annotation is Grafana's own)
        source = holder.get("datasource")
        if isinstance(source, dict) and source.get("uid") != "-- Grafana --":
            assert source == expected, holder.get("title") or holder.get("name") or holder
    querying = []
    for panel in panels:
        assert panel["type"] in PANEL_TYPES, panel["title"]
        position = panel["gridPos"]
        assert 0 < position["w"] <= 24 and position["x"] + position["w"] <= 24 and position["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == expected and panel["targets"], panel["title"]
        assert len({target["refId"] for target in panel["targets"]}) == len(panel["targets"])
        querying.append(panel)
    return querying


def promql_names(expr: str) -> tuple[set[str], list[tuple[str, set[str]]]]:
    """(the functions' and aggregations' names, [(metric, the labels its matchers and groupings name)])."""
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors ([$__rate_interval])
    used = []
    groupings = set()
    for match in re.finditer(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        groupings |= {label.strip() for label in match.group(1).split(",") if label.strip()}
    expr = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    functions = set(re.findall(r"\b([a-z_]+)\s*\(", expr))
    for match in re.finditer(r"\b([A-Za-z_:][\w:]*)\s*(\{([^}]*)\})?", expr):
        name = match.group(1)
        if name in functions or name.lower() in PROMQL_WORDS or re.fullmatch(r"\d+", name):
            continue
        if expr[match.end():].lstrip().startswith("(") and not match.group(2):
            continue
        labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", re.sub(r'"[^"]*"', '""', match.group(3) or "")))
        used.append((name, labels | groupings))
    return functions, used


def test_the_prometheus_dashboard_queries_only_what_the_collectors_serve_on_metrics(emitted):
    dashboard = load("appliance-prometheus.json")
    panels = check_dashboard(dashboard, "prometheus")
    queried = []
    for panel in panels:
        for target in panel["targets"]:
            _, used = promql_names(target["expr"])
            assert used, (panel["title"], target["expr"])
            queried += [(panel["title"], name, labels) for name, labels in used]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            [(expr, label)] = re.findall(r"^label_values\((.*),\s*(\w+)\)$", variable["query"]["query"])
            _, used = promql_names(expr)
            queried += [(variable["name"], name, labels | {label}) for name, labels in used]
    for where, name, labels in queried:
        assert name in emitted["prometheus"], (where, name)
        assert labels <= emitted["prometheus"][name], (where, name, labels - emitted["prometheus"][name])
    # every kind of thing a node measures has a panel: GPUs, InfiniBand, filesystems, disks, the host
    assert {emitted["measurement_of"][name] for _, name, _ in queried} == set(emitted["influx"])
    jobs = [panel for panel in panels if any('hpc_job=~"$hpc_job"' in target["expr"] for target in panel["targets"])]
    assert len(jobs) >= 3
    [heatmap] = [panel for panel in panels if panel["type"] == "heatmap"]
    assert heatmap["targets"][0]["legendFormat"] == "{{Hostname}}/{{gpu}}"


def influxql_uses(query: str) -> tuple[str, set[str], set[str]]:
    """(measurement, fields selected, identifiers in WHERE and GROUP BY) of an InfluxQL query."""
    show = re.fullmatch(r'SHOW TAG VALUES FROM "(\w+)" WITH KEY = "(\w+)"(?: WHERE (.*))?', query)
    if show:
        return show.group(1), set(), {show.group(2)} | set(re.findall(r'"(\w+)"', show.group(3) or ""))
    select = re.fullmatch(r'SELECT (.*) FROM "(\w+)" WHERE (.*)', query)
    assert select, query
    return select.group(2), set(re.findall(r'"([\w:]+)"', select.group(1))), set(re.findall(r'"(\w+)"', select.group(3)))


def test_the_influxdb_dashboard_queries_only_what_the_influxdb_sink_writes(emitted):
    dashboard = load("appliance-influxdb.json")
    panels = check_dashboard(dashboard, "influxdb")
    queried = []
    for panel in panels:
        for target in panel["targets"]:
            assert target["rawQuery"] is True and "$timeFilter" in target["query"], panel["title"]
            queried.append((panel["title"], *influxql_uses(target["query"])))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queried.append((variable["name"], *influxql_uses(variable["query"])))
    for where, measurement, fields, identifiers in queried:
        assert measurement in emitted["influx"], (where, measurement)
        written = emitted["influx"][measurement]
        assert fields <= written["fields"], (where, fields - written["fields"])
        assert identifiers <= written["tags"] | written["fields"], (where, identifiers - written["tags"] - written["fields"])
    assert {measurement for _, measurement, fields, _ in queried if fields} == set(emitted["influx"])
    jobs = [panel for panel in panels if any('"hpc_job" =~ /^$hpc_job$/' in target["query"] for target in panel["targets"])]
    assert len(jobs) >= 3


def test_a_query_naming_something_no_collector_emits_is_caught(emitted):
    """The checks above would catch a misspelt name (DCGM's FB_USED is not FB_USAGE)."""
    _, used = promql_names('avg by (hpc_job) (DCGM_FI_DEV_FB_USAGE{Hostname=~"$node", job_id!=""})')
    assert used == [("DCGM_FI_DEV_FB_USAGE", {"Hostname", "job_id", "hpc_job"})]
    assert "DCGM_FI_DEV_FB_USAGE" not in emitted["prometheus"]
    measurement, fields, identifiers = influxql_uses(
        'SELECT mean("DCGM_FI_DEV_FB_USED") FROM "gpu" WHERE "node" =~ /^$node$/ AND $timeFilter GROUP BY "gpu"')
    assert (measurement, fields, identifiers) == ("gpu", {"DCGM_FI_DEV_FB_USED"}, {"node", "gpu"})
    assert "node" not in emitted["influx"]["gpu"]["tags"]


@pytest.mark.slow
def test_every_prometheus_panel_finds_data_in_victoria_metrics_fed_by_the_influxdb_sink(node, tmp_path):
    """VictoriaMetrics parses each query (its MetricsQL is a superset of PromQL) and answers it with series
    from three minutes of the node's sweeps, written by the sink."""
    server = VictoriaMetrics(tmp_path / "vm").start()
    try:
        formatter, sink = LineFormatter(), InfluxSink(server.url)
        now = time.time_ns() // SECOND * SECOND
        for index, sweep in enumerate(sweeps(node, 4)):
            sweep.time_ns = now - (3 - index) * 60 * SECOND
            sink.write(formatter.format(sweep)[0])
        sink.close()
        urllib.request.urlopen(server.url + "/internal/force_flush", timeout=30).read()
        values = {"$node": ".*", "$gpu": ".*", "$hpc_job": ".+", "$__rate_interval": "5m"}
        empty = []
        for panel in check_dashboard(load("appliance-prometheus.json"), "prometheus"):
            for target in panel["targets"]:
                expr = target["expr"]
                for variable, value in values.items():
                    expr = expr.replace(variable, value)
                query = urllib.parse.urlencode({"query": expr, "time": str(now // SECOND)})
                with urllib.request.urlopen(f"{server.url}/api/v1/query?{query}", timeout=30) as answer:
                    result = json.loads(answer.read())
                assert result["status"] == "success", (panel["title"], expr, result)
                if not result["data"]["result"]:
                    empty.append((panel["title"], expr))
    finally:
        server.stop()
    assert empty == []
