"""What the command line prints about a run: its title, a line per stage, the acceptance result.

Plain text, one finding per line, never cut to a width: a check name is read whole in a terminal and
in a pipe alike (`service.nvidia-dcgm` and `service.nvidia-fabricmanager` must stay apart), and a
line can be found with grep. Colour and layout are the caller's (bootstrap uses rich).
"""

from __future__ import annotations

from django.urls import reverse

from .acceptance import unchecked_hosts, unit_of
from .catalogue import active as active_catalogue
from .states import StageState

DEFAULT_PORTAL_ADDRESS = "127.0.0.1:8000"


def portal_address(appliance) -> str:
    """Where the portal the command line points to listens: on a simulated appliance, its state directory's
    demo portal (the port its collectors' ingest URL names too); otherwise runserver's default.
    Raises appliance.simulation.ports.PortError when the demo portal's port cannot be allocated."""
    if not getattr(appliance, "simulated", False):
        return DEFAULT_PORTAL_ADDRESS
    from django.conf import settings

    from appliance.simulation import ports

    return f"127.0.0.1:{ports.portal_port(settings.SIMULATION_DIR)}"


def run_title(run) -> str:
    """What the run does, in words: a bootstrap of some stages is not "every stage"."""
    if run.stages == active_catalogue().names:
        what = f"{run.kind}, every stage"
    else:
        what = f"{run.kind}, stage{'s' if len(run.stages) > 1 else ''} {', '.join(run.stages)}"
    return f"run #{run.pk} ({what}{', check mode' if run.dry_run else ''})"


def stage_line(stage_run, listed_below: bool = False) -> str:
    """One stage's end. `listed_below`: its failures are printed after it (the acceptance checks),
    so its message, which repeats them, is not."""
    mark = {StageState.SUCCEEDED: "ok", StageState.SKIPPED: "skipped", StageState.FAILED: "FAILED",
            StageState.CANCELLED: "cancelled"}.get(stage_run.state, stage_run.state)
    line = f"  {stage_run.stage:<11} {mark}"
    if stage_run.state == StageState.SKIPPED:
        return f"{line} ({stage_run.message})"
    line += (f" · {len(stage_run.hosts)} hosts, {stage_run.ok_count} ok, {stage_run.changed_count} changed, "
             f"{stage_run.failed_count} failed, events {stage_run.events_stored}/{stage_run.events_emitted} stored")
    if stage_run.state == StageState.FAILED:
        line += "\n    the failed checks are listed below" if listed_below else f"\n    {stage_run.message}"
    return line


def measured(value, expected) -> str:
    """The measured value as read; a number gated by "<op> <number> <unit>" carries that unit."""
    if value is None:
        return "nothing"
    unit = unit_of(expected)
    if isinstance(value, int | float) and not isinstance(value, bool) and unit:
        return f"{value} {unit}"
    return str(value)


def check_line(check) -> str:
    expected = "nothing" if check.expected is None else str(check.expected)
    line = (f"  {'pass' if check.passed else 'FAIL'}  {check.host}  {check.name}  expected {expected}, "
            f"measured {measured(check.measured, check.expected)}")
    if not check.passed and check.message:
        line += f"  ({check.message})"
    return line


def acceptance_lines(run, report, all_checks: bool = False) -> list[str]:
    """The verdict, passed and failed counts per node, the failed checks (every check with
    `all_checks`), and where the whole report is."""
    checks = list(report.checks.order_by("host", "name"))
    failed = [check for check in checks if not check.passed]
    unchecked = unchecked_hosts(run)
    verdict = "FAILED" if not report.passed else "INCOMPLETE" if unchecked else "PASSED"
    lines = [f"Acceptance: {verdict} ({len(checks) - len(failed)}/{len(checks)} checks passed"
             + (f"; not checked: {', '.join(unchecked)}, failed an earlier stage of this run)" if unchecked else ")")]
    per_node: dict[str, list[int]] = {}
    for check in checks:
        per_node.setdefault(check.host, [0, 0])[0 if check.passed else 1] += 1
    width = max((len(host) for host in per_node), default=4)
    lines.append(f"  {'node':<{width}}  {'passed':>6}  {'failed':>6}")
    lines += [f"  {host:<{width}}  {passed:>6}  {failing:>6}" for host, (passed, failing) in sorted(per_node.items())]
    shown = checks if all_checks else failed
    if shown:
        lines.append("Checks:" if all_checks else "Failed checks:")
        lines += [check_line(check) for check in shown]
    portal = f"http://{portal_address(run.appliance)}"
    page = f"{portal}{reverse('provisioning:acceptance')}?appliance={run.appliance.name}"
    lines.append(f"Full report: {page} (this run: {portal}{reverse('provisioning:run', args=[run.pk])})"
                 + ("" if all_checks else "; --all prints every check here"))
    return lines
