"""MkDocs hook (mkdocs.yml `hooks:`): the reference pages' tables, generated from the code at every build so
that they cannot drift from it. A page asks for one with a marker line, `<!-- generated: NAME -->`:

- `site-definition`: every key of a site definition with its type and limits, as the parser checks them
  (appliance/inventory/sitedef.py, traced: see site_definition()).
- `cli`: every management command of the appliance, its arguments and sub-commands (their argparse parsers).
- `attribution-rules`: the attribution rules in order, with their thresholds (appliance/analytics/rules.py).
- `mlflow-endpoints`: the MLflow registry endpoints the appliance answers (appliance/lifecycle/mlflow_urls.py).

It sets Django up when nothing did (a `mkdocs build` from a shell); the appliance's own `docs build` and the
/docs/ view run it inside Django.
"""

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def _django() -> None:
    from django.conf import settings

    if settings.configured and _apps_ready():
        return
    if str(ROOT) not in sys.path and (ROOT / "appliance").is_dir():
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    import django

    django.setup()


def _apps_ready() -> bool:
    from django.apps import apps

    return apps.ready


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


# -- attribution rules -------------------------------------------------------------------------------------

def attribution_rules() -> str:
    from appliance.analytics import rules

    lines = ["| order | rule | cause | thresholds | holds when |", "|---|---|---|---|---|"]
    for order, rule in enumerate(rules.describe(), start=1):
        thresholds = ", ".join(f"`{name}` = {value:g}" for name, value in rule["thresholds"].items()) or "none"
        doc = " ".join(rule["doc"].split())
        lines.append(f"| {order} | `{rule['rule']}` | {rule['label']} | {_cell(thresholds)} | {_cell(doc)} |")
    return "\n".join(lines)


# -- MLflow endpoints ------------------------------------------------------------------------------------

def mlflow_endpoints() -> str:
    from django.urls import URLPattern

    from appliance.lifecycle import mlflow_urls

    lines = ["| endpoint (under `/api/2.0/mlflow/`) | methods | what the appliance does |", "|---|---|---|"]
    for pattern in mlflow_urls.urlpatterns:
        if not isinstance(pattern, URLPattern) or str(pattern.pattern).startswith("^"):
            continue
        view = pattern.callback.view_class
        methods = ", ".join(m.upper() for m in ("get", "post", "patch", "delete") if hasattr(view, m))
        doc = " ".join((view.__doc__ or "").split())
        lines.append(f"| `{pattern.pattern}` | {methods} | {_cell(doc)} |")
    lines.append("")
    lines.append("Any other path under `/api/2.0/mlflow/` answers as MLflow does for an endpoint it does not have.")
    return "\n".join(lines)


# -- CLI ---------------------------------------------------------------------------------------------------

def appliance_commands() -> dict[str, str]:
    """{command name: app} of the appliance's own management commands."""
    from django.core.management import get_commands

    return {name: app for name, app in sorted(get_commands().items()) if app.startswith("appliance.")}


def command_parser(name: str, prog: str = "appliance"):
    from django.core.management import get_commands, load_command_class

    return load_command_class(get_commands()[name], name).create_parser(prog, name)


def subparsers(parser) -> dict:
    import argparse

    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _help(parser, depth: int, title: str) -> list[str]:
    parser.formatter_class = _wide_formatter()
    out = [f"{'#' * depth} `{title}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for sub_name, sub in subparsers(parser).items():
        out += _help(sub, min(depth + 1, 6), f"{title} {sub_name}")
    return out


def _wide_formatter():
    import argparse

    class Wide(argparse.RawDescriptionHelpFormatter):
        def __init__(self, prog):
            super().__init__(prog, width=100, max_help_position=32)

    return Wide


def cli() -> str:
    out = []
    for name, app in appliance_commands().items():
        out.append(f"From `{app}`.")
        out.append("")
        out += _help(command_parser(name), 2, f"appliance {name}")
    return "\n".join(out)


# -- site definition ---------------------------------------------------------------------------------------

def _normal(path: str) -> str:
    return re.sub(r"\[\d+\]", "[]", path)


def site_definition() -> str:
    """Traces the parser: every Cursor method it calls records the field path, the kind of value and its
    limits. The demo site is parsed first, then a document that adds every allowed key the trace has not
    reached yet (a mapping where the parser asked for one, a one-item list where it asked for a list, a
    placeholder text elsewhere), until nothing new is reached. A key the parser reads without a Cursor check
    of its own shows the checks it does get."""
    from appliance.inventory import sitedef

    fields: dict[str, dict] = {}

    def note(cursor, kind, **limits):
        entry = fields.setdefault(_normal(cursor.path), {"kinds": [], "limits": {}, "allowed": None})
        if kind not in entry["kinds"]:
            entry["kinds"].append(kind)
        entry["limits"].update({k: v for k, v in limits.items() if v not in (None, "", ())})

    original = {name: getattr(sitedef.Cursor, name) for name in
                ("mapping", "sequence", "text", "integer", "boolean", "choice", "url", "ip_address", "cidr",
                 "text_list", "scalar_mapping")}

    def traced(name):
        method = original[name]

        def wrapper(self, *args, **kwargs):
            if name == "mapping":
                allowed = kwargs.get("allowed", args[0] if args else None)
                required = kwargs.get("required", args[1] if len(args) > 1 else ())
                note(self, "mapping")
                entry = fields[_normal(self.path)]
                if allowed is not None:
                    entry["allowed"] = list(dict.fromkeys([*(entry["allowed"] or []), *allowed]))
                for key in required or ():
                    sub = f"{self.path}.{key}" if self.path else key
                    fields.setdefault(_normal(sub), {"kinds": [], "limits": {}, "allowed": None})["required"] = True
            elif name == "text":
                pattern = kwargs.get("pattern", args[0] if args else None)
                what = kwargs.get("what", args[1] if len(args) > 1 else "")
                note(self, "text", pattern=what or (pattern.pattern if pattern is not None else None))
            elif name == "integer":
                note(self, "integer", minimum=kwargs.get("minimum", args[0] if args else None),
                     maximum=kwargs.get("maximum", args[1] if len(args) > 1 else None))
            elif name == "choice":
                note(self, "choice", choices=tuple(kwargs.get("choices", args[0] if args else ())))
            elif name == "sequence":
                note(self, "list")
            elif name == "text_list":
                note(self, "list of texts")
            else:
                note(self, {"boolean": "true or false", "url": "URL", "ip_address": "IP address", "cidr": "CIDR subnet",
                            "scalar_mapping": "mapping of names to values"}[name])
            return method(self, *args, **kwargs)

        return wrapper

    demo = ROOT / "appliance" / "inventory" / "sites" / "demo.yml"
    if not demo.is_file():
        from appliance.core import resources

        demo = resources.PACKAGE_DIR / "inventory" / "sites" / "demo.yml"
    import yaml

    document = yaml.safe_load(demo.read_text())
    parser_init = sitedef._Parser.__init__

    def init_without_database(self, collector):
        # Credentials live in the database; the trace needs their names' checks, not their rows.
        parser_init(self, collector)
        self.credential_endpoints = _AnyCredential()

    try:
        sitedef._Parser.__init__ = init_without_database
        for name in original:
            setattr(sitedef.Cursor, name, traced(name))
        for _ in range(12):
            before = repr(fields) + repr(document)
            try:
                sitedef.parse_site(yaml.safe_dump(document, sort_keys=False), "trace.yml")
            except sitedef.SiteValidationError:
                pass
            _extend(document, fields)
            if repr(fields) + repr(document) == before:
                break
    finally:
        sitedef._Parser.__init__ = parser_init
        for name, method in original.items():
            setattr(sitedef.Cursor, name, method)
    # The parser reads platform files with the same cursors: only the site's own keys are listed here.
    return _site_table({path: entry for path, entry in fields.items()
                        if re.split(r"[.\[]", path)[0] in sitedef._Parser.TOP})


class _AnyCredential(dict):
    """Every credential name is known, bound to every endpoint."""

    def __contains__(self, key):
        return True

    def __missing__(self, key):
        return []


def _extend(document, fields) -> None:
    """Adds to `document` a placeholder for every allowed key not present yet."""
    for path, entry in list(fields.items()):
        for key in entry.get("allowed") or ():
            sub = f"{path}.{key}" if path else key
            if sub in fields:
                continue
            for target in _containers(document, path):
                if isinstance(target, dict) and key not in target:
                    target[key] = "x"
    for path, entry in fields.items():
        for target_parent, key in _slots(document, path):
            value = target_parent[key]
            if "mapping" in entry["kinds"] and not isinstance(value, dict):
                target_parent[key] = {}
            elif entry["kinds"][:1] == ["list"] and not isinstance(value, list):
                target_parent[key] = [{}]


def _containers(document, path: str) -> list:
    nodes = [document]
    for part in filter(None, re.split(r"\.", path)) if path else []:
        name, is_list = (part[:-2], True) if part.endswith("[]") else (part, False)
        nxt = []
        for node in nodes:
            if isinstance(node, dict) and name in node:
                value = node[name]
                if is_list:
                    nxt.extend(value if isinstance(value, list) else [])
                else:
                    nxt.append(value)
        nodes = nxt
    return nodes


def _slots(document, path: str) -> list:
    if not path or path.endswith("[]"):
        return []
    parent, _, key = path.rpartition(".")
    return [(node, key) for node in _containers(document, parent) if isinstance(node, dict) and key in node]


def _site_table(fields: dict) -> str:
    lines = ["| field | value | limits |", "|---|---|---|"]
    for path in sorted(fields, key=lambda p: p.replace("[]", "")):
        entry = fields[path]
        if not path:
            continue
        kinds = [k for k in entry["kinds"] if k != "text" or len(entry["kinds"]) == 1] or ["any value"]
        limits = entry["limits"]
        parts = []
        if "choices" in limits:
            parts.append("one of: " + ", ".join(f"`{c}`" for c in limits["choices"]))
        if "minimum" in limits or "maximum" in limits:
            parts.append(f"{limits.get('minimum', '')} to {limits.get('maximum', '')}".strip())
        if "pattern" in limits:
            parts.append(str(limits["pattern"]))
        if entry.get("allowed"):
            parts.append("keys: " + ", ".join(f"`{k}`" for k in entry["allowed"]))
        if entry.get("required"):
            parts.insert(0, "**required**")
        lines.append(f"| `{path}` | {_cell(', '.join(kinds))} | {_cell('; '.join(parts))} |")
    return "\n".join(lines)


GENERATORS = {"site-definition": site_definition, "cli": cli, "attribution-rules": attribution_rules,
              "mlflow-endpoints": mlflow_endpoints}


def on_page_markdown(markdown, page, config, files, **kwargs):
    if "<!-- generated:" not in markdown:
        return markdown
    _django()

    def replace(match):
        generator = GENERATORS.get(match.group(1))
        if generator is None:
            raise ValueError(f"{page.file.src_path}: no generator named {match.group(1)!r}")
        return generator()

    return MARKER.sub(replace, markdown)
