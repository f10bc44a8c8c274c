"""MLflow's search filters and page tokens, for the MLflow-compatible registry API (mlflow_api.py).

The filter grammar is MLflow's: clauses joined by AND (MLflow has no OR), each `<identifier> <comparator>
<value>`:
    name = 'x'    name != 'x'    name LIKE 'x%'    name ILIKE '%x%'    name IN ('a', 'b')
    tags.k = 'v'  tags.`key with dots` LIKE 'v%'  (tag. also accepted)
    run_id = '...'  run_id IN (...)   source_path = '...'   version_number >= 3   (model versions only)
LIKE's `%` is any run of characters and `_` one character, case-sensitive; ILIKE ignores case.
A malformed filter is refused with the position and what was expected (INVALID_PARAMETER_VALUE).
"""

import base64
import binascii
import json
import re
from dataclasses import dataclass

from django.db.models import Q, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from .errors import LifecycleError

MAX_FILTER_LENGTH = 4000
MAX_CLAUSES = 20

_TOKEN = re.compile(r"""\s*(?:
    (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<number>-?[0-9]+)
  | (?P<op>!=|<>|<=|>=|=|<|>)
  | (?P<lparen>\() | (?P<rparen>\)) | (?P<comma>,)
  | (?P<word>(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)(?:\.(?:`[^`]+`|[A-Za-z0-9_][A-Za-z0-9_.\-/]*))?)
)""", re.VERBOSE)

STRING_COMPARATORS = frozenset({"=", "!=", "LIKE", "ILIKE", "IN", "NOT IN"})
NUMBER_COMPARATORS = frozenset({"=", "!=", "<", "<=", ">", ">=", "IN", "NOT IN"})


@dataclass(frozen=True)
class Clause:
    kind: str       # "attribute" or "tag"
    key: str        # the attribute's name (name, run_id, ...) or the tag's key
    comparator: str
    value: object   # str, int, or a tuple of them for IN


def _refuse(message: str) -> LifecycleError:
    return LifecycleError(f"filter: {message}", "filter")


def _tokens(text: str) -> list[tuple[str, str, int]]:
    tokens, position = [], 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise _refuse(f"cannot read {text[position:position + 20].strip()!r} at character {position + 1}")
        kind = match.lastgroup
        tokens.append((kind, match.group(kind), match.start(kind)))
        position = match.end()
    return tokens


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def _identifier(word: str) -> tuple[str, str]:
    head, dot, rest = word.partition(".")
    head = head.strip("`")
    if dot:
        if head.lower() in ("tags", "tag"):
            return "tag", rest.strip("`")
        if head.lower() in ("attributes", "attribute", "attr"):
            return "attribute", rest.strip("`").lower()
        raise _refuse(f"{word!r}: expected name, run_id, source_path, version_number or tags.<key>")
    return "attribute", head.lower()


def parse(text: str, attributes: dict[str, str]) -> list[Clause]:
    """`attributes`: the attribute names this search knows -> "string" or "number"."""
    text = (text or "").strip()
    if not text:
        return []
    if len(text) > MAX_FILTER_LENGTH:
        raise _refuse(f"at most {MAX_FILTER_LENGTH} characters")
    tokens = _tokens(text)
    clauses, index = [], 0

    def take(expected: str, what: str):
        nonlocal index
        if index >= len(tokens) or tokens[index][0] != expected:
            where = f"at character {tokens[index][2] + 1}" if index < len(tokens) else "at the end"
            raise _refuse(f"{what} expected {where}")
        index += 1
        return tokens[index - 1][1]

    def value_of(kind_wanted: str):
        nonlocal index
        if index < len(tokens) and tokens[index][0] == "string" and kind_wanted == "string":
            index += 1
            return _unquote(tokens[index - 1][1])
        if index < len(tokens) and tokens[index][0] == "number" and kind_wanted == "number":
            index += 1
            return int(tokens[index - 1][1])
        if index < len(tokens) and tokens[index][0] == "string" and kind_wanted == "number":
            body = _unquote(tokens[index][1])
            if body.isdigit():
                index += 1
                return int(body)
        where = f"at character {tokens[index][2] + 1}" if index < len(tokens) else "at the end"
        raise _refuse(("a quoted string" if kind_wanted == "string" else "a whole number") + f" expected {where}")

    while True:
        kind, key = _identifier(take("word", "an identifier (name, tags.<key>, ...)"))
        if kind == "attribute" and key not in attributes:
            raise _refuse(f"{key!r} is not searchable here; expected one of "
                          f"{', '.join(sorted(attributes))} or tags.<key>")
        value_kind = attributes.get(key, "string") if kind == "attribute" else "string"
        comparator = None
        if index < len(tokens) and tokens[index][0] == "op":
            comparator = {"<>": "!="}.get(tokens[index][1], tokens[index][1])
            index += 1
        elif index < len(tokens) and tokens[index][0] == "word":
            word = tokens[index][1].upper()
            index += 1
            if word == "NOT" and index < len(tokens) and tokens[index][1].upper() == "IN":
                index += 1
                comparator = "NOT IN"
            elif word in ("LIKE", "ILIKE", "IN"):
                comparator = word
        allowed = NUMBER_COMPARATORS if value_kind == "number" else STRING_COMPARATORS
        if comparator not in allowed:
            raise _refuse(f"{key}: the comparator must be one of {', '.join(sorted(allowed))}")
        if comparator in ("IN", "NOT IN"):
            take("lparen", "'('")
            values = [value_of(value_kind)]
            while index < len(tokens) and tokens[index][0] == "comma":
                index += 1
                values.append(value_of(value_kind))
            take("rparen", "')'")
            value = tuple(values)
        else:
            value = value_of(value_kind)
        clauses.append(Clause(kind, key, comparator, value))
        if len(clauses) > MAX_CLAUSES:
            raise _refuse(f"at most {MAX_CLAUSES} clauses")
        if index >= len(tokens):
            return clauses
        joiner = tokens[index]
        if joiner[0] != "word" or joiner[1].upper() != "AND":
            raise _refuse(f"AND expected at character {joiner[2] + 1} (MLflow's filters have no OR)")
        index += 1


def like_pattern(pattern: str) -> str:
    """SQL LIKE ('%' any run, '_' one character) as an anchored regular expression."""
    parts = ["^"]
    for character in pattern:
        parts.append(".*" if character == "%" else "." if character == "_" else re.escape(character))
    return "".join(parts) + "$"


def condition(field: str, comparator: str, value) -> Q:
    """A Q for one clause on `field` (a model field or an annotation)."""
    if comparator == "=":
        return Q(**{field: value})
    if comparator == "!=":
        return ~Q(**{field: value})
    if comparator == "LIKE":
        return Q(**{f"{field}__regex": like_pattern(value)})
    if comparator == "ILIKE":
        return Q(**{f"{field}__iregex": like_pattern(value)})
    if comparator == "IN":
        return Q(**{f"{field}__in": value})
    if comparator == "NOT IN":
        return ~Q(**{f"{field}__in": value})
    lookup = {"<": "lt", "<=": "lte", ">": "gt", ">=": "gte"}[comparator]
    return Q(**{f"{field}__{lookup}": value})


def apply(queryset, clauses: list[Clause], fields: dict[str, str], tags_field: str = "tags",
          synthetic_tags: dict[str, str] | None = None):
    """Filter `queryset`: attribute clauses on `fields` (attribute -> model field), tag clauses on the
    JSON field `tags_field` (a missing tag is never equal, like, or in anything, and differs from
    everything), and `synthetic_tags`
    (tag key -> model field) for the tags the API derives from fields."""
    for number, clause in enumerate(clauses):
        if clause.kind == "attribute":
            queryset = queryset.filter(condition(fields[clause.key], clause.comparator, clause.value))
        elif synthetic_tags and clause.key in synthetic_tags:
            queryset = queryset.filter(condition(synthetic_tags[clause.key], clause.comparator, clause.value))
        else:
            # Cast: plain text comparisons (the JSON key lookups would read the value as JSON).
            annotation = f"mlflow_tag_{number}"
            missing = Q(**{f"{annotation}__isnull": True})
            matches = condition(annotation, clause.comparator, clause.value)
            # A missing tag differs from every value (MLflow's client excludes prompts from model searches
            # with tags.`mlflow.prompt.is_prompt` != 'true', which must keep models without that tag).
            wanted = (missing | matches) if clause.comparator in ("!=", "NOT IN") else (~missing & matches)
            queryset = queryset.annotate(**{annotation: Cast(KeyTextTransform(clause.key, tags_field), TextField())}).filter(wanted)
    return queryset


def ordering(order_by: list[str], columns: dict[str, str], default: list[str]) -> list[str]:
    """MLflow's order_by (["name ASC", "last_updated_timestamp DESC"]) as Django orderings."""
    result = []
    for item in order_by:
        words = str(item).split()
        if not words or len(words) > 2 or words[0] not in columns \
                or (len(words) == 2 and words[1].upper() not in ("ASC", "DESC")):
            raise LifecycleError(f"order_by: {item!r} is not '<column> [ASC|DESC]' with a column among "
                                 f"{', '.join(sorted(columns))}", "order_by")
        descending = len(words) == 2 and words[1].upper() == "DESC"
        result.append(("-" if descending else "") + columns[words[0]])
    return result + [field for field in default if field.lstrip("-") not in {r.lstrip("-") for r in result}]


def page_offset(token: str) -> int:
    """The offset a page token stands for: MLflow's tokens are opaque; ours are base64 of {"offset": n}."""
    if not token:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))["offset"]
    except (binascii.Error, UnicodeError, ValueError, TypeError, KeyError):
        raise LifecycleError("page_token: not a token this server gave", "page_token") from None
    if not isinstance(offset, int) or offset < 0:
        raise LifecycleError("page_token: not a token this server gave", "page_token")
    return offset


def page_token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode("ascii")
