"""What each role may do, written out by hand: the expectation of every access test.

It is deliberately not derived from appliance.core.roles.CAPABILITIES (the table under test): a
change there (an Operator given accounts.manage) must disagree with this table and fail the tests,
until someone decides the change is wanted and edits both.
"""

ADMINISTRATOR, OPERATOR, ML_ENGINEER, AUDITOR, VIEWER = "administrator", "operator", "ml_engineer", "auditor", "viewer"
ROLES = (ADMINISTRATOR, OPERATOR, ML_ENGINEER, AUDITOR, VIEWER)

#                          administrator operator ml_engineer auditor viewer
EXPECTED_MATRIX: dict[str, tuple[bool, bool, bool, bool, bool]] = {
    "portal.view":          (True,  True,  True,  True,  True),
    "inventory.view":       (True,  True,  True,  True,  True),
    "inventory.change":     (True,  True,  False, False, False),
    "nodes.override_state": (True,  False, False, False, False),
    "provisioning.view":    (True,  True,  False, True,  True),
    "provisioning.run":     (True,  True,  False, False, False),
    "partitioning.view":    (True,  True,  True,  True,  True),
    "partitioning.change":  (True,  True,  False, False, False),
    "telemetry.view":       (True,  True,  True,  True,  True),
    "analytics.view":       (True,  True,  True,  True,  True),
    "analytics.change":     (True,  True,  False, False, False),
    "pools.approve":        (True,  False, False, False, False),
    "models.view":          (True,  True,  True,  True,  True),
    "models.change":        (True,  False, True,  False, False),
    "models.approve":       (True,  False, True,  False, False),
    "models.deploy":        (True,  True,  True,  False, False),
    "audit.view":           (True,  False, False, True,  False),
    "audit.export":         (True,  False, False, True,  False),
    "audit.retention":      (True,  False, False, False, False),
    "accounts.view":        (True,  False, False, True,  False),
    "accounts.manage":      (True,  False, False, False, False),
    "accounts.self":        (True,  True,  True,  True,  True),
    "credentials.manage":   (True,  False, False, False, False),
}


def expected_to_hold(role: str, capability: str) -> bool:
    """Whether `role` is expected to hold `capability` (KeyError for a capability nobody wrote down)."""
    return EXPECTED_MATRIX[capability][ROLES.index(role)]
