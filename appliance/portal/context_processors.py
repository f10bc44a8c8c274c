from appliance.core.roles import capabilities_of

from .navigation import entries_for


def navigation(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_entries": [], "capabilities": frozenset()}
    return {"nav_entries": entries_for(user), "capabilities": capabilities_of(user)}
