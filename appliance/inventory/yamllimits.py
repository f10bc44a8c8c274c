"""Limits on an untrusted YAML document, checked before anything is built from it.

A site definition comes from an upload. YAML lets a few kilobytes name billions of nodes through
anchors and aliases (the "billion laughs"): ruamel composes an alias as a reference, so loading is
cheap, but every later walk over the document (validation, JSON for the database) pays the expanded
size. So the document's events are read once, in one pass without recursion, before it is loaded:
its size in bytes, its nesting depth and the number of nodes it has once every alias is expanded are
bounded (settings SITE_MAX_BYTES, SITE_MAX_DEPTH, SITE_MAX_NODES). Anchors stay usable within those
bounds; an alias naming a collection that contains it (a recursive document) is refused.

After loading, `control_characters` finds any key or text holding a control character: a newline in
a value is how a single field turns into a second line of a root-owned configuration file.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterator

from django.conf import settings
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    ScalarEvent,
)
from ruamel.yaml.reader import ReaderError

Report = Callable[[int, str], None]  # (line, message)


def check_limits(text: str, report: Report) -> bool:
    """Report the first limit `text` exceeds (with its line) and return False; True when within all.

    A syntax error ends the pass quietly: the loader reports it with its own line and message.
    """
    size = len(text.encode("utf-8"))
    if size > settings.SITE_MAX_BYTES:
        report(1, f"the file has {size} bytes; the limit is {settings.SITE_MAX_BYTES} (setting SITE_MAX_BYTES)")
        return False
    max_depth, max_nodes = settings.SITE_MAX_DEPTH, settings.SITE_MAX_NODES
    # One frame per open collection: [anchor, expanded nodes so far, depth of its deepest content].
    frames: list[list] = []
    anchored: dict[str, tuple[int, int]] = {}  # anchor -> (expanded nodes, depth) of what it names
    total = 0

    def add(nodes: int, depth: int) -> None:
        if frames:
            frames[-1][1] += nodes
            frames[-1][2] = max(frames[-1][2], depth)

    try:
        for event in YAML(typ="rt").parse(text):
            line = event.start_mark.line + 1 if event.start_mark else 1
            if isinstance(event, CollectionStartEvent):
                if len(frames) >= max_depth:
                    report(line, f"nested deeper than {max_depth} levels (setting SITE_MAX_DEPTH)")
                    return False
                frames.append([event.anchor, 1, 1])
                total += 1
            elif isinstance(event, CollectionEndEvent):
                anchor, nodes, depth = frames.pop()
                if anchor:
                    anchored[anchor] = (nodes, depth)
                add(nodes, depth + 1)
            elif isinstance(event, ScalarEvent):
                total += 1
                if event.anchor:
                    anchored[event.anchor] = (1, 0)
                add(1, 0)
            elif isinstance(event, AliasEvent):
                if any(frame[0] == event.anchor for frame in frames):
                    report(line, f"alias *{event.anchor} refers to a collection that contains it (a recursive "
                                 "document cannot be checked or stored)")
                    return False
                if event.anchor not in anchored:
                    continue  # an undefined alias: the loader reports it
                nodes, depth = anchored[event.anchor]
                if len(frames) + depth > max_depth:
                    report(line, f"alias *{event.anchor} nests the document deeper than {max_depth} levels "
                                 "(setting SITE_MAX_DEPTH)")
                    return False
                total += nodes
                if total > max_nodes:
                    report(line, f"alias *{event.anchor} expands the document beyond {max_nodes} nodes "
                                 "(setting SITE_MAX_NODES): aliases may repeat a part, not multiply it")
                    return False
                add(nodes, depth)
            if total > max_nodes:
                report(line, f"the document has more than {max_nodes} nodes (setting SITE_MAX_NODES)")
                return False
    except (MarkedYAMLError, ReaderError):
        return True
    return True


# C0 and C1 controls, DEL, and the two Unicode separators YAML 1.1 readers take for line breaks.
_SEPARATORS = {"\u2028": "LINE SEPARATOR", "\u2029": "PARAGRAPH SEPARATOR"}


def control_character(text: str) -> str | None:
    """A description of the first control character in `text` (e.g. 'U+000A (line feed)'), or None."""
    for char in text:
        code = ord(char)
        if code < 0x20 or 0x7F <= code <= 0x9F or char in _SEPARATORS:
            name = _SEPARATORS.get(char) or unicodedata.name(char, "") or _CONTROL_NAMES.get(code, "control")
            return f"U+{code:04X} ({name.lower()})"
    return None


_CONTROL_NAMES = {0x00: "NUL", 0x09: "tab", 0x0A: "line feed", 0x0D: "carriage return", 0x1B: "escape",
                  0x7F: "delete", 0x85: "next line"}


def control_characters(data, path: str = "", line: int = 1) -> Iterator[tuple[int, str, str]]:
    """(line, field path, message) for every key and text of the loaded document holding a control character.

    The walk follows aliases (bounded by check_limits, which runs first)."""
    if isinstance(data, dict):
        for key, value in data.items():
            key_line = _line(data, key, line)
            key_text = str(key)
            found = control_character(key_text) if isinstance(key, str) else None
            child = _sub_path(path, _printable(key_text) if found else key_text)
            if found:
                yield key_line, child, f"control character {found} in a key is not allowed"
            yield from control_characters(value, child, key_line)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from control_characters(value, f"{path}[{index}]", _line(data, index, line))
    elif isinstance(data, str):
        found = control_character(data)
        if found:
            yield line, path, f"control character {found} is not allowed in text"


def _line(container, key, default: int) -> int:
    try:
        return (container.lc.item(key) if isinstance(key, int) else container.lc.key(key))[0] + 1
    except (AttributeError, KeyError, IndexError, TypeError):
        return default


def _sub_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _printable(text: str) -> str:
    return text.encode("unicode_escape").decode("ascii")
