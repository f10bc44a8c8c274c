"""A node's provisioning states and the transitions allowed between them: one explicit table."""

from django.db import models


class NodeState(models.TextChoices):
    NEW = "new", "New"
    PROVISIONING = "provisioning", "Provisioning"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"
    MAINTENANCE = "maintenance", "Maintenance"
    RETIRED = "retired", "Retired"


TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    NodeState.NEW: frozenset({NodeState.PROVISIONING, NodeState.MAINTENANCE, NodeState.RETIRED}),
    NodeState.PROVISIONING: frozenset({NodeState.READY, NodeState.FAILED}),
    NodeState.READY: frozenset({NodeState.PROVISIONING, NodeState.MAINTENANCE, NodeState.RETIRED}),
    NodeState.FAILED: frozenset({NodeState.PROVISIONING, NodeState.MAINTENANCE, NodeState.RETIRED}),
    NodeState.MAINTENANCE: frozenset({NodeState.PROVISIONING, NodeState.READY, NodeState.RETIRED}),
    NodeState.RETIRED: frozenset({NodeState.NEW}),
}

# A state that outlives its deadline is moved to its failed twin by the watchdog.
FAILED_TWIN: dict[NodeState, NodeState] = {NodeState.PROVISIONING: NodeState.FAILED}


class InvalidTransition(ValueError):
    pass


def check_transition(current: str, target: str) -> None:
    current, target = NodeState(current), NodeState(target)
    if target not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none"
        raise InvalidTransition(f"node state cannot go from {current} to {target} (allowed: {allowed})")
