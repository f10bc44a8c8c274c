"""`manage.py telemetry ...`: the appliance's telemetry from the command line.

  collect --node X [--once | --interval S] [--metrics-port P]   run the collector of a simulated node in this
      process. A real node runs the same collector itself (python -m appliance.telemetry.agent), deployed by
      the monitoring stage. Points go to the site's InfluxDB (settings.INFLUXDB) through the node's disk
      buffer in STATE_DIR/telemetry/<node>/buffer.sqlite.
  status [--json]     every node's collector: state, last write, lag, buffer depth, drops, sink error, open alerts
  fold                fold the complete hours of per-minute rollups into per-hour rows now (the periodic task
                      does it every 5 minutes)
  prune               delete rollups and events past settings.TELEMETRY_RETENTION now (audited)
  revoke --node N     revoke a node's ingest token: its collector can no longer write (audited)
  import FILE --name NAME --value COL --time COL --entity COL [--memory COL] [--job COL] [--format csv|parquet]
      [--scale fraction|percent] [--replace]
                      import a utilization trace from another system (CSV or Parquet, either one gzipped, or
                      a .tar.gz holding one CSV) as trace NAME, in one transaction (audited);
                      `manage.py analytics report --source NAME` reports on it. README "Traces from elsewhere".
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from appliance.core import resources
from appliance.telemetry.agent import Agent
from appliance.telemetry.buffer import Buffer
from appliance.telemetry.collector import Collector, CollectorError
from appliance.telemetry.sinks import InfluxSink


def buffer_path(node_name: str) -> Path:
    return Path(settings.STATE_DIR) / "telemetry" / node_name / "buffer.sqlite"


class Command(BaseCommand):
    help = "The appliance's telemetry: run a simulated node's collector, show the collectors' state, fold, prune, revoke."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="action", required=True)
        collect = commands.add_parser("collect", help="run the collector of a simulated node")
        collect.add_argument("--node", required=True)
        when = collect.add_mutually_exclusive_group()
        when.add_argument("--once", action="store_true", help="one sweep, sent, then exit")
        when.add_argument("--interval", type=float, default=1.0, help="seconds between sweeps (default 1)")
        collect.add_argument("--metrics-port", type=int, default=None, help="serve /metrics on this port")
        collect.add_argument("--buffer-max-mib", type=int, default=256)
        status = commands.add_parser("status", help="every node's collector: state, lag, buffer depth, last point, alerts")
        status.add_argument("--json", action="store_true", help="one JSON document instead of a table")
        commands.add_parser("fold", help="fold complete hours of per-minute rollups into per-hour rows now")
        commands.add_parser("prune", help="delete rollups and events past the retention now")
        revoke = commands.add_parser("revoke", help="revoke a node's ingest token")
        revoke.add_argument("--node", required=True)
        trace = commands.add_parser("import", help="import a utilization trace from another system (CSV or Parquet)")
        trace.add_argument("file", metavar="FILE", help="CSV or Parquet; a .gz of one, or a .tar.gz holding one CSV")
        trace.add_argument("--name", required=True, help="the trace's name (letters, digits, '.', '_', '-')")
        trace.add_argument("--value", required=True, metavar="COL", help="utilization column (fraction 0-1 or percent)")
        trace.add_argument("--time", required=True, metavar="COL",
                           help="time column: ISO 8601, epoch seconds, or seconds from the trace's start")
        trace.add_argument("--entity", required=True, metavar="COL", help="GPU or container id column")
        trace.add_argument("--memory", metavar="COL", help="memory column (kept in the trace's unit)")
        trace.add_argument("--job", metavar="COL", help="job id column")
        trace.add_argument("--format", choices=["csv", "parquet"], help="default: from the file's content")
        trace.add_argument("--scale", choices=["fraction", "percent"],
                           help="how to read --value when its data cannot tell (only 0 and 1)")
        trace.add_argument("--replace", action="store_true", help="replace the trace of that name (audited)")

    def handle(self, *args, **options):
        action = options["action"]
        if action == "status":
            return self.status(options["json"])
        if action == "fold":
            return self.fold()
        if action == "prune":
            return self.prune()
        if action == "revoke":
            return self.revoke(options["node"])
        if action == "import":
            return self.import_trace(options)
        return self.collect(options)

    def status(self, as_json: bool):
        from appliance.telemetry import services

        entries = services.collector_status()
        if as_json:
            self.stdout.write(json.dumps({"collectors": entries, "open_alerts": sum(e["open_alerts"] for e in entries),
                                          "thresholds": {"ok_lag_s": services.OK_LAG_S,
                                                         "silent_after_s": services.SILENT_AFTER_S}},
                                         default=_json_default, indent=2))
            return
        if not entries:
            self.stdout.write("No nodes in the inventory.")
            return
        header = ("NODE", "STATE", "LAST WRITE", "LAG", "BUFFER ROWS", "BUFFER POINTS", "DROPPED", "ALERTS", "SINK ERROR")
        rows = [header] + [(e["node"], e["state"], _age(e["silent_s"]) + " ago" if e["last_seen"] else "never",
                            _age(e["lag_s"]), _number(e["buffer_rows"]), _number(e["buffer_points"]),
                            _number(e["dropped_points"]), str(e["open_alerts"]), (e["sink_error"] or "")[:60])
                           for e in entries]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        states = {}
        for e in entries:
            states[e["state"]] = states.get(e["state"], 0) + 1
        self.stdout.write("\n" + ", ".join(f"{count} {state}" for state, count in sorted(states.items()))
                          + f"; ok: newest bucket at most {services.OK_LAG_S} s old, silent: no write for "
                            f"{services.SILENT_AFTER_S} s")

    def fold(self):
        from appliance.telemetry import services

        hours = services.fold()
        if not hours:
            self.stdout.write("Nothing to fold: every complete hour is folded.")
            return
        self.stdout.write(f"Folded {len(hours)} hour(s): {hours[0]:%Y-%m-%d %H:%M} to {hours[-1]:%Y-%m-%d %H:%M} UTC.")

    def prune(self):
        from django.conf import settings

        from appliance.telemetry import services

        counts = services.prune()
        retention = settings.TELEMETRY_RETENTION
        self.stdout.write(f"Pruned {counts['minute_gpu_rows'] + counts['minute_node_rows']} per-minute row(s) "
                          f"(older than {retention['minute_days']} days), "
                          f"{counts['hour_gpu_rows'] + counts['hour_node_rows']} per-hour row(s) and "
                          f"{counts['events']} event(s) (older than {retention['hour_days']} days).")

    def revoke(self, name: str):
        from appliance.inventory.models import Node
        from appliance.telemetry import tokens

        if not NODE_NAME.fullmatch(name):
            raise CommandError(f"--node {name[:80]!r}: expected a node name (letters, digits, '-' and '.', "
                               "at most 63 characters)")
        node = Node.objects.filter(name=name).first()
        if node is None:
            raise CommandError(f"--node {name}: no such node")
        if not tokens.revoke(node):
            raise CommandError(f"--node {name}: it has no ingest token (its collector was never registered, "
                               "or the token was revoked already)")
        self.stdout.write(f"Revoked the ingest token of {name}: its collector can no longer write. "
                          "The next monitoring stage issues a new one.")

    def import_trace(self, options):
        from appliance.traces import services

        try:
            trace = services.import_trace(options["file"], name=options["name"], value=options["value"],
                                          time=options["time"], entity=options["entity"], memory=options["memory"],
                                          job=options["job"], format=options["format"], scale=options["scale"],
                                          replace=options["replace"])
        except services.TraceError as exc:
            raise CommandError(str(exc)) from None
        from django.utils.translation import gettext as _

        seconds = trace.import_seconds
        if trace.started_at:
            span = _("from %(start)s UTC") % {"start": f"{trace.started_at:%Y-%m-%d %H:%M:%S}"}
        else:
            span = _("relative, from %(start)s s") % {"start": f"{trace.start_s:g}"}
        self.stdout.write(_("Imported trace %(name)s: %(rows)s row(s) of %(entities)s entities (%(format)s; values "
                            "read as %(scale)s; time %(span)s, %(duration)s s long) in %(seconds)s s (%(rate)s "
                            "rows/s). Report: %(program)s analytics report --source %(name)s --json")
                          % {"program": resources.program(), "name": trace.name, "rows": trace.rows, "entities": trace.entities,
                             "format": trace.format + (", " + trace.compression if trace.compression else ""),
                             "scale": trace.scale, "span": span, "duration": f"{trace.duration_s:g}",
                             "seconds": f"{seconds:.2f}", "rate": f"{trace.rows / max(seconds, 1e-9):,.0f}"})

    def collect(self, options):
        from appliance.inventory.models import Node
        from appliance.simulation import nvml

        name = options["node"]
        node = Node.objects.filter(name=name).first()
        if node is None:
            raise CommandError(f"--node {name}: no such node")
        if not node.sysroot:
            raise CommandError(f"--node {name}: a real node runs its collector itself "
                               "(python -m appliance.telemetry.agent, deployed by the monitoring stage)")
        if options["interval"] <= 0:
            raise CommandError(f"--interval {options['interval']}: must be more than 0 seconds")
        os.environ["APPLIANCE_SIM_SYSROOT"] = node.sysroot
        influx = settings.INFLUXDB
        sink = InfluxSink(influx["url"], influx["token"], influx["org"], influx["bucket"]) if influx["url"] else None
        agent = Agent(Collector(node.name, node.sysroot, str(nvml.library_path())),
                      Buffer(buffer_path(node.name), options["buffer_max_mib"] * 2**20), sink, options["metrics_port"])
        try:
            agent.start()
        except CollectorError as exc:
            raise CommandError(str(exc)) from None
        signal.signal(signal.SIGTERM, lambda *_: agent.stopping.set())
        try:
            agent.run(options["interval"], 1 if options["once"] else None)
        except KeyboardInterrupt:
            pass
        finally:
            agent.stop()
        depth = agent.buffer_depth_at_stop
        self.stdout.write(f"{node.name}: {agent.sweeps} sweep(s), last at {agent.last_sweep_ns}, "
                          f"buffered {depth['points']} point(s) in {depth['rows']} row(s)"
                          + (f", sink {sink.url}" if sink else ", no sink configured (settings.INFLUXDB)"))


NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$")


def _json_default(value):
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _age(seconds) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def _number(value) -> str:
    return "-" if value is None else str(value)
