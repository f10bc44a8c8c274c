"""Portal pages of analytics: the Efficiency page (where the GPU-hours went, for the appliance, each pool,
each user and each day), a job's verdicts with their evidence, and the weekly report (printable).

The bars are drawn here as SVG rectangles sized in the markup (no script, no inline style: the
Content-Security-Policy allows neither), with the figures beside them in tables a screen reader reads.
"""

from datetime import timedelta

from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils.translation import gettext_lazy as _
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.inventory.models import Pool
from appliance.telemetry import jobinfo, queries

from . import services
from .templatetags.evidence import check_text

RANGES = {"24h": (timedelta(days=1), _("24 hours")), "7d": (timedelta(days=7), _("7 days")),
          "30d": (timedelta(days=30), _("30 days"))}
DEFAULT_RANGE = "7d"
CAUSE_NAMES = {"busy": _("Busy"), "idle-unallocated": _("Idle, not allocated"),
               "allocated-idle": _("Allocated but idle"), "input-bound": _("Input-bound"),
               "communication-bound": _("Communication-bound"), "straggler": _("Straggler"),
               "throttled": _("Throttled"), "memory-only": _("Memory only"), "no-data": _("No data")}
MAX_USERS = 20


def causes() -> list[dict]:
    return [{"label": label, "name": name} for label, name in CAUSE_NAMES.items()]


def bar(entry: dict) -> dict:
    """The entry with its stacked bar: one segment per cause, x and width in percent of the group's GPU-hours,
    and the texts the template writes (formatted here once: a page has a few hundred of them)."""
    hours = entry["gpu_hours"]
    segments, x = [], 0.0
    for label, name in CAUSE_NAMES.items():
        value = entry["by_cause"].get(label, 0.0)
        if hours and value > 0:
            width = 100.0 * value / hours
            segments.append({"label": label, "name": name, "hours": value, "hours_text": f"{value:.1f}",
                             "percent": f"{width:.1f}", "x": f"{x:.3f}", "width": f"{width:.3f}"})
            x += width
    parts = ", ".join(f"{s['name']} {s['percent']} %" for s in segments) or str(_("no GPU-hours"))
    return entry | {"segments": segments, "used_percent": f"{100 * entry['used_share']:.1f}",
                    "idle_percent": f"{100 * entry['idle_share']:.1f}",
                    "memory_percent": f"{100 * entry['memory_used_share']:.1f}",
                    "gpu_hours_text": f"{hours:.1f}",
                    "aria": _("GPU-hours of %(key)s by cause: %(parts)s") % {"key": entry["key"], "parts": parts}}


def linked(jobs: list[dict]) -> list[dict]:
    """Each job with its page's address (none for a name the job pages' route refuses)."""
    for job in jobs:
        try:
            job["url"] = reverse("analytics:job", args=[job["job"]])
        except NoReverseMatch:
            job["url"] = ""
    return jobs



def gpu_names(gpus: list[tuple]) -> str:
    """(node, gpu, instance) as read, a node's consecutive GPUs as a range: "gpu01/0–7, gpu02/3"."""
    parts, run = [], []

    def close():
        if run:
            node, first, last = run[0][0], run[0][1], run[-1][1]
            parts.append(f"{node}/{first}" if first == last else f"{node}/{first}–{last}")
            run.clear()

    for node, gpu, instance in gpus:
        if instance != -1:
            close()
            parts.append(f"{node}/{gpu}/gi{instance}")
        elif run and run[-1][0] == node and run[-1][1] == gpu - 1:
            run.append((node, gpu))
        else:
            close()
            run.append((node, gpu))
    close()
    return ", ".join(parts)


def same_evidence_once(intervals: list[dict]) -> list[dict]:
    """One row for the GPUs of a job whose interval, cause, rule and evidence read the same (eight GPUs
    waiting on one mount show the same figures, as printed), in the order of the first; each with "gpus_text"."""
    rows: dict[tuple, dict] = {}
    for entry in intervals:
        key = (entry["start"], entry["end"], entry["label"], entry["rule"],
               tuple(check_text(check) for check in entry["evidence"]))
        row = rows.setdefault(key, entry | {"gpus": []})
        row["gpus"].append((entry["node"], entry["gpu"], entry.get("instance", -1)))
    for row in rows.values():
        row["gpus_text"] = gpu_names(sorted(row["gpus"], key=lambda g: (str(g[0]), g[1], g[2])))
    return list(rows.values())


def accuracy_shown() -> dict:
    """The attribution's benchmark accuracy as the pages print it, naming the data it was measured on:
    percent with one decimal, the held-out figure of each cause too."""
    figures = services.ATTRIBUTION_ACCURACY
    by_cause = figures["held_out"]["by_cause"]
    return {"source": figures["source"], "held_out_data": figures["held_out"]["data"],
            "held_out": f"{figures['held_out']['matched'] * 100:.1f} %",
            "lowest": f"{min(by_cause.values()) * 100:.1f} %",
            "by_cause": ", ".join(f"{CAUSE_NAMES[label]} {share * 100:.1f} %" for label, share in by_cause.items()),
            "in_sample": f"{figures['in_sample']['matched'] * 100:.1f} %"}

class AnalyticsPage(CapabilityMixin, TemplateView):
    capability = "analytics.view"

    def refuse(self, message: str):
        return render(self.request, "400.html", {"message": message}, status=400)

    def get(self, request, *args, **kwargs):
        try:
            self.figures = self.compute()
        except services.AnalyticsError as exc:
            return self.refuse(str(exc))
        return super().get(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        return super().get_context_data(causes=causes(), **self.figures, **kwargs)


class EfficiencyView(AnalyticsPage):
    template_name = "analytics/efficiency.html"

    def compute(self):
        params = self.request.GET
        self.range = params.get("range", "").strip() or DEFAULT_RANGE
        if self.range not in RANGES:
            raise services.AnalyticsError(f"range: {self.range[:16]!r} is not one of {', '.join(RANGES)}")
        pool = params.get("pool", "").strip() or None
        since, until = services.window(None, None, default=RANGES[self.range][0])
        data = services.overview(since=since, until=until, pool=pool)
        users = sorted(data["users"], key=lambda u: (-u["gpu_hours"], u["key"]))
        return {"data": data, "total": bar({"key": "appliance"} | data["total"]),
                "pools": [bar(p) for p in data["pools"]], "users": [bar(u) for u in users[:MAX_USERS]],
                "more_users": max(0, len(users) - MAX_USERS), "days": [bar(d) for d in data["days"]],
                "top_jobs": linked(services.top_jobs(since=since, until=until, pool=pool)),
                "accuracy": accuracy_shown(), "pool": pool or "",
                "pool_names": sorted(set(Pool.objects.values_list("name", flat=True))),
                "ranges": [{"name": name, "label": label, "current": name == self.range}
                           for name, (_span, label) in RANGES.items()],
                "range": self.range,
                "api_url": f"{reverse('analytics-api-efficiency')}?since={since.isoformat()}&until={until.isoformat()}"}


class JobView(AnalyticsPage):
    template_name = "analytics/job.html"

    def get(self, request, *args, **kwargs):
        job = self.kwargs["job"]
        self.span = services.job_span(job)
        self.seen = queries.job_bounds(job)  # (first minute, last minute, nodes) the telemetry saw, or None
        if self.span is None:
            # A job the telemetry knows is not attributed yet: the page says when it will be. Else a 404
            # that still says why.
            self.figures = {"job_id": job, "known": False, "seen": self.seen is not None,
                            "related": self.related()}
            response = super(AnalyticsPage, self).get(request, *args, **kwargs)
            if self.seen is None:
                response.status_code = 404
            return response
        return super().get(request, *args, **kwargs)

    def related(self) -> dict:
        first, _last, nodes = self.seen or (None, None, [])
        related = jobinfo.about(self.kwargs["job"], nodes, first, self.request.user)
        related["telemetry"] = self.seen is not None
        return related

    def compute(self):
        job = self.kwargs["job"]
        since, until = services.job_window(self.span, self.request.GET.get("since"), self.request.GET.get("until"))
        gpus = services.efficiency(since=self.span[0], until=self.span[1], group="gpu", job=job)
        skew = services.job_skew(since=self.span[0], until=self.span[1], job=job)
        intervals = same_evidence_once(services.job_intervals(job, since, until))
        for entry in intervals:
            entry["cause"] = CAUSE_NAMES.get(entry["label"], entry["label"])
        return {"job_id": job, "known": True, "first": self.span[0], "end": self.span[1], "since": since,
                "until": until, "total": bar({"key": job} | gpus["total"]), "gpus": [bar(g) for g in gpus["groups"]],
                "skew": skew[0] if skew else None, "intervals": intervals, "related": self.related(),
                "api_url": reverse("analytics-api-job-verdicts", args=[job])}


class ReportView(AnalyticsPage):
    template_name = "analytics/report.html"

    def compute(self):
        params = self.request.GET
        data = services.report(since=params.get("since") or None, until=params.get("until") or None,
                               pool=params.get("pool", "").strip() or None)
        users = sorted(data["users"], key=lambda u: (-u["gpu_hours"], u["key"]))
        return {"data": data, "total": bar({"key": "appliance"} | data["total"]),
                "pools": [bar(p) for p in data["pools"]], "users": [bar(u) for u in users[:MAX_USERS]],
                "days": [bar(d) for d in data["days"]], "top_jobs": linked(data["top_jobs"]),
                "accuracy": accuracy_shown(), "pool": data["pool"],
                "since_at": services.parse_time(data["since"], "since"),
                "until_at": services.parse_time(data["until"], "until"),
                "api_url": reverse("analytics-api-report")}
