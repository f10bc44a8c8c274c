"""One state machine for every stateful model, driven by its tables (as MAAS drives a node's states):
a table of the transitions allowed from each state, and a table of failed twins (the state a watchdog
moves a state to when it outlived its deadline). Anything not in the table is refused.

A transition locks the row, checks the move against the table, sets the state, its reason and the
timestamps the model keeps, saves, and records exactly one audit event: the transition's own record
(who, from, to, why). The model's change capture (AuditedModel.save) is bypassed for that save, so a
transition never writes a second, diff-shaped record of the same change.

core sits below the audit app, so the machine does not import it: each model's machine is given the
recorder (appliance.audit.services.record) by the app that defines it.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from django.db import models, transaction
from django.utils import timezone


class InvalidTransition(ValueError):
    """A move the transition table does not allow."""


# (instance, previous state, target state) -> the audit event's name, outcome or details.
EventFor = Callable[[models.Model, str, str], str]
DetailsFor = Callable[[models.Model, str, str], dict]


def _success(_instance, _previous, _target) -> str:
    return "success"


@dataclass(frozen=True)
class StateMachine:
    label: str  # how a refusal names the thing: "run", "stage run", "node"
    choices: type[models.TextChoices]
    transitions: Mapping[str, frozenset]
    failed_twin: Mapping[str, str]
    record: Callable[..., object]  # appliance.audit.services.record
    event: str | EventFor
    outcome: EventFor = _success
    details: DetailsFor | None = None
    state_field: str = "state"
    reason_field: str = "reason"
    # Fields set to the transition's time when the model enters a state: {state: (field, ...)}.
    stamps: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # A field set to the time of every transition (a node's state_changed).
    changed_field: str = ""

    def __post_init__(self):
        missing = set(self.choices) - set(self.transitions)
        if missing:
            raise ValueError(f"{self.label}: the transition table has no row for {', '.join(sorted(missing))}")
        for state, twin in self.failed_twin.items():
            if twin not in self.transitions[state]:
                raise ValueError(f"{self.label}: the failed twin of {state} is {twin}, which the table refuses")

    # -- the tables -------------------------------------------------------------------------------

    def allowed(self, current: str) -> frozenset:
        return self.transitions[self.choices(current)]

    def check(self, current: str, target: str) -> None:
        """Raise InvalidTransition unless the table allows current -> target."""
        try:
            current, target = self.choices(current), self.choices(target)
        except ValueError:
            raise InvalidTransition(f"{self.label} cannot go from {current} to {target}: "
                                    f"not a state (states: {', '.join(self.choices.values)})") from None
        if target not in self.transitions[current]:
            allowed = ", ".join(sorted(self.transitions[current])) or "none, it is finished"
            raise InvalidTransition(f"{self.label} cannot go from {current} to {target} (allowed: {allowed})")

    def twin_of(self, state: str) -> str | None:
        """The failed twin of `state`, or None when the state has no deadline."""
        return self.failed_twin.get(self.choices(state))

    def is_final(self, state: str) -> bool:
        return not self.transitions[self.choices(state)]

    # -- moving an instance -----------------------------------------------------------------------

    def transition(self, instance: models.Model, target: str, reason: str = "", *,
                   also: tuple[str, ...] = (), details: dict | None = None) -> str:
        """Move `instance` to `target` if the table allows it, from the state stored in the database
        (locked), and record the transition. `also` names fields the caller set on the instance that
        are saved with the move; `details` is added to the record's. Returns the state it left.
        Raises InvalidTransition."""
        with transaction.atomic():
            locked = type(instance)._base_manager.select_for_update().only(self.state_field).get(pk=instance.pk)
            previous = getattr(locked, self.state_field)
            self.check(previous, target)
            target = self.choices(target)
            now = timezone.now()
            setattr(instance, self.state_field, target.value)
            setattr(instance, self.reason_field, reason)
            fields = [self.state_field, self.reason_field, *also]
            for name in self.stamps.get(target, ()):
                setattr(instance, name, now)
                fields.append(name)
            if self.changed_field:
                setattr(instance, self.changed_field, now)
                fields.append(self.changed_field)
            if any(f.name == "updated" for f in instance._meta.concrete_fields):
                fields.append("updated")
            # models.Model.save itself, not the subclass's: AuditedModel's change capture would record
            # this same change a second time.
            models.Model.save(instance, update_fields=list(dict.fromkeys(fields)))
            recorded = {"from": previous, "to": target.value, "reason": reason}
            if self.details is not None:
                recorded.update(self.details(instance, previous, target.value))
            recorded.update(details or {})
            event = self.event(instance, previous, target.value) if callable(self.event) else self.event
            self.record(event, target=instance, outcome=self.outcome(instance, previous, target.value),
                        reason=reason, details=recorded)
        return previous

    def fail_outlived(self, instance: models.Model, reason: str, *, also: tuple[str, ...] = (),
                      details: dict | None = None) -> str | None:
        """The watchdog's move: the instance's state to its failed twin. Returns the twin, or None when
        the state has none (it is left as it is)."""
        twin = self.twin_of(getattr(instance, self.state_field))
        if twin is None:
            return None
        self.transition(instance, twin, reason, also=also, details=details)
        return twin
