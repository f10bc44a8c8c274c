"""`manage.py analytics ...`: where the GPU-hours went, from the command line.

  report [--since T] [--until T] [--pool P] [--json]   GPU-hours by cause for the appliance, each pool, user
      and day, and the jobs that left the most idle (default: the last seven whole days, UTC)
  report --source NAME [--json]    the figures of an imported trace (manage.py telemetry import)
  attribute [--until T] [--max-minutes N]   attribute the complete minutes after the cursor now (the periodic
      task does it every minute)
  attribute --rebuild-since T      attribute again from the hour of T on (after late data; audited)
  findings [--refresh [--since T] [--until T]] [--state S] [--kind K] [--json]   the recommendations, the
      largest GPU-hours at stake first (default: the open ones); --refresh runs the detectors first, over the
      last day or [since, until) (the periodic task does it every 15 minutes; a refresh that opens or resolves
      findings is audited)
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from appliance.analytics import services
from appliance.analytics.findings_api import MAX_LIST
from appliance.analytics.findings_api import STATES as FINDING_STATES
from appliance.analytics.models import Finding
from appliance.analytics.views import CAUSE_NAMES


class Command(BaseCommand):
    help = "Where the GPU-hours went: the efficiency report, an imported trace's figures, attribution now."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="action", required=True)
        report = commands.add_parser("report", help="GPU-hours by cause, per pool, user and day; or a trace's figures")
        report.add_argument("--since", help="start, ISO 8601 (a date alone is its midnight UTC)")
        report.add_argument("--until", help="end, excluded, ISO 8601")
        report.add_argument("--pool", help="only this pool's GPUs")
        report.add_argument("--json", action="store_true", help="one JSON document instead of text")
        report.add_argument("--source", metavar="NAME", help="an imported trace's figures instead of the ledger's")
        attribute = commands.add_parser("attribute", help="attribute the complete minutes after the cursor now")
        attribute.add_argument("--until", help="attribute no minute at or after this time (ISO 8601)")
        attribute.add_argument("--max-minutes", type=int, help="at most this many minutes in this run")
        attribute.add_argument("--rebuild-since", metavar="TIME",
                               help="delete the ledger from the hour of TIME on and attribute again (audited)")

        listing = commands.add_parser("findings", help="the recommendations; --refresh runs the detectors first")
        listing.add_argument("--refresh", action="store_true",
                             help="run the detectors over the last day now (the periodic task: every 15 minutes)")
        listing.add_argument("--since", help="with --refresh: the window's start, ISO 8601 (default: a day before --until)")
        listing.add_argument("--until", help="with --refresh: the window's end, excluded, ISO 8601 (default: now)")
        listing.add_argument("--state", choices=FINDING_STATES, default="open", help="which findings (default: open)")
        listing.add_argument("--kind", choices=Finding.Kind.values, help="only this kind")
        listing.add_argument("--json", action="store_true", help="one JSON document instead of text (the API's)")

    def handle(self, *args, **options):
        if options["action"] == "attribute":
            return self.attribute(options)
        if options["action"] == "findings":
            return self.findings(options)
        if options["source"] is not None:
            if options["since"] or options["until"] or options["pool"]:
                raise CommandError("--source: a trace's report takes no --since, --until or --pool")
            return self.source(options["source"], options["json"])
        try:
            data = services.report(since=options["since"], until=options["until"], pool=options["pool"])
        except services.AnalyticsError as exc:
            raise CommandError(f"--{exc}") from None
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2))
            return
        self.text(data)

    def source(self, name: str, as_json: bool):
        from appliance.traces import services as traces

        try:
            data = traces.source_report(name)
        except traces.TraceError as exc:
            raise CommandError(f"--source: {exc}") from None
        if as_json:
            self.stdout.write(json.dumps(data, indent=2, default=str))
            return
        utilization, entities = data["utilization"], data["entities"]
        self.stdout.write(f"Trace {name}: {entities['count']} entities")
        self.stdout.write(f"  utilization mean {utilization['mean']:.1f} %, p50 {utilization['p50']:.1f} %, "
                          f"p90 {utilization['p90']:.1f} %, samples at 0 %: {100 * utilization['zero_share']:.1f} %")
        self.stdout.write(f"  entities idle in more than half of their samples: "
                          f"{100 * entities['idle_majority_share']:.1f} %")

    def text(self, data: dict):
        total = data["total"]
        pool = f", pool {data['pool']}" if data["pool"] else ""
        self.stdout.write(f"Where the GPU-hours went, {data['since']} to {data['until']}{pool}")
        self.stdout.write(f"  {total['gpu_hours']:.1f} GPU-hours, {total['allocated_hours']:.1f} allocated, "
                          f"{total['used_hours']:.1f} used ({100 * total['used_share']:.1f} %), "
                          f"idle {100 * total['idle_share']:.1f} %")
        self.stdout.write(f"  GPU memory held {total['memory_held_gib_hours']:.0f} GiB-hours, used "
                          f"{total['memory_used_gib_hours']:.0f} ({100 * total['memory_used_share']:.1f} %)")
        self.stdout.write("By cause:")
        hours = total["gpu_hours"]
        for label, value in total["by_cause"].items():
            share = 100 * value / hours if hours else 0.0
            self.stdout.write(f"  {str(CAUSE_NAMES[label]):<22} {value:>12.1f} GPU-h {share:>6.1f} %")
        for title, entries in (("By pool", data["pools"]), ("By user", data["users"]), ("Per day", data["days"])):
            self.stdout.write(f"{title}:")
            if not entries:
                self.stdout.write("  (no attributed GPU-hours)")
            for entry in entries:
                self.stdout.write(f"  {entry['key']:<22} {entry['gpu_hours']:>12.1f} GPU-h, used "
                                  f"{100 * entry['used_share']:5.1f} %, idle {100 * entry['idle_share']:5.1f} %")
        self.stdout.write("Jobs that left the most GPU-hours idle:")
        for job in data["top_jobs"]:
            self.stdout.write(f"  {job['job']:<22} {job['user'] or '-':<12} {job['idle_hours']:>10.1f} idle of "
                              f"{job['gpu_hours']:.1f} GPU-h")
        accuracy = data["accuracy"]
        lowest = min(accuracy["held_out"]["by_cause"].items(), key=lambda item: item[1])
        self.stdout.write(f"Attribution accuracy against ground truth (benchmark, {accuracy['source']}): "
                          f"{100 * accuracy['held_out']['matched']:.2f} % of GPU-seconds on held-out telemetry "
                          f"({accuracy['held_out']['data']}; lowest cause {lowest[0]} {100 * lowest[1]:.1f} %), "
                          f"{100 * accuracy['in_sample']['matched']:.2f} % of GPU-hours in-sample "
                          f"({accuracy['in_sample']['data']})")

    def attribute(self, options):
        from appliance.analytics import ledger

        try:
            until = services.parse_time(options["until"], "until")
            if options["rebuild_since"] is not None:
                since = services.parse_time(options["rebuild_since"], "rebuild-since")
                if since is None:
                    raise CommandError("--rebuild-since: give a time (ISO 8601)")
                result = ledger.rebuild(since=since, until=until)
            else:
                if options["max_minutes"] is not None and options["max_minutes"] < 1:
                    raise CommandError(f"--max-minutes: {options['max_minutes']} is not a positive number of minutes")
                result = ledger.run_incremental(until=until, max_minutes=options["max_minutes"])
        except (services.AnalyticsError, ledger.LedgerError) as exc:
            raise CommandError(f"--{exc}") from None
        self.stdout.write(f"Attributed {result['minutes']} minutes ({result['buckets']} GPU rows, "
                          f"{result['seconds'] / 3600:.2f} GPU-hours); the ledger is complete until "
                          f"{result['attributed_until'] or '(nothing yet)'}")

    def findings(self, options):
        from appliance.analytics import findings

        if (options["since"] or options["until"]) and not options["refresh"]:
            raise CommandError("--since/--until: only with --refresh (the window the detectors look at)")
        if options["refresh"]:
            try:
                since = services.parse_time(options["since"], "since")
                until = services.parse_time(options["until"], "until")
                result = findings.refresh(since, until)
            except services.AnalyticsError as exc:
                raise CommandError(f"--{exc}") from None
            except findings.FindingError as exc:
                raise CommandError(f"--since/--until: {exc}") from None
            self.stderr.write(f"Refreshed over {result['since']} to {result['until']}: {result['found']} found, "
                              f"{len(result['opened'])} opened, {result['updated']} updated, "
                              f"{len(result['resolved'])} resolved")
        query = Finding.objects.select_related("node")
        if options["state"] != "all":
            query = query.filter(state=options["state"])
        if options["kind"]:
            query = query.filter(kind=options["kind"])
        listed = [findings.as_dict(finding) for finding in query[:MAX_LIST]]
        if options["json"]:
            self.stdout.write(json.dumps({"state": options["state"], "kind": options["kind"] or "",
                                          "count": query.count(), "findings": listed}, indent=2))
            return
        if not listed:
            kind = f", kind {options['kind']}" if options["kind"] else ""
            self.stdout.write(f"No finding (state {options['state']}{kind}).")
            return
        for finding in listed:
            self.stdout.write(f"#{finding['id']} {finding['kind']} {finding['subject']} ({finding['state']}, "
                              f"{finding['severity_gpu_hours']:.2f} GPU-h at stake)")
            self.stdout.write(f"  {finding['summary']}")
            self.stdout.write(f"  Proposal: {finding['proposal']}")
