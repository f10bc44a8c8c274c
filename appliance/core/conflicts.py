"""The one mark of a service refusal that means "the object is in the wrong state" (no Django, no DRF: the
services raise it; appliance.core.api answers it 409)."""


class StateConflict(Exception):
    """Mixed into a service's refusal class: the object's state does not allow the request (409), as
    opposed to a request that is wrong in itself (400). A refusal class of its own app may inherit both.

    A four-eyes refusal is one (accounts.services.ApproverNotIndependent, and the refusal each app raises
    for it: lifecycle's Conflict, lending's LendingNotIndependent, audit retention's RetentionNotIndependent):
    the request, as it was made, cannot be decided by that account (or by any, when the requester's account
    is the reason), whatever the approver's role allows. Every surface answers it alike: the REST API 409
    "conflict" with the message and `fields` naming the account at fault ("approver" or "requester"), the
    portal and the command line the same message, which starts with that field ("approver: ...")."""
