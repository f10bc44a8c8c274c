"""The frame's global search: one box that finds nodes, GPUs (UUID or PCI address), runs (#id or kind),
audit records (#sequence, actor, event) and users, each kind only for a role that may see it.

Every query is bounded: at most `LIMIT` rows of each kind (one extra row says there are more), and the
text is checked against a pattern before it reaches the database.
"""

import re
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from appliance.audit.models import AuditRecord
from appliance.core.roles import can
from appliance.inventory.models import GPU, Node
from appliance.provisioning.models import Run

LIMIT = 10
MAX_LENGTH = 100
# Names, UUIDs, PCI addresses (0000:18:00.0), #ids, event names (inventory.node.update), usernames.
QUERY_PATTERN = re.compile(rf"[\w .:#@/+\-]{{1,{MAX_LENGTH}}}")
NUMBER = re.compile(r"#?(\d{1,18})")


class SearchError(ValueError):
    """The query cannot be searched; the message names the field (q) and says what is allowed."""


@dataclass(frozen=True)
class Hit:
    label: str
    detail: str
    url: str


@dataclass
class Section:
    key: str
    title: str
    hits: list[Hit] = field(default_factory=list)
    more: bool = False  # more than LIMIT matched: refine the query


def clean_query(raw: str | None) -> str:
    text = " ".join((raw or "").split())
    if not text:
        return ""
    if len(text) > MAX_LENGTH:
        raise SearchError(_("Search (q): at most %(max)d characters.") % {"max": MAX_LENGTH})
    if not QUERY_PATTERN.fullmatch(text):
        raise SearchError(_("Search (q): use letters, digits, spaces and . : # @ / _ + - only."))
    return text


def _bounded(queryset) -> tuple[list, bool]:
    rows = list(queryset[:LIMIT + 1])
    return rows[:LIMIT], len(rows) > LIMIT


def _nodes(query: str) -> Section:
    rows, more = _bounded(Node.objects.filter(name__icontains=query).order_by("name")
                          .only("name", "role", "state"))
    return Section("nodes", gettext_lazy("Nodes"), [
        Hit(node.name, f"{node.get_role_display()} · {node.get_state_display()}",
            reverse("inventory:node-detail", args=[node.name])) for node in rows], more)


def _gpus(query: str) -> Section:
    lowered = query.lower()
    rows, more = _bounded(GPU.objects.filter(Q(uuid__icontains=query) | Q(pci_bus_id__icontains=lowered))
                          .select_related("node").order_by("node__name", "index")
                          .only("index", "uuid", "pci_bus_id", "model", "node__name"))
    return Section("gpus", gettext_lazy("GPUs"), [
        Hit(f"{gpu.node.name} GPU {gpu.index}", f"{gpu.uuid} · {gpu.pci_bus_id} · {gpu.model}",
            reverse("inventory:node-detail", args=[gpu.node.name])) for gpu in rows], more)


def _runs(query: str) -> Section:
    condition = Q()
    number = NUMBER.fullmatch(query)
    if number:
        condition |= Q(pk=int(number.group(1)))
    kinds = [value for value, label in Run.Kind.choices
             if query.lower() in value.lower() or query.lower() in str(label).lower()]
    if kinds:
        condition |= Q(kind__in=kinds)
    if not condition:
        return Section("runs", gettext_lazy("Runs"))
    rows, more = _bounded(Run.objects.filter(condition).order_by("-pk").only("pk", "kind", "state", "created"))
    return Section("runs", gettext_lazy("Runs"), [
        Hit(f"#{run.pk} {run.get_kind_display()}", run.get_state_display(),
            reverse("provisioning:run", args=[run.pk])) for run in rows], more)


def _audit_records(query: str) -> Section:
    condition = Q(actor_username__icontains=query) | Q(event__icontains=query) | Q(action__iexact=query)
    number = NUMBER.fullmatch(query)
    if number:
        condition = Q(sequence=int(number.group(1)))
    rows, more = _bounded(AuditRecord.objects.filter(condition).order_by("-sequence")
                          .only("sequence", "event", "outcome", "actor_username", "timestamp"))
    return Section("audit", gettext_lazy("Audit records"), [
        Hit(f"#{record.sequence} {record.event}",
            f"{record.actor_username or '—'} · {record.outcome}",
            reverse("audit:record", args=[record.sequence])) for record in rows], more)


def _users(query: str) -> Section:
    users = get_user_model().objects.filter(username__icontains=query).order_by("username")
    rows, more = _bounded(users)
    return Section("users", gettext_lazy("Users"), [
        Hit(user.username, getattr(user, "role_label", ""), reverse("accounts:user-update", args=[user.pk]))
        for user in rows], more)


# Kind of result -> the capability a role needs to find it (the same that guards its pages).
# Users: Administrators only (they manage accounts); Auditors read the users page but do not search it.
SEARCHES = [
    ("inventory.view", _nodes),
    ("inventory.view", _gpus),
    ("provisioning.view", _runs),
    ("audit.view", _audit_records),
    ("accounts.manage", _users),
]


def search(user, raw_query: str | None) -> tuple[str, list[Section]]:
    """The cleaned query and the sections this user may see (empty sections included, so the page
    can say "nothing found" per kind). Raises SearchError for a query that cannot be searched."""
    query = clean_query(raw_query)
    if not query:
        return "", []
    return query, [find(query) for capability, find in SEARCHES if can(user, capability)]
