"""Capture: turns what happens on every channel (web, API, CLI, tasks, logins) into audit records.

`install()` runs once from the audit app's ready(); the request middleware is listed in settings.
"""

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    from . import auth, commands, refusals, tasks  # noqa: F401 (refusals: registers its Celery task)

    auth.connect()
    tasks.connect()
    commands.install()
    _installed = True
