"""manage.py models register NAME --source DIR [lineage options]

Registers a version of model NAME from its files on the appliance's filesystems: every file hashed, the
format and architecture read, the version signed. From a Slurm batch script the job is the lineage:

    #SBATCH --gres=gpu:8
    torchrun train.py --out /lustre/models/llama-ft/run-$SLURM_JOB_ID
    appliance models register llama-ft --source /lustre/models/llama-ft/run-$SLURM_JOB_ID \\
        --dataset name=wiki,uri=/lustre/data/wiki,sha256=... --code-revision "$(git rev-parse HEAD)"

The job id comes from SLURM_JOB_ID (or --job; --no-job for none), and the scheduler says who ran it, where,
on how many GPUs, when. APPLIANCE_TOKEN names the account registering (else the appliance itself).
With --url (or APPLIANCE_URL) the version is registered through the appliance's API instead of its
database, as a compute node without database access does: the token is then required.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request

from django.core.management.base import CommandError
from django.utils.translation import gettext as _

from .common import TOKEN_VARIABLE, acting, acting_user, dataset, number_value, print_json, typed_value

JOB_VARIABLE = "SLURM_JOB_ID"
URL_VARIABLE = "APPLIANCE_URL"
URL = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$")
API_PATH = "/api/v1/lifecycle/versions/"
APPLIANCE_NAME = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")


def add_arguments(parser, subcommand: str = "register") -> None:
    parser.add_argument("name", metavar="NAME", help=_("the registered model (made when it does not exist)"))
    parser.add_argument("--source", required=True, metavar="PATH",
                        help=_("the model's directory (or one file): an absolute path or file:// URI inside an "
                               "artifact root"))
    job = parser.add_mutually_exclusive_group()
    job.add_argument("--job", metavar="ID", help=_("the Slurm job that trained it (default: $SLURM_JOB_ID)"))
    job.add_argument("--no-job", action="store_true", help=_("no training job, even inside one"))
    parser.add_argument("--dataset", action="append", type=dataset, default=[], metavar="name=N,uri=U[,sha256=H]",
                        help=_("a dataset the training read (repeat for several)"))
    parser.add_argument("--hash-datasets", action="store_true",
                        help=_("hash each --dataset given without sha256 from its files (its uri inside an artifact "
                               "root): a file's SHA-256, a directory's manifest of them"))
    parser.add_argument("--code-revision", default="", metavar="REV", help=_("the training code's revision"))
    parser.add_argument("--hyperparameter", action="append", type=typed_value, default=[], metavar="KEY=VALUE")
    parser.add_argument("--metric", action="append", type=number_value, default=[], metavar="NAME=NUMBER")
    parser.add_argument("--tag", action="append", type=typed_value, default=[], metavar="KEY=VALUE")
    parser.add_argument("--parent", metavar="NAME/VERSION", help=_("the model it was fine-tuned from"))
    parser.add_argument("--description", default="")
    parser.add_argument("--appliance", metavar="NAME", help=_("the appliance whose Slurm ran the job (when several)"))
    parser.add_argument("--url", metavar="URL",
                        help=_("register through this appliance's API (default: $APPLIANCE_URL, else the database)"))
    parser.add_argument("--json", action="store_true", help=_("print the version as JSON"))


def job_from(options) -> str:
    """The training job: --job, else $SLURM_JOB_ID (checked like any input), else none."""
    from appliance.lifecycle.services import JOB

    if options["no_job"]:
        return ""
    if options["job"] is not None:
        if not JOB.fullmatch(options["job"]):
            raise CommandError(_("--job: %(job)r is not a Slurm job id") % {"job": options["job"]})
        return options["job"]
    value = os.environ.get(JOB_VARIABLE, "")
    if value and not JOB.fullmatch(value):
        raise CommandError(_("%(variable)s: %(value)r is not a Slurm job id") % {"variable": JOB_VARIABLE,
                                                                                   "value": value[:40]})
    return value


def _payload(options, job: str) -> dict:
    return {"model": options["name"], "source": options["source"], "job": job, "datasets": options["dataset"],
            "code_revision": options["code_revision"], "hyperparameters": dict(options["hyperparameter"]),
            "metrics": dict(options["metric"]), "parent": options["parent"] or "",
            "description": options["description"], "tags": {k: str(v) for k, v in options["tag"]}}


def _appliance(name):
    if name is None:
        return None
    from appliance.inventory.models import Appliance

    if not APPLIANCE_NAME.fullmatch(name):
        raise CommandError(_("--appliance: %(name)r is not an appliance name") % {"name": name})
    found = Appliance.objects.filter(name=name).first()
    if found is None:
        raise CommandError(_("--appliance: no appliance %(name)s") % {"name": name})
    return found


def describe(version) -> dict:
    training = version.training or {}
    return {"model": version.model.name, "version": version.number, "stage": version.stage,
            "format": version.format, "storage_path": version.storage_path,
            "files": version.artifacts.count(), "bytes": sum(a.size for a in version.artifacts.all()),
            "params": (version.architecture or {}).get("params"), "signed": bool(version.signature),
            "job": version.training_job, "job_user": training.get("user", ""), "nodes": training.get("nodes", []),
            "gpus": training.get("gpus")}


def _print(command, data: dict, as_json: bool) -> None:
    if as_json:
        print_json(command, data)
        return
    line = _("registered %(model)s v%(version)s: %(files)s files, %(bytes)s bytes, %(format)s, %(signed)s") % {
        **data, "signed": _("signed") if data["signed"] else _("not signed")}
    command.stdout.write(line)
    if data["format"] == "other":
        from appliance.lifecycle.models import WEIGHT_FORMATS

        command.stderr.write(_("warning: no weight files among them (%(formats)s): this version holds "
                               "configuration only and cannot be deployed") % {"formats": WEIGHT_FORMATS})
    if data["job"]:
        command.stdout.write(_("lineage: Slurm job %(job)s of %(user)s on %(nodes)s, %(gpus)s GPUs") % {
            "job": data["job"], "user": data["job_user"] or "?", "nodes": ", ".join(data["nodes"]) or "?",
            "gpus": data["gpus"] if data["gpus"] is not None else "?"})


def _refusal(body: bytes) -> str:
    """The API's error body as one line: its message, or each field's messages."""
    try:
        error = json.loads(body[:100_000]).get("error") or {}
    except (ValueError, AttributeError):
        return body[:500].decode(errors="replace")
    lines = []
    for field, messages in (error.get("fields") or {}).items():
        text = " ".join(map(str, messages if isinstance(messages, list) else [messages]))
        lines.append(text if text.startswith(f"{field}:") else f"{field}: {text}")
    if lines:
        return "; ".join(lines)[:2000]
    return str(error.get("message", ""))[:2000]


def _post(command, url: str, payload: dict, options) -> int:
    if not URL.fullmatch(url):
        raise CommandError(_("--url: %(url)r is not an http(s) URL of the appliance") % {"url": url[:200]})
    token = os.environ.get(TOKEN_VARIABLE, "").strip()
    if not token:
        raise CommandError(_("registering through the API needs %(variable)s (your API token)") % {
            "variable": TOKEN_VARIABLE})
    if options["appliance"]:
        raise CommandError(_("--appliance: not with --url; the appliance answering asks its own Slurm"))
    request = urllib.request.Request(url.rstrip("/") + API_PATH, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Authorization": f"Token {token}", "Content-Type": "application/json",
                                              "Accept": "application/json"})
    try:
        # No proxy from the environment: the token goes to the appliance named, nowhere else. The timeout
        # allows for the appliance hashing a large model before it answers.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=3600) as response:
            body = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise CommandError(_("%(url)s answered %(status)s: %(detail)s") % {
            "url": url, "status": exc.code, "detail": _refusal(exc.read())}) from None
    except (urllib.error.URLError, OSError) as exc:
        raise CommandError(_("%(url)s: %(error)s") % {"url": url, "error": getattr(exc, "reason", exc)}) from None
    if options["json"]:
        print_json(command, body)
    else:
        lineage = body.get("lineage") or {}
        _print(command, {"model": body.get("model", payload["model"]), "version": body.get("number", "?"),
                         "files": len(body.get("artifacts") or []),
                         "bytes": sum(a.get("size", 0) for a in body.get("artifacts") or []),
                         "format": body.get("format", "?"), "signed": bool(body.get("signed")),
                         "job": lineage.get("training_job", ""),
                         "job_user": (lineage.get("training") or {}).get("user", ""),
                         "nodes": (lineage.get("training") or {}).get("nodes", []),
                         "gpus": (lineage.get("training") or {}).get("gpus")}, False)
        command.stdout.write(_("through %(url)s") % {"url": url})
    return 0


def hash_datasets(command, datasets: list[dict]) -> None:
    """Fill in the content hash of each dataset given without one, from its files on this machine."""
    from appliance.lifecycle import services
    from appliance.lifecycle.errors import LifecycleError

    for index, item in enumerate(datasets):
        if item.get("sha256"):
            continue
        if not item.get("uri"):
            raise CommandError(_("--dataset %(name)s: a uri is needed to hash it") % {"name": item["name"]})
        command.stdout.write(_("hashing dataset %(name)s (%(uri)s) ...") % item)
        try:
            item["sha256"] = services.dataset_digest(item["uri"], f"datasets[{index}].uri")
        except LifecycleError as exc:
            raise CommandError(str(exc)) from None


def handle(command, options) -> int:
    job = job_from(options)
    if options["hash_datasets"]:
        hash_datasets(command, options["dataset"])
    payload = _payload(options, job)
    url = options["url"] or os.environ.get(URL_VARIABLE, "")
    if url:
        return _post(command, url, payload, options)
    from appliance.lifecycle import services

    user = acting_user()
    appliance = _appliance(options["appliance"])
    with acting(user):
        version = services.register_version(
            payload["model"], source=payload["source"], user=user, job=job, datasets=payload["datasets"],
            code_revision=payload["code_revision"], hyperparameters=payload["hyperparameters"],
            metrics=payload["metrics"], parent=payload["parent"] or None, description=payload["description"],
            tags=payload["tags"], appliance=appliance)
    _print(command, describe(version), options["json"])
    return 0
