"""The model card of a version: what a certifier reads about it, in one document. The model and its
intended use, the version and its architecture, the lineage (the Slurm job with its GPU-hours, the datasets
with their content hashes, the code revision, the hyperparameters, the parent), the evaluations, the
approvals with who decided and when, every file with its SHA-256, the signature with the public key that
checks it, the last verification, the stage and alias history and the deployments.

card(version) gathers it as a dict (the JSON export); render_markdown and render_html write it for people:
the HTML is one standalone printable page (its style inline, no script, nothing loaded from elsewhere).
export() is the one way the API, the portal and the command line hand a card out: it records
lifecycle.card.export.
"""

from __future__ import annotations

import json

from django.db.models import Prefetch
from django.utils import timezone
from django.utils.html import escape

from appliance import audit

from .errors import LifecycleError
from .models import AliasHistory, ModelVersion, PromotionRequest, StageHistory

CARD_FORMAT = 1
FORMATS = ("json", "md", "html")
CONTENT_TYPES = {"json": "application/json", "md": "text/markdown; charset=utf-8", "html": "text/html; charset=utf-8"}


def _when(value) -> str | None:
    return value.isoformat() if value else None


def _username(user) -> str | None:
    return user.get_username() if user is not None else None


def _card_queryset():
    """Everything a card shows in a fixed number of queries, however many files, evaluations or requests."""
    return ModelVersion.objects.select_related("model__owner", "registered_by", "parent__model").prefetch_related(
        "artifacts", "aliases",
        Prefetch("evaluations", queryset=_evaluations()),
        Prefetch("requests", queryset=PromotionRequest.objects.select_related("requested_by", "decided_by")
                 .prefetch_related("evidence").order_by("created", "pk")),
        Prefetch("stage_history", queryset=StageHistory.objects.order_by("started", "pk")),
        Prefetch("alias_history", queryset=AliasHistory.objects.order_by("started", "pk")),
        Prefetch("deployments", queryset=_deployments()),
    )


def _evaluations():
    from .models import Evaluation

    return Evaluation.objects.select_related("created_by").order_by("created", "pk")


def _deployments():
    from .models import Deployment

    return Deployment.objects.select_related("appliance", "created_by").order_by("created", "pk")


def _public_key(version: ModelVersion) -> str:
    """The PEM of the key that checks the signature; "" for an unsigned version."""
    if not version.signature:
        return ""
    from . import signing

    return signing.public_key_pem()


def _signature_bundle(text: str):
    """The model-signing bundle as JSON when it is JSON (it is), else the text as stored."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def card(version: ModelVersion) -> dict:
    """The card of `version`, read again with everything it shows (a caller's stale instance does not matter)."""
    version = _card_queryset().get(pk=version.pk)
    model = version.model
    artifacts = list(version.artifacts.all())
    evaluations = list(version.evaluations.all())
    return {
        "card_format": CARD_FORMAT,
        "generated": timezone.now().isoformat(),
        "model": {
            "name": model.name, "owner": _username(model.owner), "description": model.description,
            "tags": model.tags, "license": model.license, "intended_use": model.intended_use,
            "risk_class": model.risk_class,
        },
        "version": {
            "number": version.number, "stage": version.stage, "description": version.description,
            "tags": version.tags, "source": version.source, "storage_path": version.storage_path,
            "format": version.format, "architecture": version.architecture,
            "architecture_error": version.architecture_error,
            "registered": _when(version.created), "registered_by": _username(version.registered_by),
            "aliases": sorted(alias.name for alias in version.aliases.all()),
        },
        "lineage": {
            "training_job": version.training_job, "training": version.training,
            "code_revision": version.code_revision, "hyperparameters": version.hyperparameters,
            "metrics": version.metrics, "run_id": version.run_id,
            "parent": (f"{version.parent.model.name}/{version.parent.number}" if version.parent else None),
        },
        "datasets": version.datasets,
        "evaluations": [{
            "id": evaluation.pk, "name": evaluation.name, "datasets": evaluation.datasets,
            "metrics": evaluation.metrics, "job": evaluation.job, "passed": evaluation.passed,
            "notes": evaluation.notes, "created": _when(evaluation.created),
            "created_by": _username(evaluation.created_by),
        } for evaluation in evaluations],
        "approvals": [{
            "id": request.pk, "target_stage": request.target_stage, "alias": request.alias, "state": request.state,
            "requested_by": request.requested_by_username, "requested": _when(request.created),
            "reason": request.reason, "evidence": sorted(evaluation.pk for evaluation in request.evidence.all()),
            "decided_by": request.decided_by_username or None, "decided": _when(request.decided_at),
            "decision_reason": request.decision_reason, "expires": _when(request.expires_at),
        } for request in version.requests.all()],
        "artifacts": [{"path": artifact.path, "size": artifact.size, "sha256": artifact.sha256,
                       "state": artifact.state} for artifact in artifacts],
        "total_size": sum(artifact.size for artifact in artifacts),
        "signature": {
            "signed": _when(version.signed_at),
            "bundle": _signature_bundle(version.signature) if version.signature else None,
            "public_key": _public_key(version),
        },
        "verification": {
            "state": version.verification, "verified": _when(version.verified_at),
            "full": version.verified_full, "detail": version.verification_detail,
        },
        "history": {
            "stages": [{"stage": held.stage, "started": _when(held.started), "started_by": held.started_by,
                        "ended": _when(held.ended), "ended_by": held.ended_by, "request": held.request_id,
                        "reason": held.reason}
                       for held in version.stage_history.all()],
            "aliases": [{"alias": held.name, "started": _when(held.started), "started_by": held.started_by,
                         "ended": _when(held.ended), "ended_by": held.ended_by}
                        for held in version.alias_history.all()],
        },
        "deployments": [{
            "id": deployment.pk, "name": deployment.name, "state": deployment.state, "runtime": deployment.runtime,
            "appliance": deployment.appliance.name, "pool": deployment.pool, "placement": deployment.placement,
            "created": _when(deployment.created), "created_by": _username(deployment.created_by),
        } for deployment in version.deployments.all()],
    }


# --- Markdown ---------------------------------------------------------------------------------------------

def _md(value) -> str:
    """A value inside a Markdown table cell or line: one line, pipes and markup characters escaped."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        value = json.dumps(value, sort_keys=True, ensure_ascii=False)
    text = " ".join(str(value).split())
    for character in "\\`*_[]<>|#":
        text = text.replace(character, "\\" + character)
    return text


def _md_table(header: list[str], rows: list[list]) -> list[str]:
    if not rows:
        return ["(none)", ""]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows]
    return [*lines, ""]


def _end(training: dict):
    """The job's end; a job that had not ended when last asked has none (its time limit is not an end)."""
    if training.get("end") or not training.get("limit_end"):
        return training.get("end")
    return f"not ended when last asked (time limit {training['limit_end']})"


def _md_fields(pairs: list[tuple[str, object]]) -> list[str]:
    return [*(f"- **{label}:** {_md(value)}" for label, value in pairs), ""]


def render_markdown(card: dict) -> str:
    model, version, lineage = card["model"], card["version"], card["lineage"]
    training = lineage["training"] or {}
    lines = [f"# Model card: {_md(model['name'])} version {version['number']}", "",
             f"Generated {card['generated']} by the appliance's model registry.", "", "## Model", ""]
    lines += _md_fields([("Owner", model["owner"]), ("Description", model["description"]),
                         ("License", model["license"]), ("Intended use", model["intended_use"]),
                         ("Risk class", model["risk_class"]), ("Tags", model["tags"])])
    lines += ["## Version", ""]
    lines += _md_fields([("Stage", version["stage"]), ("Aliases", ", ".join(version["aliases"])),
                         ("Description", version["description"]), ("Format", version["format"]),
                         ("Source", version["source"]), ("Stored at", version["storage_path"]),
                         ("Registered", version["registered"]), ("Registered by", version["registered_by"]),
                         ("Architecture", version["architecture"] or version["architecture_error"]),
                         ("Tags", version["tags"])])
    lines += ["## Lineage", ""]
    lines += _md_fields([("Training job", lineage["training_job"]), ("Job user", training.get("user")),
                         ("Nodes", ", ".join(training.get("nodes") or [])), ("GPUs", training.get("gpus")),
                         ("Start", training.get("start")), ("End", _end(training)), ("Job state", training.get("state")),
                         ("GPU-hours", training.get("gpu_hours")), ("Efficiency", training.get("efficiency")),
                         ("Code revision", lineage["code_revision"]), ("Parent", lineage["parent"]),
                         ("Hyperparameters", lineage["hyperparameters"]), ("Metrics", lineage["metrics"])])
    lines += ["### Datasets", ""]
    lines += _md_table(["Name", "URI", "SHA-256"],
                       [[d.get("name"), d.get("uri"), d.get("sha256")] for d in card["datasets"]])
    lines += ["## Evaluations", ""]
    lines += _md_table(["#", "Name", "Metrics", "Passed", "Job", "Datasets", "By", "When"],
                       [[e["id"], e["name"], e["metrics"], e["passed"], e["job"],
                         ", ".join(f"{d.get('name')} ({d.get('sha256')})" for d in e["datasets"]),
                         e["created_by"], e["created"]] for e in card["evaluations"]])
    lines += ["## Approvals", ""]
    lines += _md_table(["#", "To", "State", "Requested by", "Requested", "Reason", "Evidence", "Decided by",
                        "Decided", "Decision"],
                       [[a["id"], a["target_stage"], a["state"], a["requested_by"], a["requested"], a["reason"],
                         ", ".join(f"#{pk}" for pk in a["evidence"]), a["decided_by"], a["decided"],
                         a["decision_reason"]] for a in card["approvals"]])
    lines += [f"## Artifacts ({len(card['artifacts'])} files, {card['total_size']} bytes)", ""]
    lines += _md_table(["Path", "Size", "SHA-256", "State"],
                       [[a["path"], a["size"], a["sha256"], a["state"]] for a in card["artifacts"]])
    signature, verification = card["signature"], card["verification"]
    lines += ["## Signature", ""]
    lines += _md_fields([("Signed", signature["signed"])])
    if signature["bundle"] is not None:
        lines += ["Signature bundle (OpenSSF model signing):", "", "```json",
                  json.dumps(signature["bundle"], indent=2, sort_keys=True).replace("```", "` ` `"), "```", ""]
    if signature["public_key"]:
        lines += ["Public key:", "", "```", signature["public_key"].strip(), "```", ""]
    lines += ["## Verification", ""]
    lines += _md_fields([("State", verification["state"]), ("Verified", verification["verified"]),
                         ("Full re-hash", verification["full"]), ("Detail", verification["detail"])])
    lines += ["## Stage history", ""]
    lines += _md_table(["Stage", "From", "By", "Until", "Ended by", "Request", "Reason"],
                       [[h["stage"], h["started"], h["started_by"], h["ended"], h["ended_by"],
                         f"#{h['request']}" if h["request"] else None, h.get("reason") or None]
                        for h in card["history"]["stages"]])
    lines += ["## Alias history", ""]
    lines += _md_table(["Alias", "From", "By", "Until", "Ended by"],
                       [[h["alias"], h["started"], h["started_by"], h["ended"], h["ended_by"]]
                        for h in card["history"]["aliases"]])
    lines += ["## Deployments", ""]
    lines += _md_table(["Service", "State", "Runtime", "Appliance", "Pool", "Placement", "By", "When"],
                       [[d["name"], d["state"], d["runtime"], d["appliance"], d["pool"],
                         ", ".join(f"{p.get('node')}:{p.get('gpu')}" + (f" {p['profile']}" if p.get("profile") else "")
                                   for p in d["placement"] if isinstance(p, dict)),
                         d["created_by"], d["created"]] for d in card["deployments"]])
    return "\n".join(lines).rstrip() + "\n"


# --- HTML ---------------------------------------------------------------------------------------------------

STYLE = """
body { font: 11pt/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 60em; padding: 0 1em; color: #111; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { font-size: 1.2em; margin-top: 1.6em;
  border-bottom: 1px solid #999; } h3 { font-size: 1em; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .2em 1em; } dt { font-weight: 600; }
dd { margin: 0; overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; font-size: .9em; } th, td { border: 1px solid #bbb;
  padding: .25em .4em; text-align: left; vertical-align: top; overflow-wrap: anywhere; }
code, pre { font: .85em/1.3 ui-monospace, monospace; } pre { white-space: pre-wrap; overflow-wrap: anywhere;
  border: 1px solid #ccc; padding: .5em; }
.muted { color: #555; }
@media print { body { margin: 0; max-width: none; } h2 { break-after: avoid; } tr { break-inside: avoid; } }
"""


def _h(value) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return f"<code>{escape(json.dumps(value, sort_keys=True, ensure_ascii=False))}</code>"
    return str(escape(str(value)))


def _h_fields(pairs: list[tuple[str, object]]) -> str:
    return "<dl>" + "".join(f"<dt>{escape(label)}</dt><dd>{_h(value)}</dd>" for label, value in pairs) + "</dl>"


def _h_table(header: list[str], rows: list[list], code_columns: frozenset[int] = frozenset()) -> str:
    if not rows:
        return '<p class="muted">(none)</p>'
    head = "".join(f"<th>{escape(title)}</th>" for title in header)
    body = "".join(
        "<tr>" + "".join(f"<td><code>{_h(cell)}</code></td>" if index in code_columns and cell else f"<td>{_h(cell)}</td>"
                         for index, cell in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(card: dict, style_nonce: str = "") -> str:
    """A standalone printable page. Served by the appliance, its one <style> carries the request's
    Content-Security-Policy nonce; saved to a file, it opens anywhere without the appliance."""
    model, version, lineage = card["model"], card["version"], card["lineage"]
    training = lineage["training"] or {}
    title = f"Model card: {model['name']} version {version['number']}"
    nonce = f' nonce="{escape(style_nonce)}"' if style_nonce else ""
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style{nonce}>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">Generated {escape(card["generated"])} by the appliance\'s model registry.</p>',
        "<h2>Model</h2>",
        _h_fields([("Owner", model["owner"]), ("Description", model["description"]), ("License", model["license"]),
                   ("Intended use", model["intended_use"]), ("Risk class", model["risk_class"]),
                   ("Tags", model["tags"])]),
        "<h2>Version</h2>",
        _h_fields([("Stage", version["stage"]), ("Aliases", ", ".join(version["aliases"])),
                   ("Description", version["description"]), ("Format", version["format"]),
                   ("Source", version["source"]), ("Stored at", version["storage_path"]),
                   ("Registered", version["registered"]), ("Registered by", version["registered_by"]),
                   ("Architecture", version["architecture"] or version["architecture_error"]),
                   ("Tags", version["tags"])]),
        "<h2>Lineage</h2>",
        _h_fields([("Training job", lineage["training_job"]), ("Job user", training.get("user")),
                   ("Nodes", ", ".join(training.get("nodes") or [])), ("GPUs", training.get("gpus")),
                   ("Start", training.get("start")), ("End", _end(training)), ("Job state", training.get("state")),
                   ("GPU-hours", training.get("gpu_hours")), ("Efficiency", training.get("efficiency")),
                   ("Code revision", lineage["code_revision"]), ("Parent", lineage["parent"]),
                   ("Hyperparameters", lineage["hyperparameters"]), ("Metrics", lineage["metrics"])]),
        "<h3>Datasets</h3>",
        _h_table(["Name", "URI", "SHA-256"], [[d.get("name"), d.get("uri"), d.get("sha256")] for d in card["datasets"]],
                 frozenset({2})),
        "<h2>Evaluations</h2>",
        _h_table(["#", "Name", "Metrics", "Passed", "Job", "Datasets", "By", "When"],
                 [[e["id"], e["name"], e["metrics"], e["passed"], e["job"],
                   ", ".join(f"{d.get('name')} ({d.get('sha256')})" for d in e["datasets"]), e["created_by"],
                   e["created"]] for e in card["evaluations"]]),
        "<h2>Approvals</h2>",
        _h_table(["#", "To", "State", "Requested by", "Requested", "Reason", "Evidence", "Decided by", "Decided",
                  "Decision"],
                 [[a["id"], a["target_stage"], a["state"], a["requested_by"], a["requested"], a["reason"],
                   ", ".join(f"#{pk}" for pk in a["evidence"]), a["decided_by"], a["decided"], a["decision_reason"]]
                  for a in card["approvals"]]),
        f"<h2>Artifacts ({len(card['artifacts'])} files, {card['total_size']} bytes)</h2>",
        _h_table(["Path", "Size", "SHA-256", "State"],
                 [[a["path"], a["size"], a["sha256"], a["state"]] for a in card["artifacts"]], frozenset({2})),
        "<h2>Signature</h2>",
        _h_fields([("Signed", card["signature"]["signed"])]),
    ]
    if card["signature"]["bundle"] is not None:
        bundle = json.dumps(card["signature"]["bundle"], indent=2, sort_keys=True)
        parts.append(f"<h3>Signature bundle (OpenSSF model signing)</h3><pre>{escape(bundle)}</pre>")
    if card["signature"]["public_key"]:
        parts.append(f"<h3>Public key</h3><pre>{escape(card['signature']['public_key'].strip())}</pre>")
    verification = card["verification"]
    parts += [
        "<h2>Verification</h2>",
        _h_fields([("State", verification["state"]), ("Verified", verification["verified"]),
                   ("Full re-hash", verification["full"]), ("Detail", verification["detail"])]),
        "<h2>Stage history</h2>",
        _h_table(["Stage", "From", "By", "Until", "Ended by", "Request", "Reason"],
                 [[h["stage"], h["started"], h["started_by"], h["ended"], h["ended_by"],
                   f"#{h['request']}" if h["request"] else None, h.get("reason") or None]
                  for h in card["history"]["stages"]]),
        "<h2>Alias history</h2>",
        _h_table(["Alias", "From", "By", "Until", "Ended by"],
                 [[h["alias"], h["started"], h["started_by"], h["ended"], h["ended_by"]]
                  for h in card["history"]["aliases"]]),
        "<h2>Deployments</h2>",
        _h_table(["Service", "State", "Runtime", "Appliance", "Pool", "Placement", "By", "When"],
                 [[d["name"], d["state"], d["runtime"], d["appliance"], d["pool"],
                   ", ".join(f"{p.get('node')}:{p.get('gpu')}" + (f" {p['profile']}" if p.get("profile") else "")
                             for p in d["placement"] if isinstance(p, dict)),
                   d["created_by"], d["created"]] for d in card["deployments"]]),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def export(version: ModelVersion, form: str, *, user=None, style_nonce: str = "") -> tuple[str, str, str]:
    """(content, content type, file name) of the version's card in `form` (json, md, html), after recording
    lifecycle.card.export. A format it does not know: LifecycleError naming the field."""
    if form not in FORMATS:
        raise LifecycleError(f"format: {form!r} is not one of {', '.join(FORMATS)}", "format")
    content = card(version)
    if form == "json":
        text = json.dumps(content, indent=2, sort_keys=False, ensure_ascii=False)
    elif form == "md":
        text = render_markdown(content)
    else:
        text = render_html(content, style_nonce=style_nonce)
    audit.record("lifecycle.card.export", target=version, actor=user, details={
        "format": form, "model": version.model.name, "version": version.number,
        "artifacts": len(content["artifacts"]), "signed": bool(content["signature"]["signed"]),
    })
    return text, CONTENT_TYPES[form], f"model-card-{version.model.name}-v{version.number}.{form}"
