"""Importing another MLflow model registry: its REST API, or an export made of that API's own responses.

Where from:
- `from_rest(url, token)`: pages through `GET <url>/api/2.0/mlflow/registered-models/search` and
  `.../model-versions/search` (Bearer token when given), as MLflow's client does.
- `from_export(path)`: the same responses saved as JSON files. A directory holds
      registered-models.json   the body of GET /api/2.0/mlflow/registered-models/search:
                               {"registered_models": [{name, description, tags: [{key, value}],
                                                       aliases: [{alias, version}], ...}], ...}
      model-versions.json      the body of GET /api/2.0/mlflow/model-versions/search:
                               {"model_versions": [{name, version, source, run_id, description,
                                                    current_stage, tags: [{key, value}], ...}], ...}
  (several pages: registered-models-2.json, model-versions-2.json, ... every file whose name starts so),
  or one file is a single JSON object holding both keys.

What arrives (through services.py, so every model and version is audited and every version's files are
hashed and signed): each model (its description and tags), each version whose `source` resolves under the
appliance's artifact roots (`rewrite` maps the other registry's path prefixes onto this appliance's, e.g.
/mnt/mlflow=/lustre/models), with its description, tags and run id, and the aliases pointing at imported
versions. Every imported version starts at "registered": a stage earned elsewhere is kept as the tag
`mlflow.import.stage`, and production here needs this appliance's approval (the alias "production" is
reported, not set). The original version number is the tag `mlflow.import.version`: a second import of the
same registry finds it and adds nothing (idempotent). A version whose files are not reachable (another URI
scheme, a path outside the roots, a missing directory) is reported and skipped, nothing of it kept; MLflow
prompts (registered models tagged mlflow.prompt.is_prompt) are not models and are skipped.
One audit event lifecycle.mlflow.import records the run: origin, what was created, what was skipped and why.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from appliance.audit import services as audit
from appliance.core.roles import can

from . import services
from .errors import Forbidden, LifecycleError
from .models import Alias, RegisteredModel

IMPORT_VERSION_TAG, IMPORT_STAGE_TAG = "mlflow.import.version", "mlflow.import.stage"
PROMPT_TAG = "mlflow.prompt.is_prompt"
URL = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~%/-]*)?$")
MAX_EXPORT_BYTES = 256 * 1024 * 1024
MAX_PAGE_BYTES = 64 * 1024 * 1024
MAX_PAGES = 10_000
PAGE_SIZE = 1000
RESERVED_PREFIX = "appliance."


@dataclass
class ImportReport:
    origin: str
    models_created: list[str] = field(default_factory=list)
    models_existing: list[str] = field(default_factory=list)
    versions_imported: list[str] = field(default_factory=list)   # "name/original -> name/number"
    versions_existing: list[str] = field(default_factory=list)
    aliases_set: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)             # {model, version, alias, reason}

    def skip(self, reason: str, model: str = "", version: str = "", alias: str = "") -> None:
        self.skipped.append({"model": model, "version": version, "alias": alias, "reason": reason})

    def as_details(self) -> dict:
        cap = 200  # an audit record stays small; the counts are exact
        return {"origin": self.origin,
                "counts": {"models_created": len(self.models_created), "models_existing": len(self.models_existing),
                           "versions_imported": len(self.versions_imported),
                           "versions_existing": len(self.versions_existing), "aliases_set": len(self.aliases_set),
                           "skipped": len(self.skipped)},
                "models_created": self.models_created[:cap], "versions_imported": self.versions_imported[:cap],
                "aliases_set": self.aliases_set[:cap], "skipped": self.skipped[:cap]}


# -- reading the other registry ------------------------------------------------------------------------

def _records(document, key: str, where: str) -> list[dict]:
    if not isinstance(document, dict):
        raise LifecycleError(f"{where}: a JSON object expected (an MLflow search response)", "export")
    records = document.get(key, [])
    if not isinstance(records, list) or not all(isinstance(item, dict) for item in records):
        raise LifecycleError(f"{where}: {key} must be a list of objects", "export")
    return records


def _read_json(path: Path, where: str):
    if path.stat().st_size > MAX_EXPORT_BYTES:
        raise LifecycleError(f"{where}: larger than {MAX_EXPORT_BYTES // 2**20} MiB", "export")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LifecycleError(f"{where}: not JSON ({exc})", "export") from None


def read_export(path: Path) -> tuple[list[dict], list[dict]]:
    """(registered models, model versions) from an export directory or file (see the module's docstring)."""
    path = Path(path)
    if path.is_file():
        document = _read_json(path, str(path))
        return _records(document, "registered_models", str(path)), _records(document, "model_versions", str(path))
    if not path.is_dir():
        raise LifecycleError(f"export: {path} is neither a file nor a directory", "export")
    model_files = sorted(path.glob("registered-models*.json"))
    version_files = sorted(path.glob("model-versions*.json"))
    if not model_files and not version_files:
        raise LifecycleError(f"export: {path} holds no registered-models*.json or model-versions*.json", "export")
    models = [record for file in model_files for record in _records(_read_json(file, str(file)),
                                                                  "registered_models", str(file))]
    versions = [record for file in version_files for record in _records(_read_json(file, str(file)),
                                                                      "model_versions", str(file))]
    return models, versions


def _get(url: str, token: str | None) -> dict:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (the URL is checked: http(s))
            body = response.read(MAX_PAGE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        detail = exc.read(4096).decode("utf-8", "replace")
        try:
            error = json.loads(detail)
            detail = f"{error.get('error_code', '')}: {error.get('message', '')}"
        except (ValueError, AttributeError):
            detail = detail[:200]
        raise LifecycleError(f"url: the registry answered {exc.code} ({detail})", "url") from None
    except (urllib.error.URLError, OSError) as exc:
        raise LifecycleError(f"url: cannot reach the registry ({getattr(exc, 'reason', exc)})", "url") from None
    if len(body) > MAX_PAGE_BYTES:
        raise LifecycleError(f"url: a page larger than {MAX_PAGE_BYTES // 2**20} MiB", "url")
    try:
        return json.loads(body)
    except ValueError:
        raise LifecycleError("url: the registry's answer is not JSON (is this an MLflow server?)", "url") from None


def _all_pages(base: str, endpoint: str, key: str, token: str | None) -> list[dict]:
    records, page_token = [], ""
    for _page in range(MAX_PAGES):
        query = {"max_results": PAGE_SIZE, **({"page_token": page_token} if page_token else {})}
        document = _get(f"{base}/api/2.0/mlflow/{endpoint}?{urllib.parse.urlencode(query)}", token)
        records += _records(document, key, endpoint)
        page_token = document.get("next_page_token") or ""
        if not page_token:
            return records
    raise LifecycleError(f"url: {endpoint} did not end after {MAX_PAGES} pages", "url")


def fetch_rest(url: str, token: str | None) -> tuple[list[dict], list[dict]]:
    url = (url or "").strip().rstrip("/")
    if not URL.fullmatch(url):
        raise LifecycleError("url: an http:// or https:// URL of an MLflow server expected (no query, no "
                             "credentials in it; the token goes in the environment variable)", "url")
    return (_all_pages(url, "registered-models/search", "registered_models", token),
            _all_pages(url, "model-versions/search", "model_versions", token))


# -- bringing it in -------------------------------------------------------------------------------------

def _tags(items) -> dict[str, str]:
    if not isinstance(items, list):
        return {}
    return {item["key"]: "" if item.get("value") is None else str(item.get("value"))
            for item in items if isinstance(item, dict) and isinstance(item.get("key"), str)
            and not item["key"].startswith(RESERVED_PREFIX)}


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def parse_rewrites(pairs: list[str]) -> list[tuple[str, str]]:
    rewrites = []
    for pair in pairs or []:
        old, equals, new = pair.partition("=")
        if not equals or not old.startswith("/") or not new.startswith("/"):
            raise LifecycleError(f"rewrite_source: {pair!r} is not OLD=NEW with two absolute path prefixes",
                                 "rewrite_source")
        rewrites.append((old.rstrip("/") or "/", new.rstrip("/") or "/"))
    return rewrites


def _rewritten(source: str, rewrites: list[tuple[str, str]]) -> str:
    path = source[len("file://"):] if source.startswith("file://") else source
    for old, new in rewrites:
        if path == old or path.startswith(old + "/"):
            return new + path[len(old):]
    return source


def _import_model(name: str, meta: dict, versions: list[dict], *, user, rewrites, report: ImportReport) -> None:
    model = RegisteredModel.objects.filter(name=name).first()
    if model is None:
        try:
            model = services.register_model(name, user=user, description=_text(meta.get("description")),
                                            tags=_tags(meta.get("tags")))
        except LifecycleError as exc:
            report.skip(str(exc), model=name)
            return
        report.models_created.append(name)
    else:
        report.models_existing.append(name)

    numbers = {}   # original version -> number here
    for number, tags in model.versions.values_list("number", "tags"):
        if isinstance(tags, dict) and tags.get(IMPORT_VERSION_TAG):
            numbers[tags[IMPORT_VERSION_TAG]] = number
    for record in sorted(versions, key=lambda item: int(item["version"])):
        original = record["version"]
        if original in numbers:
            report.versions_existing.append(f"{name}/{original}")
            continue
        tags = {**_tags(record.get("tags")), IMPORT_VERSION_TAG: original,
                IMPORT_STAGE_TAG: _text(record.get("current_stage")) or "None"}
        try:
            version = services.register_version(
                name, source=_rewritten(_text(record.get("source")), rewrites), user=user,
                description=_text(record.get("description")), tags=tags, run_id=_text(record.get("run_id")),
                create_model=False)
        except LifecycleError as exc:
            report.skip(str(exc), model=name, version=original)
            continue
        numbers[original] = version.number
        report.versions_imported.append(f"{name}/{original} -> {name}/{version.number}")

    aliases = {}
    for item in meta.get("aliases") or []:
        if isinstance(item, dict) and isinstance(item.get("alias"), str):
            aliases[item["alias"]] = str(item.get("version", ""))
    for record in versions:
        for alias in record.get("aliases") or []:
            if isinstance(alias, str):
                aliases.setdefault(alias, record["version"])
    for alias, original in sorted(aliases.items()):
        if alias in services.RESERVED_ALIASES:
            report.skip(f"alias {alias}: follows the production stage here, which needs this appliance's "
                        "approval (request it for the version)", model=name, version=original, alias=alias)
            continue
        if original not in numbers:
            report.skip(f"alias {alias}: its version {original} was not imported", model=name, version=original,
                        alias=alias)
            continue
        current = Alias.objects.filter(model=model, name=alias).select_related("version").first()
        if current is not None and current.version.number == numbers[original]:
            continue
        try:
            services.set_alias(model, alias, model.versions.get(number=numbers[original]), user=user)
        except LifecycleError as exc:
            report.skip(str(exc), model=name, version=original, alias=alias)
            continue
        report.aliases_set.append(f"{name}@{alias} -> {numbers[original]}")


def _checked_versions(versions: list[dict], report: ImportReport) -> dict[str, list[dict]]:
    by_model: dict[str, list[dict]] = {}
    for record in versions:
        name, original = record.get("name"), str(record.get("version", ""))
        if not isinstance(name, str) or not original.isdigit():
            report.skip("a model version without a name or a version number", model=_text(name), version=original)
            continue
        by_model.setdefault(name, []).append({**record, "version": original})
    return by_model


def import_registry(models: list[dict], versions: list[dict], *, user, origin: str,
                    rewrites: list[tuple[str, str]] = ()) -> ImportReport:
    """Bring `models` and `versions` (MLflow's JSON, as the search endpoints answer) into the registry."""
    if user is not None and not can(user, "models.change"):
        exc = Forbidden(f"{user.get_username()} may not import models (needs models.change)")
        _refused(origin, user, exc)
        raise exc
    report = ImportReport(origin)
    metas = {record["name"]: record for record in models if isinstance(record.get("name"), str)}
    by_model = _checked_versions(versions, report)
    for name in sorted(set(metas) | set(by_model)):
        meta = metas.get(name, {})
        if _tags(meta.get("tags")).get(PROMPT_TAG, "").lower() == "true":
            report.skip("an MLflow prompt, not a model", model=name)
            continue
        _import_model(name, meta, by_model.get(name, []), user=user, rewrites=list(rewrites), report=report)
    audit.record("lifecycle.mlflow.import", actor=user, target_type="mlflow registry", target_name=origin[:255],
                 details=report.as_details())
    return report


def _refused(origin: str, user, exc: LifecycleError) -> None:
    audit.record("lifecycle.mlflow.import", actor=user, target_type="mlflow registry", target_name=origin[:255],
                 outcome="failure", reason=str(exc), details={"origin": origin})


def from_rest(url: str, token: str | None, *, user, rewrites: list[tuple[str, str]] = ()) -> ImportReport:
    try:
        models, versions = fetch_rest(url, token)
    except LifecycleError as exc:
        _refused(url, user, exc)
        raise
    return import_registry(models, versions, user=user, origin=url.strip().rstrip("/"), rewrites=rewrites)


def from_export(path: Path, *, user, rewrites: list[tuple[str, str]] = ()) -> ImportReport:
    origin = str(Path(path).resolve())
    try:
        models, versions = read_export(Path(path))
    except LifecycleError as exc:
        _refused(origin, user, exc)
        raise
    return import_registry(models, versions, user=user, origin=origin, rewrites=rewrites)
