"""Values written into configuration files, quoted for the format that reads them.

The site parser already refuses control characters and checks every value against its pattern; the
renderers check again, because a value in the database was not necessarily checked by this version
of the parser, and one newline in a value of a root-owned file (modprobe.d, a systemd unit, slurm.conf)
is a second line the administrator never wrote. Each helper raises RenderError, naming the field,
rather than write such a value. YAML and JSON files are written by their dumpers, which quote.
"""

from __future__ import annotations

import re

from appliance.inventory.yamllimits import control_character

from .site import RenderError


def text(value, where: str) -> str:
    """`value` as text with no control character (no newline, carriage return, NUL, ...)."""
    rendered = "true" if value is True else "false" if value is False else str(value)
    found = control_character(rendered)
    if found:
        raise RenderError(f"{where}: control character {found} in {rendered!r}: refusing to write it")
    return rendered


def _safe(value, where: str, pattern: re.Pattern, what: str) -> str:
    rendered = text(value, where)
    if not pattern.match(rendered):
        raise RenderError(f"{where}: {rendered!r} is not {what}: refusing to write it")
    return rendered


# modprobe.d: `options MODULE name=value ...`, split on blanks; a value in double quotes may hold
# parentheses and commas (networks="o2ib0(ib0)"), nothing of ours needs blanks, quotes or backslashes.
_MODPROBE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MODPROBE_VALUE = re.compile(r"^[A-Za-z0-9_.,:()@/+-]+$")


def modprobe_option(name, value, where: str, quoted: bool = False) -> str:
    name = _safe(name, where, _MODPROBE_NAME, "a module parameter name")
    value = _safe(value, where, _MODPROBE_VALUE, "a module parameter value")
    return f'{name}="{value}"' if quoted else f"{name}={value}"


# systemd unit files (systemd.syntax(7), systemd.unit(5)): a line ends a setting, a trailing backslash
# continues it, '%' starts a specifier. In command lines (systemd.service(5)) '$' also expands a variable
# and blanks and quotes split words.
def systemd_value(value, where: str) -> str:
    rendered = text(value, where)
    if rendered.endswith("\\"):
        raise RenderError(f"{where}: {rendered!r} ends with a backslash (a line continuation): refusing to write it")
    return rendered.replace("%", "%%")


_EXEC_PLAIN = re.compile(r"^[A-Za-z0-9_.,:=/*@+-]+$")


def systemd_exec_argument(value, where: str) -> str:
    rendered = text(value, where)
    if _EXEC_PLAIN.fullmatch(rendered):
        return rendered
    quoted = rendered.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{quoted}"'


# slurm.conf: `Key=Value` words separated by blanks, '#' starts a comment; no value of ours needs
# blanks or quotes (names, addresses, node lists, GRES specifications, time limits).
_SLURM_VALUE = re.compile(r"^[A-Za-z0-9_.,:()\[\]/@+-]+$")


def slurm_value(value, where: str) -> str:
    return _safe(value, where, _SLURM_VALUE, "a slurm.conf value (letters, digits and _ . , : ( ) [ ] / @ + -)")


# beegfs-client.conf: `key = value` lines, '#' starts a comment.
_BEEGFS_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_BEEGFS_VALUE = re.compile(r"^[A-Za-z0-9_.,:/@+-]+$")


def beegfs_setting(key, value, where: str) -> str:
    key = _safe(key, where, _BEEGFS_KEY, "a BeeGFS setting name")
    return f"{key} = {_safe(value, where, _BEEGFS_VALUE, 'a BeeGFS setting value')}"


# Words of other line-oriented files (opensm.conf, partitions.conf, nhc.conf): one token each.
_WORD = re.compile(r"^[A-Za-z0-9_.,:()/@+=*-]+$")


def word(value, where: str) -> str:
    return _safe(value, where, _WORD, "a single word (letters, digits and _ . , : ( ) / @ + = * -)")


# A name that becomes part of a file name (a networkd file, a unit, a client config): one path component.
_FILE_NAME = re.compile(r"^[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]*$")


def file_name(value, where: str) -> str:
    return _safe(value, where, _FILE_NAME, "usable in a file name (letters, digits and _ . @ + -, not starting with '.')")
