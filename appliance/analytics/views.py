"""Portal pages of analytics: the Efficiency page (where the GPU-hours went, for the appliance, each pool,
each user and each day), a job's verdicts with their evidence, and the weekly report (printable).

The bars are drawn here as SVG rectangles sized in the markup (no script, no inline style: the
Content-Security-Policy allows neither), with the figures beside them in tables a screen reader reads.
"""

import math
from datetime import UTC, datetime, timedelta

from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.core.templatetags.appliance_format import when
from appliance.inventory.models import Pool
from appliance.telemetry import jobinfo, queries

from . import services
from .models import CauseHour
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


def hours_text(value: float) -> str:
    """GPU-hours with a precision that tells a small pool's from nothing: 0.47, 1.1, 38."""
    return f"{value:.2f}" if value < 1 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


NICE_STEPS = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)


def nice_ceiling(value: float) -> float:
    """The smallest round figure (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten) at or above value."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(round(step * power, 10) for step in NICE_STEPS if step * power >= value * (1 - 1e-9))


def scale(entries: list[dict]) -> dict:
    """The common scale of a table's bars: its end a round figure at or above the largest group's GPU-hours,
    with a tick at its half."""
    end = nice_ceiling(max((entry["gpu_hours"] for entry in entries), default=0.0))
    return {"end": end, "ticks": ["0", hours_text(end / 2), hours_text(end)]}


def bar(entry: dict, scale_end: float | None = None) -> dict:
    """The entry with its stacked bar: one segment per cause, x and width in percent of `scale_end` GPU-hours
    (the table's common scale, so that half the GPU-hours draw half the length; the entry's own total where
    none is given), and the texts the template writes (formatted here once: a page has a few hundred)."""
    hours = entry["gpu_hours"]
    whole = scale_end or hours
    segments, x = [], 0.0
    for label, name in CAUSE_NAMES.items():
        value = entry["by_cause"].get(label, 0.0)
        if hours and value > 0:
            width = 100.0 * value / whole
            segments.append({"label": label, "name": name, "hours": value, "hours_text": hours_text(value),
                             "percent": f"{100.0 * value / hours:.1f}", "x": f"{x:.3f}", "width": f"{width:.3f}"})
            x += width
    parts = ", ".join(f"{s['name']} {s['hours_text']} ({s['percent']} %)" for s in segments) or str(_("no GPU-hours"))
    return entry | {"segments": segments, "used_percent": f"{100 * entry['used_share']:.1f}",
                    "idle_percent": f"{100 * entry['idle_share']:.1f}",
                    "memory_percent": f"{100 * entry['memory_used_share']:.1f}",
                    "gpu_hours_text": hours_text(hours), "name": entry.get("name", entry["key"]),
                    "aria": _("%(hours)s GPU-hours of %(key)s by cause: %(parts)s") % {
                        "hours": hours_text(hours), "key": entry.get("name", entry["key"]), "parts": parts}}


def bars(entries: list[dict]) -> tuple[list[dict], dict]:
    """A table's entries drawn on one scale, and the scale."""
    axis = scale(entries)
    return [bar(entry, axis["end"]) for entry in entries], axis


def holder_names(entries: list[dict]) -> list[dict]:
    """Who held the GPU-hours, named for people: a user by name, an inference pool's services as such, the
    hours nobody held as not allocated, a training job Slurm named no owner for as such."""
    for entry in entries:
        if entry["holder"] == "services":
            entry["name"] = _("services (%(pool)s pool)") % {"pool": entry["pool"]}
        elif entry["holder"] == "unallocated":
            entry["name"] = _("not allocated")
        elif entry["holder"] == "no-user":
            entry["name"] = _("jobs with no known user")
        else:
            entry["name"] = entry["key"]
    return entries


def linked(jobs: list[dict]) -> list[dict]:
    """Each job with its page's address (none for a name the job pages' route refuses) and who ran it: its
    user, or "service" for an inference pool's holder (no Slurm owner)."""
    kinds = dict(Pool.objects.values_list("name", "kind")) if jobs else {}
    for job in jobs:
        job["who"] = job["user"] or (_("service") if kinds.get(job["pool"]) == Pool.Kind.INFERENCE else "—")
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


def hourly(entries: list[dict], now) -> list[dict]:
    """Hour groups named by their start in the portal's zone ("2026-03-05 10:00 UTC"), the hour not over yet
    marked as such."""
    for entry in entries:
        start = datetime.fromisoformat(entry["key"].replace("Z", "+00:00"))
        entry["name"] = when(start, "minutes")
        entry["unfinished"] = start <= now < start + timedelta(hours=1)
    return entries


def first_attributed_hour():
    """The first hour the ledger has, or None on an appliance with no attributed hour yet."""
    return CauseHour.objects.order_by("hour").values_list("hour", flat=True).first()


def default_range(first, until) -> str:
    """The range a page opens on: the shortest that holds every attributed hour, at most DEFAULT_RANGE (a
    ten-minute-old appliance opens on its 24 hours, not on seven days of nothing)."""
    if first is None:
        return "24h"
    for name, (span, _label) in RANGES.items():
        if until - span <= first or name == DEFAULT_RANGE:
            return name
    return DEFAULT_RANGE


def window_shown(since, until, first, now) -> dict:
    """What the page says of its window: from the first attributed hour where the range starts before it,
    to now where the last hour is not over (its figures are those attributed so far)."""
    start = max(since, first) if first is not None else since
    return {"start": start, "end": min(until, now), "before_data": first is not None and first > since,
            "unfinished": now < until}


class EfficiencyView(AnalyticsPage):
    template_name = "analytics/efficiency.html"

    def compute(self):
        params = self.request.GET
        now = timezone.now()
        first = first_attributed_hour()
        until_default = services.window(None, None, now=now)[1]
        self.range = params.get("range", "").strip() or default_range(first, until_default)
        if self.range not in RANGES:
            raise services.AnalyticsError(f"range: {self.range[:16]!r} is not one of {', '.join(RANGES)}")
        pool = params.get("pool", "").strip() or None
        since, until = services.window(None, None, default=RANGES[self.range][0], now=now)
        data = services.overview(since=since, until=until, pool=pool)
        users = sorted(holder_names(data["holders"]), key=lambda u: (-u["gpu_hours"], u["key"]))
        pools, pool_scale = bars(data["pools"])
        user_bars, user_scale = bars(users[:MAX_USERS])
        days, day_scale = bars(data["days"])
        hours, hour_scale = [], None
        if self.range == "24h":  # the day hour by hour: when the GPUs idled, and why
            hours, hour_scale = bars(hourly(services.efficiency(since=max(since, first or since), until=until,
                                                                pool=pool, group="hour")["groups"], now))
        return {"data": data, "total": bar({"key": "appliance"} | data["total"]),
                "hours": hours, "hour_scale": hour_scale,
                "shown": window_shown(since, until, first, now),
                "pools": pools, "pool_scale": pool_scale, "users": user_bars, "user_scale": user_scale,
                "more_users": max(0, len(users) - MAX_USERS), "days": days, "day_scale": day_scale,
                "today": now.astimezone(UTC).date().isoformat(),
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
        users = sorted(holder_names(data["holders"]), key=lambda u: (-u["gpu_hours"], u["key"]))
        pools, pool_scale = bars(data["pools"])
        user_bars, user_scale = bars(users[:MAX_USERS])
        days, day_scale = bars(data["days"])
        return {"data": data, "total": bar({"key": "appliance"} | data["total"]),
                "pools": pools, "pool_scale": pool_scale, "users": user_bars, "user_scale": user_scale,
                "days": days, "day_scale": day_scale, "top_jobs": linked(data["top_jobs"]),
                "accuracy": accuracy_shown(), "pool": data["pool"],
                "since_at": services.parse_time(data["since"], "since"),
                "until_at": services.parse_time(data["until"], "until"),
                "api_url": reverse("analytics-api-report")}
