"""The acceptance report a customer signs off: for each node, every check of the latest acceptance run
that measured it, with expected and measured values, the verdict and where the expectation comes from.

Nodes are measured by different runs when a stage is rerun on some of them, so the report is built per
node: a node's checks all come from the newest report holding that node. Exports (HTML for printing,
JSON for machines) are audited: who took which report, in which form, with which filter.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from django.template.loader import render_to_string
from django.utils import timezone

from appliance import audit
from appliance.inventory.models import Appliance

from .models import AcceptanceCheck

# "<op> <number> <unit>", as acceptance expectations are written (">= 380 Gb/s", "<= 5 %"): the one rule
# by which the portal and the command line give a measured number its unit.
THRESHOLD = re.compile(r"^\s*(?:[<>]=?|==?|!=|≥|≤)?\s*-?[0-9][0-9.]*\s*([^\s0-9].*?)\s*$")


def unit_of(expected) -> str:
    """The unit of a bound written as text; empty when it names none."""
    if not isinstance(expected, str):
        return ""
    found = THRESHOLD.fullmatch(expected)
    return found.group(1) if found else ""

RESULTS = ("passed", "failed")
FORMATS = ("html", "json")


def unchecked_hosts(run) -> list[str]:
    """Hosts of `run` that its acceptance stage did not check (they failed an earlier stage of it): the
    run's acceptance verdict says nothing about them. Empty when the run has no acceptance stage."""
    hosts_of = dict(run.stage_runs.values_list("stage", "hosts"))
    if "acceptance" not in hosts_of:
        return []
    return sorted({host for hosts in hosts_of.values() for host in hosts} - set(hosts_of["acceptance"]))


class ReportRefused(ValueError):
    """A filter or a format the report does not know."""


class ReportNotFound(ReportRefused):
    """The appliance or node named has no report (the API answers 404)."""


@dataclass
class NodeReport:
    host: str
    run_id: int
    measured_at: object
    checks: list[AcceptanceCheck] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def failed_count(self) -> int:
        return sum(1 for check in self.checks if not check.passed)


@dataclass
class Report:
    appliance: Appliance | None
    nodes: list[NodeReport]
    node_filter: str = ""
    result_filter: str = ""
    hosts: list[str] = field(default_factory=list)  # every host with a report, for the filter's choices

    @property
    def checks(self) -> list[AcceptanceCheck]:
        return [check for node in self.nodes for check in node.checks]

    @property
    def total(self) -> int:
        return len(self.checks)

    @property
    def failed(self) -> int:
        return sum(1 for check in self.checks if not check.passed)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and not self.failed

    @property
    def run_ids(self) -> list[int]:
        return sorted({node.run_id for node in self.nodes})


def _appliance(name: str | None) -> Appliance | None:
    appliances = Appliance.objects.order_by("name")
    if name:
        found = appliances.filter(name=name).first()
        if found is None:
            raise ReportNotFound(f"appliance: no appliance named {name!r}")
        return found
    return appliances.first()


def latest_report(appliance_name: str | None = None, node: str = "", result: str = "") -> Report:
    """Every check of the latest acceptance report per node, filtered by node name and result."""
    if result and result not in RESULTS:
        raise ReportRefused(f"result: {result!r} is not one of {', '.join(RESULTS)}")
    appliance = _appliance(appliance_name)
    if appliance is None:
        return Report(None, [], node, result)
    checks = (AcceptanceCheck.objects.filter(report__run__appliance=appliance)
              .select_related("report__run").order_by("-report__run_id", "host", "name"))
    newest: dict[str, NodeReport] = {}
    for check in checks:
        entry = newest.get(check.host)
        if entry is None:
            entry = newest[check.host] = NodeReport(check.host, check.report.run_id, check.report.run.ended
                                                    or check.report.created)
        if check.report.run_id == entry.run_id:
            entry.checks.append(check)
    hosts = sorted(newest)
    if node and node not in newest:
        raise ReportNotFound(f"node: {node!r} has no acceptance report (nodes with one: {', '.join(hosts) or 'none'})")
    nodes = []
    for host in hosts:
        if node and host != node:
            continue
        entry = newest[host]
        if result:
            entry.checks = [c for c in entry.checks if c.passed == (result == "passed")]
        nodes.append(entry)
    return Report(appliance, nodes, node, result, hosts)


def check_dict(check: AcceptanceCheck) -> dict:
    return {"node": check.host, "check": check.name, "expected": check.expected, "measured": check.measured,
            "passed": check.passed, "source": check.source, "message": check.message, "run": check.report.run_id}


def report_dict(report: Report) -> dict:
    return {
        "appliance": report.appliance.name if report.appliance else None,
        "generated": timezone.now().isoformat(),
        "filter": {"node": report.node_filter or None, "result": report.result_filter or None},
        "passed": report.passed, "checks_total": report.total, "checks_failed": report.failed,
        "runs": report.run_ids,
        "nodes": [{"node": n.host, "run": n.run_id, "passed": n.passed,
                   "measured_at": n.measured_at.isoformat() if n.measured_at else None,
                   "checks": [check_dict(c) for c in n.checks]} for n in report.nodes],
    }


def export(report: Report, form: str, style_nonce: str = "") -> tuple[str, str, str]:
    """(content, content type, file name) of the report in `form`, after recording the export.
    The HTML page keeps its style inline (it is a standalone file); served by the appliance, the
    style carries the request's Content-Security-Policy nonce."""
    if form not in FORMATS:
        raise ReportRefused(f"format: {form!r} is not one of {', '.join(FORMATS)}")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    name = f"acceptance-{report.appliance.name if report.appliance else 'none'}-{stamp}.{form}"
    if form == "json":
        content, content_type = json.dumps(report_dict(report), indent=2, default=str), "application/json"
    else:
        content = render_to_string("provisioning/acceptance_export.html",
                                   {"report": report, "generated": timezone.now(), "style_nonce": style_nonce})
        content_type = "text/html; charset=utf-8"
    target = {"target": report.appliance} if report.appliance else {"target_type": "appliance", "target_name": "none"}
    audit.record("provisioning.acceptance.export", **target, details={
        "format": form, "node": report.node_filter or None, "result": report.result_filter or None,
        "runs": report.run_ids, "checks": report.total, "failed": report.failed, "passed": report.passed,
    })
    return content, content_type, name
