"""A node's provisioning states and the transitions allowed between them: one explicit table, run by
the shared state machine (appliance.core.statemachine)."""

from django.db import models
from django.utils.translation import pgettext_lazy

from appliance.audit.services import record
from appliance.core.statemachine import InvalidTransition, StateMachine

__all__ = ["NodeState", "TRANSITIONS", "FAILED_TWIN", "BY_HAND", "NODE_MACHINE", "InvalidTransition",
           "StateOverrideRefused", "check_transition", "is_by_hand", "RUN_ONLY", "person_transitions",
           "check_person_transition"]


class NodeState(models.TextChoices):
    NEW = "new", pgettext_lazy("node state", "New")
    PROVISIONING = "provisioning", pgettext_lazy("node state", "Provisioning")
    READY = "ready", pgettext_lazy("node state", "Ready")
    FAILED = "failed", pgettext_lazy("node state", "Failed")
    MAINTENANCE = "maintenance", pgettext_lazy("node state", "Maintenance")
    RETIRED = "retired", pgettext_lazy("node state", "Retired")


TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    NodeState.NEW: frozenset({NodeState.PROVISIONING, NodeState.MAINTENANCE, NodeState.RETIRED}),
    # An aborted run returns a node to where it was (new or maintenance too) when it changed nothing.
    NodeState.PROVISIONING: frozenset({NodeState.READY, NodeState.FAILED, NodeState.NEW, NodeState.MAINTENANCE}),
    NodeState.READY: frozenset({NodeState.PROVISIONING, NodeState.MAINTENANCE, NodeState.RETIRED}),
    # failed -> ready only by hand (BY_HAND): a run goes through provisioning.
    NodeState.FAILED: frozenset({NodeState.PROVISIONING, NodeState.READY, NodeState.MAINTENANCE, NodeState.RETIRED}),
    NodeState.MAINTENANCE: frozenset({NodeState.PROVISIONING, NodeState.READY, NodeState.RETIRED}),
    NodeState.RETIRED: frozenset({NodeState.NEW}),
}

# A state that outlives its deadline is moved to its failed twin by the watchdog.
FAILED_TWIN: dict[NodeState, NodeState] = {NodeState.PROVISIONING: NodeState.FAILED}

# Ready that a run did not reach (from provisioning) is declared by a person: an Administrator (the
# capability nodes.override_state), with a reason; the node then says "set by hand" wherever it shows.
BY_HAND: dict[NodeState, frozenset[NodeState]] = {
    NodeState.READY: frozenset({NodeState.FAILED, NodeState.MAINTENANCE}),
}
OVERRIDE_CAPABILITY = "nodes.override_state"


class StateOverrideRefused(InvalidTransition):
    """A state set by hand without the capability or a reason it needs."""


# Provisioning belongs to a run: only the run that moved a node there moves it on (to its end state, or
# back where it was when aborted), and the watchdog ends a dead run's. A person starts or cancels a run.
RUN_ONLY: frozenset[NodeState] = frozenset({NodeState.PROVISIONING})


def person_transitions(current: str) -> list[NodeState]:
    """The states a person may move a node to from `current` (by hand ones included), sorted."""
    if NodeState(current) in RUN_ONLY:
        return []
    return sorted(target for target in TRANSITIONS[NodeState(current)] if target not in RUN_ONLY)


def check_person_transition(current: str, target: str) -> None:
    if NodeState(current) in RUN_ONLY or NodeState(target) in RUN_ONLY:
        raise InvalidTransition(
            f"node state {current} to {target}: only a provisioning run moves a node into or out of "
            f"{NodeState.PROVISIONING.value}; start a run, or cancel the one that holds the node")


def is_by_hand(current: str, target: str) -> bool:
    return NodeState(current) in BY_HAND.get(NodeState(target), frozenset())


NODE_MACHINE = StateMachine(
    label="node state", choices=NodeState, transitions=TRANSITIONS, failed_twin=FAILED_TWIN, record=record,
    event="inventory.node.transition", reason_field="state_reason", changed_field="state_changed")


def check_transition(current: str, target: str) -> None:
    NODE_MACHINE.check(current, target)
