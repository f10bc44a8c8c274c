"""Management commands: each run records `cli.command` (actor = the OS user, channel `cli`).

The hook sits on BaseCommand.execute, the one method both `manage.py` (run_from_argv) and
call_command go through, and every record the command causes carries channel `cli` and the
command's own request id. Arguments are kept with secrets redacted: by option name for parsed
options, and, for the raw command line, the value following (or attached to) any secret flag.
"""

import argparse
import functools
import logging
import os
import uuid
from contextlib import contextmanager, nullcontext
from pathlib import PurePath

from django.core.management.base import BaseCommand
from django.db import DatabaseError, connection, transaction

from appliance import audit
from appliance.audit.services import REDACTED, is_secret_key
from appliance.core import context, database

log = logging.getLogger(__name__)

# Read-only introspection that tooling runs constantly: records of it would bury the real ones.
NOT_RECORDED = frozenset({
    "check", "diffsettings", "showmigrations", "sqlmigrate", "sqlflush", "sqlsequencereset",
    "inspectdb", "findstatic", "version", "help",
})
# Build or empty the schema. From the command line they are an operator's act and are recorded;
# called from code (the test runner creating and flushing its database, deployment scripts) they
# run while the audit tables are missing or being reset, and there is no operator behind them.
SCHEMA_LIFECYCLE = frozenset({"migrate", "flush", "createcachetable"})
# Run until stopped: recorded when they start.
LONG_RUNNING = frozenset({"runserver", "shell", "dbshell", "testserver"})
# Options every command has; kept out of the record unless set to something else than the default.
_STEALTH_OPTIONS = frozenset({"stdout", "stderr", "skip_checks"})


def command_name(command: BaseCommand) -> str:
    return type(command).__module__.rsplit(".", 1)[-1]


def _json_safe(value):
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, list | tuple | set | frozenset):
        return [_json_safe(v) for v in value]
    return f"<{type(value).__name__}>"


def _parser_actions(parser):
    """Every argparse action of a command, those of its subcommands included."""
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                yield from _parser_actions(subparser)


def _secret_flags(parser) -> set[str]:
    return {flag for action in _parser_actions(parser)
            if is_secret_key(action.dest) and action.nargs != 0 for flag in action.option_strings}


def _is_secret_flag(flag: str, secret_flags: set[str]) -> bool:
    if flag in secret_flags:
        return True
    # argparse accepts any unambiguous prefix of a long option (--pass for --password).
    if flag.startswith("--") and len(flag) > 2 and any(f.startswith(flag) for f in secret_flags if f.startswith("--")):
        return True
    return is_secret_key(flag.lstrip("-").replace("-", "_"))


def redact_argv(argv: list[str], secret_flags: set[str]) -> list[str]:
    redacted, hide_next = [], False
    for token in argv:
        token = str(token)
        if hide_next:
            redacted.append(REDACTED)
            hide_next = False
            continue
        if token.startswith("-") and token != "-" and token != "--":
            flag, equals, _value = token.partition("=")
            short_attached = not token.startswith("--") and len(token) > 2 and token[:2] in secret_flags
            if short_attached:
                redacted.append(token[:2] + REDACTED)
                continue
            if _is_secret_flag(flag, secret_flags):
                if equals:
                    redacted.append(f"{flag}={REDACTED}")
                else:
                    redacted.append(flag)
                    hide_next = True
                continue
        elif "=" in token and is_secret_key(token.partition("=")[0]):
            redacted.append(f"{token.partition('=')[0]}={REDACTED}")
            continue
        redacted.append(token)
    return redacted


def redact_options(options: dict, defaults: dict) -> dict:
    """The options that differ from the parser's defaults, secrets masked by name."""
    kept = {}
    for name, value in sorted(options.items()):
        if name in _STEALTH_OPTIONS or name not in defaults or value == defaults[name]:
            continue
        if is_secret_key(name) and value not in (None, "", False):
            kept[name] = REDACTED
        else:
            kept[name] = _json_safe(value)
    return kept


def describe_invocation(command: BaseCommand, args: tuple, options: dict) -> dict:
    name = command_name(command)
    parser = command.create_parser("manage.py", name)
    defaults = {action.dest: action.default for action in _parser_actions(parser)}
    secret_flags = _secret_flags(parser)
    details = {
        "command": name,
        "args": redact_argv([str(a) for a in args], secret_flags),
        "options": redact_options(options, defaults),
    }
    argv = getattr(command, "_audit_argv", None)
    if argv is not None:
        details["argv"] = redact_argv(argv, secret_flags)
    return details


def _ssh_client_address() -> str:
    parts = os.environ.get("SSH_CONNECTION", "").split()
    return parts[0] if parts else ""


@contextmanager
def cli_context():
    """Channel `cli` for the command's duration, with the OS user as actor.

    A command called from inside a request or a task is part of that act: the context of whoever
    called it stays, and the command is recorded under it.
    """
    outer = context.current()
    if outer.channel not in ("system", "cli"):
        with nullcontext(outer) as ctx:
            yield ctx
        return
    request_id = outer.request_id if outer.channel == "cli" and outer.request_id else f"cli-{uuid.uuid4()}"
    ctx = context.ActionContext(channel="cli", request_id=request_id, source_address=_ssh_client_address(),
                                actor_username=context.os_user())
    with context.use(ctx):
        yield ctx


def _audit_log_exists() -> bool:
    from appliance.audit.models import AuditRecord, ChainHead

    try:
        tables = connection.introspection.table_names()
        return AuditRecord._meta.db_table in tables and ChainHead.objects.filter(pk=1).exists()
    except DatabaseError:
        return False


def _record(details: dict, outcome: str, reason: str = "") -> None:
    from appliance.audit.models import ChainHead

    if database.not_created(connection):
        # Looking would write the empty database's header: a command refused before migrate leaves it as it was.
        log.warning("command %s not recorded: the audit log does not exist in this database yet (it was "
                    "never migrated)", details["command"])
        return
    try:
        with transaction.atomic():
            audit.record("cli.command", outcome=outcome, reason=reason, target_type="command",
                         target_name=details["command"], details=details)
    except (DatabaseError, ChainHead.DoesNotExist) as exc:
        if _audit_log_exists():
            raise
        # Before the first migrate there is no log to write to; the command must still run.
        log.warning("command %s not recorded: the audit log does not exist in this database yet (%s)",
                    details["command"], exc)


def _failure_reason(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, SystemExit):
        return f"exit status {exc.code}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _is_success_exit(exc: BaseException) -> bool:
    return isinstance(exc, SystemExit) and exc.code in (None, 0)


def should_record(command: BaseCommand) -> bool:
    name = command_name(command)
    if name in NOT_RECORDED:
        return False
    # A command may opt out for one invocation: offline verification must not need a database.
    if not getattr(command, "audit_record_invocation", True):
        return False
    if name in SCHEMA_LIFECYCLE and not hasattr(command, "_audit_argv"):
        return False
    # runserver's autoreloader starts the same command again in a child process.
    return not (name in LONG_RUNNING and os.environ.get("RUN_MAIN") == "true")


def run_audited(command: BaseCommand, execute, args: tuple, options: dict):
    if not should_record(command):
        return execute(command, *args, **options)
    with cli_context():
        details = describe_invocation(command, args, options)
        if details["command"] in LONG_RUNNING:
            _record({**details, "phase": "start"}, "success")
            return execute(command, *args, **options)
        try:
            result = execute(command, *args, **options)
        except BaseException as exc:
            if _is_success_exit(exc):
                _record(details, "success")
                raise
            try:
                _record(details, "failure", _failure_reason(exc))
            except Exception:
                # The command's own error is what the operator must see; the audit failure is logged.
                log.exception("command %s failed and its audit record could not be written", details["command"])
            raise
        _record(details, "success")
        return result


def install() -> None:
    if getattr(BaseCommand.execute, "audited", False):
        return
    original_execute = BaseCommand.execute
    original_run_from_argv = BaseCommand.run_from_argv

    @functools.wraps(original_execute)
    def execute(self, *args, **options):
        return run_audited(self, original_execute, args, options)

    @functools.wraps(original_run_from_argv)
    def run_from_argv(self, argv):
        # Only the command line has a raw argv; call_command has parsed options alone.
        self._audit_argv = list(argv[2:])
        return original_run_from_argv(self, argv)

    execute.audited = True
    BaseCommand.execute = execute
    BaseCommand.run_from_argv = run_from_argv
