"""Who is acting, through which channel, for which request: carried in a context variable.

The audit log reads it for every record; Celery tasks receive a snapshot of it so the actor
who asked travels with the work.
"""

import contextvars
import os
import pwd
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace


@dataclass(frozen=True)
class ActionContext:
    channel: str = "system"  # web, api, cli, task, system
    request_id: str = ""
    source_address: str = ""
    user_agent: str = ""
    actor_id: int | None = None
    actor_username: str = ""
    actor_roles: tuple[str, ...] = field(default_factory=tuple)
    request: object = field(default=None, compare=False, repr=False)

    def resolved(self) -> "ActionContext":
        """The context with the actor taken from the request's user, once authentication ran."""
        user = getattr(self.request, "user", None) if self.request is not None else None
        if user is not None and getattr(user, "is_authenticated", False):
            return replace(self, actor_id=user.pk, actor_username=user.get_username(),
                           actor_roles=(getattr(user, "role", "") or "",))
        return self

    def snapshot(self) -> dict:
        """What travels with background work: plain values only (never the request object)."""
        resolved = self.resolved()
        data = {name: getattr(resolved, name) for name in SNAPSHOT_FIELDS}
        data["actor_roles"] = list(data["actor_roles"])
        return data


SNAPSHOT_FIELDS = tuple(f.name for f in fields(ActionContext) if f.name != "request")

_current: contextvars.ContextVar[ActionContext] = contextvars.ContextVar("appliance_action_context")


def current() -> ActionContext:
    try:
        return _current.get().resolved()
    except LookupError:
        return ActionContext()


@contextmanager
def use(ctx: ActionContext):
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


@contextmanager
def acting_as(user=None, **changes):
    """Run a block as `user` (or with other fields changed), keeping the rest of the context."""
    base = current()
    if user is not None:
        changes.update(actor_id=user.pk, actor_username=user.get_username(),
                       actor_roles=(getattr(user, "role", "") or "",))
    with use(replace(base, **changes)) as ctx:
        yield ctx


def from_snapshot(data: dict, channel: str = "task") -> ActionContext:
    data = dict(data or {})
    data["actor_roles"] = tuple(data.get("actor_roles") or ())
    data["channel"] = channel
    return ActionContext(**{k: v for k, v in data.items() if k in SNAPSHOT_FIELDS})


def os_user() -> str:
    """The OS account of the process's real uid. Not $LOGNAME or $USER (what getpass.getuser()
    reads first): whoever starts a process sets its environment, and could name any actor."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # no passwd entry (containers): the uid itself
        return f"uid:{uid}"
