"""The one mark of a service refusal that means "the object is in the wrong state" (no Django, no DRF: the
services raise it; appliance.core.api answers it 409)."""


class StateConflict(Exception):
    """Mixed into a service's refusal class: the object's state does not allow the request (409), as
    opposed to a request that is wrong in itself (400). A refusal class of its own app may inherit both."""
