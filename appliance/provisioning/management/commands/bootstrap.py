"""`manage.py bootstrap`: from factory BIOS to a verified appliance in one command.

With no --site it bootstraps the bundled demo site on the simulated appliance. A rerun after a
failure (or a kill -9) continues from the first unfinished stage of the last bootstrap.
"""

import contextlib
import io
import os
import shlex
import sys
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.core.management.color import no_style
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from appliance.audit.models import AuditRecord
from appliance.core import context, dispatch, host, resources
from appliance.simulation import extra as simulation_extra

from ... import services, terminal
from ...catalogue import UnknownStage
from ...catalogue import active as active_catalogue
from ...models import AcceptanceReport, Run
from ...states import RunState, StageState


class Command(BaseCommand):
    help = ("Bootstrap the appliance: migrate, create the administrator, import the site, start the simulated "
            "BMCs, run every provisioning stage in order, print the acceptance result. Rerunning continues "
            "from the first unfinished stage.")

    def add_arguments(self, parser):
        parser.add_argument("--site", help="site definition (YAML); default: the bundled demo site")
        parser.add_argument("--dry-run", action="store_true", help="check mode: show what would change (diff)")
        parser.add_argument("--from", dest="from_stage", metavar="STAGE", help="start at this stage")
        parser.add_argument("--only", metavar="STAGE[,STAGE]", help="run only these stages")
        parser.add_argument("--force", action="store_true", help="rerun stages an unfinished bootstrap completed")
        parser.add_argument("--no-input", action="store_true", dest="no_input", help="never ask anything")
        parser.add_argument("--all", action="store_true", dest="all_checks",
                            help="print every acceptance check, not only the failed ones and a summary per node")

    def handle(self, *args, site=None, dry_run=False, from_stage=None, only=None, force=False, all_checks=False,
               **options):
        # Django's OutputWrapper ends every write with a newline: rich's live progress needs the stream itself.
        stream = getattr(self.stdout, "_out", self.stdout)
        plain = options.get("no_color") or bool(os.environ.get("NO_COLOR"))
        if plain:  # NO_COLOR (no-color.org) as --no-color, for Django's own error line too
            self.style = no_style()
            self.stderr.style_func = None
        self.console = Console(file=stream, highlight=False, soft_wrap=True,
                               color_system=None if plain else "auto",
                               force_terminal=True if options.get("force_color") and not plain else None)
        self.all_checks = all_checks
        # Everything the operator typed is checked before anything is changed: a wrong stage name or
        # site path must not leave a migrated database, a new administrator or an imported site behind.
        stages = [s.strip() for s in only.split(",") if s.strip()] if only else None
        self._check_stages(stages, from_stage)
        site_path = Path(site).resolve() if site else Path(settings.DEMO_SITE)
        site_text = self._read_site(site_path)
        if site_path.resolve() == Path(settings.DEMO_SITE).resolve():
            # The demo is the simulated appliance: without the extra's packages, say so before any change.
            try:
                simulation_extra.require()
                # ... and the host's programs it runs (Slurm, sshd, sudo, gcc: appliance/core/host.py).
                host.require("simulation", root=True)
            except (simulation_extra.SimulationExtraMissing, host.HostNotReady) as exc:
                raise CommandError(str(exc), returncode=1) from None
        else:
            try:
                host.require("runtime")
            except host.HostNotReady as exc:
                raise CommandError(str(exc), returncode=1) from None
        with context.acting_as(channel="cli"):
            return self._bootstrap(site_path, site_text, dry_run, stages, from_stage, force)

    @staticmethod
    def _check_stages(stages, from_stage):
        catalogue = active_catalogue()
        valid = ", ".join(catalogue.names)
        for option, names in (("--only", stages or []), ("--from", [from_stage] if from_stage else [])):
            for name in names:
                try:
                    catalogue.get(name)
                except UnknownStage:
                    raise CommandError(f"{option}: unknown stage {name!r} (stages: {valid})", returncode=2) from None
        if not catalogue.select(only=stages, start=from_stage):
            raise CommandError(f"--only {','.join(stages)} --from {from_stage}: no stage left to run "
                               f"(stages in order: {valid})", returncode=2)

    @staticmethod
    def _read_site(path: Path) -> str:
        try:
            return path.read_text()
        except OSError as exc:
            raise CommandError(f"--site {path}: {exc.strerror}", returncode=2) from None
        except UnicodeDecodeError as exc:
            raise CommandError(f"--site {path}: not UTF-8 text (byte {exc.start})", returncode=2) from None

    # ----------------------------------------------------------------------------------------------
    def _bootstrap(self, site_path, site_text, dry_run, stages, from_stage, force):
        say = self.console.print
        call_command("migrate", interactive=False, verbosity=0)
        say("[bold]Database[/bold] ready.")
        # With no broker, the audit checkpoint clock runs in this process while it does: its records are
        # signed within AUDIT_CHECKPOINT_EVERY_SECONDS, as the portal's process does (core.dispatch).
        # Only the clock: the bootstrap runs the watchdog itself, before its run.
        dispatch.start_embedded_beat(only=("audit-checkpoint-clock",))
        # Installing collects the portal's styles and scripts into STATIC_ROOT, where a production
        # server (DEBUG off, APPLIANCE_ENV=production) serves them from (whitenoise).
        call_command("collectstatic", interactive=False, verbosity=0)
        self._administrator()

        if site_path.resolve() == Path(settings.DEMO_SITE).resolve():
            from appliance.simulation import services as simulation

            try:
                # The demo's BMC emulators listen on this state directory's own ports: the site is
                # imported with them, and the credential bound to them (the Administrator's first run).
                site_text = simulation.demo_site_text(refresh=True)
                simulation.ensure_demo_credential()
            except simulation.SimulationError as exc:
                raise CommandError(str(exc), returncode=1) from None
        appliance = self._import_site(site_path, site_text)

        stopped = services.watchdog()
        for run in stopped:
            say(f"{terminal.run_title(run)} was left running by a worker that died; marked failed ({run.message}).",
                style="yellow", markup=False)
        try:
            run = services.create_run(appliance, kind=Run.Kind.BOOTSTRAP, stages=stages, from_stage=from_stage,
                                      dry_run=dry_run, force=force)
        except services.RunRefused as exc:
            raise CommandError("the bootstrap cannot start:\n" + "\n".join(exc.errors), returncode=1) from None
        carried = list(run.stage_runs.filter(state=StageState.SKIPPED, carried_from__isnull=False))
        if carried:
            say(f"Resuming {terminal.run_title(run.resumes)}: already completed: {', '.join(s.stage for s in carried)} "
                "(--force reruns them).", markup=False)
        say(f"[bold]{terminal.run_title(run)}[/bold]: stages {', '.join(run.stages)} on appliance {appliance.name}.")
        run = self._execute(run, dry_run)
        self._report(run)
        if run.state != RunState.SUCCEEDED:
            raise CommandError(f"{terminal.run_title(run)} {run.state}: {run.message}", returncode=1)
        self._how_to_open(appliance, run)

    def _administrator(self):
        output = io.StringIO()
        try:
            call_command("create_admin", stdout=output)
        except CommandError as exc:
            raise CommandError(f"administrator: {exc}", returncode=1) from None
        self.console.print(output.getvalue().strip(), markup=False)
        kept = settings.KEYS_DIR / "admin-password"
        if kept.exists():
            self.console.print(f"Log in as the administrator with the password kept in {kept}.", markup=False)

    def _import_site(self, path: Path, text: str):
        from appliance.inventory.services import import_site
        from appliance.inventory.sitedef import SiteValidationError

        display = str(path.relative_to(settings.BASE_DIR)) if path.is_relative_to(settings.BASE_DIR) else str(path)
        try:
            result = import_site(text, display)
        except SiteValidationError as exc:
            raise CommandError(f"site definition is not valid:\n{exc}", returncode=1) from None
        counts = result.counts()
        self.console.print(f"[bold]Site[/bold] {escape(display)} imported into appliance {result.appliance.name} "
                           f"({counts['create']} created, {counts['update']} updated, {counts['delete']} removed).")
        return result.appliance

    def _execute(self, run, dry_run):
        stage_total = len(run.stages)
        columns = [SpinnerColumn(), TextColumn("[bold]{task.fields[stage]:<11}"), BarColumn(bar_width=24),
                   MofNCompleteColumn(), TextColumn("{task.fields[detail]}", markup=False), TimeElapsedColumn()]
        diffs: list[str] = []
        with Progress(*columns, console=self.console, transient=False, refresh_per_second=8) as progress:
            bar = progress.add_task("bootstrap", total=stage_total, stage="", detail="starting")

            def on_progress(what, **data):
                stage_run = data.get("stage_run")
                if what == "stage":
                    progress.update(bar, stage=stage_run.stage, detail=f"{len(data['hosts'])} hosts")
                elif what == "event":
                    if data["host"] and data["task"]:
                        progress.update(bar, detail=f"{data['host']}: {data['task']}"[:90])
                    if dry_run and _has_diff(data["event"]):
                        diffs.append(data["event"].get("stdout") or "")
                elif what == "stage_end":
                    progress.advance(bar)
                    reported = AcceptanceReport.objects.filter(run=stage_run.run_id).exists()
                    progress.console.print(terminal.stage_line(stage_run, listed_below=reported), markup=False)
                elif what == "notice":
                    progress.console.print(data["message"], markup=False)

            run = services.execute_run(run.pk, progress=on_progress, catalogue=active_catalogue())
            progress.update(bar, detail=run.state)
        if dry_run:
            self.console.print("[bold]Would change (check mode, diff):[/bold]" if diffs else "Nothing would change.")
            for text in diffs:
                self.console.print(text.rstrip(), markup=False)
        return run

    def _report(self, run):
        say = self.console.print
        say(f"{terminal.run_title(run)}: {run.state} · {run.ok_count} ok, {run.changed_count} changed, {run.failed_count} failed, "
            f"{run.unreachable_count} unreachable", markup=False)
        report = AcceptanceReport.objects.filter(run=run).first()
        if report is not None:
            self._acceptance(run, report)
        if run.state != RunState.SUCCEEDED and run.failed_stage:
            say(f"Failed: stage {run.failed_stage}, host {run.failed_host or '-'}, task {run.failed_task or '-'}",
                markup=False)

    def _acceptance(self, run, report):
        lines = terminal.acceptance_lines(run, report, all_checks=self.all_checks)
        self.console.print(f"[bold]{lines[0]}[/bold]")
        for line in lines[1:]:
            self.console.print(line, markup=False)

    def _how_to_open(self, appliance, run):
        say = self.console.print
        # Paths and addresses go into rich markup: a '[' in a state directory's name is text, not a style.
        command = escape(_own_command())
        state = escape(f"APPLIANCE_STATE_DIR={shlex.quote(str(settings.STATE_DIR))}")
        if not appliance.simulated:
            say(f"The portal of a production controller runs as its services (`{command} install --production`); "
                f"to look at it from this checkout: [bold]{state} {command} runserver[/bold].")
            return
        if run.dry_run or active_catalogue().names[-1] not in run.stages:
            return  # a stage rerun or check mode: the portal stays as it was (`simulation start` starts it)
        from appliance.simulation import portal_server
        from appliance.simulation import services as simulation

        try:
            pid = simulation.start_portal()
        except simulation.SimulationError as exc:
            raise CommandError(f"the demo portal did not start: {exc}", returncode=1) from None
        address = escape(portal_server.url())
        say(f"[bold]The demo appliance is running[/bold]: its portal, worker and beat (pid {pid}) at {address}/, "
            "where its nodes' collectors send their telemetry.")
        story = (AuditRecord.objects.filter(event="simulation.demo.story", timestamp__gte=run.created)
                 .order_by("-pk").first())  # told by this run (a rerun tells nothing new)
        for line in (story.details.get("lines") or []) if story else []:
            say(f"The demo's story: {line}", markup=False)
        say(f"Log in at [bold]{address}/[/bold] as admin (the password above); the REST API is {address}/api/v1/, "
            f"the documentation {address}/docs/.")
        say(f"Commands from another shell name this appliance's state: [bold]{state} {command} simulation "
            f"status[/bold] (and `simulation stop` stops it).")


def _own_command() -> str:
    """How to run this appliance's commands again: an installed wheel's `appliance`, or this checkout's
    manage.py with the interpreter that runs it (on a clean machine `python` is not the venv's)."""
    if resources.INSTALLED:
        return "appliance"
    interpreter = Path(sys.executable)
    with contextlib.suppress(ValueError):
        interpreter = interpreter.relative_to(Path.cwd())
    manage = Path(settings.BASE_DIR) / "manage.py"
    with contextlib.suppress(ValueError):
        manage = manage.relative_to(Path.cwd())
    return f"{shlex.quote(str(interpreter))} {shlex.quote(str(manage))}"


def _has_diff(event: dict) -> bool:
    result = (event.get("event_data") or {}).get("res") or {}
    return bool(isinstance(result, dict) and result.get("diff") and event.get("stdout"))
