"""The refusals of the model lifecycle: one message that names the field or the state, and the HTTP status
the API and the MLflow-compatible API answer with."""

from appliance.core.conflicts import StateConflict


class LifecycleError(Exception):
    """Input the registry refuses: a 400 naming `field` ("source", "name", "datasets[2].sha256")."""

    status = 400

    def __init__(self, message: str, field: str = ""):
        super().__init__(message)
        self.field = field


class NotFound(LifecycleError):
    """A model, version, alias, request or deployment that does not exist: a 404."""

    status = 404


class Forbidden(LifecycleError):
    """The acting user's role does not allow it (or the action needs a person, not the appliance): a 403."""

    status = 403


class Conflict(LifecycleError, StateConflict):
    """The state forbids it (a transition the table does not allow, a request already decided, an approval
    the four-eyes rule refuses: `field` approver or requester, as lending and audit retention answer it):
    a 409."""

    status = 409


class IntegrityRefused(Conflict):
    """A version whose files no longer match their hashes or signature: it may not be deployed. `result`:
    the verification that refused it (integrity.VerifyResult), when one ran."""

    def __init__(self, message: str, field: str = "", result=None):
        super().__init__(message, field)
        self.result = result
