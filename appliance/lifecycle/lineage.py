"""A version's lineage drawn for the portal: datasets -> training job -> this version (and its parent) ->
evaluations -> deployments, laid out in five columns as boxes and curved edges. The layout is computed here
(coordinates, truncated labels) and the template writes it as inline SVG: no script, no external asset,
styled by lifecycle.css (the Content-Security-Policy allows no inline style)."""

from dataclasses import dataclass, field

from django.utils.translation import gettext as _

BOX_WIDTH = 190
COLUMN_GAP = 46
LINE_HEIGHT = 16
BOX_PADDING = 8
BOX_GAP = 14
TOP = 34
LEFT = 8
MAX_PER_COLUMN = 6
LABEL_CHARS = 25


@dataclass
class Box:
    kind: str  # dataset | job | parent | version | evaluation | deployment | none
    lines: list[str]
    title: str  # the full text (the box's tooltip)
    x: int = 0
    y: int = 0
    height: int = 0
    state: str = ""  # a CSS modifier: passed/failed, a deployment's state
    text: list[dict] = field(default_factory=list)  # [{x, y, value, strong}]


def _short(value, limit: int = LABEL_CHARS) -> str:
    text = str(value if value is not None else "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _hours(value) -> str:
    try:
        return f"{float(value):.1f}"
    except (TypeError, ValueError):
        return "-"


def percent(value) -> str:
    """An efficiency as a percentage: the registry stores a fraction (0..1)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "-"
    return f"{number * 100:.0f}%" if number <= 1.0 else f"{number:.0f}%"


def _dataset_box(dataset) -> Box:
    if not isinstance(dataset, dict):
        dataset = {"name": str(dataset)}
    name = dataset.get("name") or dataset.get("uri") or _("dataset")
    digest = str(dataset.get("sha256") or "")
    lines = [_short(name), f"sha256 {digest[:12]}…" if digest else _("no hash recorded")]
    return Box("dataset", lines, f"{name} {dataset.get('uri', '')} {digest}".strip())


def _job_box(version) -> Box:
    training = version.training or {}
    job = training.get("job") or version.training_job
    if not job:
        return Box("none", [_("no training job"), _("recorded")], _("no training job recorded"))
    nodes = training.get("nodes") or []
    node_text = ", ".join(str(n) for n in nodes) if isinstance(nodes, list) else str(nodes)
    lines = [_short(_("Slurm job %(job)s") % {"job": job}),
             _short(_("user %(user)s") % {"user": training.get("user") or "-"}),
             _short(_("nodes %(nodes)s") % {"nodes": node_text or "-"}),
             _short(_("%(hours)s GPU-hours") % {"hours": _hours(training.get("gpu_hours"))}),
             _short(_("efficiency %(value)s") % {"value": percent(training.get("efficiency"))})]
    return Box("job", lines, " · ".join(lines[:2] + [node_text] + lines[3:]))


def _capped(boxes: list[Box], what: str) -> list[Box]:
    if len(boxes) <= MAX_PER_COLUMN:
        return boxes
    more = len(boxes) - (MAX_PER_COLUMN - 1)
    label = _("%(count)s more %(what)s") % {"count": more, "what": what}
    return boxes[: MAX_PER_COLUMN - 1] + [Box("more", [label], label)]


def graph(version, evaluations, deployments) -> dict:
    """The drawing of `version`'s lineage: {"width", "height", "columns": [{x, label}], "boxes": [Box],
    "edges": [{"d": path}]}. `evaluations` and `deployments`: the version's (already fetched)."""
    datasets = [_dataset_box(d) for d in (version.datasets or [])] or [
        Box("none", [_("no dataset recorded")], _("no dataset recorded"))]
    job = _job_box(version)
    source_column = [job]
    if version.parent_id:
        parent = version.parent
        source_column.append(Box("parent", [_("parent model"), _short(f"{parent.model.name} v{parent.number}"),
                                            _short(parent.get_stage_display())],
                                 f"{parent.model.name} v{parent.number}"))
    this = Box("version", [_short(f"{version.model.name}"), _short(_("version %(number)s") % {"number": version.number}),
                           _short(version.get_stage_display()), _short(version.get_verification_display())],
               f"{version.model.name} v{version.number}", state=version.verification)
    evaluation_boxes = [Box("evaluation", [_short(e.name), _short(_metrics_line(e.metrics)),
                                           _short({True: _("passed"), False: _("failed")}.get(e.passed, _("not judged")))],
                            e.name, state={True: "passed", False: "failed"}.get(e.passed, ""))
                        for e in evaluations] or [Box("none", [_("no evaluation yet")], _("no evaluation yet"))]
    deployment_boxes = [Box("deployment", [_short(d.name), _short(d.get_runtime_display() + " · " + d.pool),
                                           _short(d.get_state_display())], f"{d.name} ({d.get_state_display()})",
                            state=d.state)
                        for d in deployments] or [Box("none", [_("not deployed")], _("not deployed"))]
    columns = [(_("Datasets"), _capped(datasets, _("datasets"))), (_("Training"), source_column),
               (_("Model"), [this]), (_("Evaluations"), _capped(evaluation_boxes, _("evaluations"))),
               (_("Deployments"), _capped(deployment_boxes, _("deployments")))]
    height = 0
    column_heads = []
    for index, (label, boxes) in enumerate(columns):
        x = LEFT + index * (BOX_WIDTH + COLUMN_GAP)
        column_heads.append({"x": x, "label": label})
        y = TOP
        for box in boxes:
            box.x, box.y = x, y
            box.height = BOX_PADDING * 2 + LINE_HEIGHT * len(box.lines)
            box.text = [{"x": x + BOX_PADDING, "y": y + BOX_PADDING + LINE_HEIGHT * (i + 1) - 4, "value": line,
                         "strong": i == 0} for i, line in enumerate(box.lines)]
            y += box.height + BOX_GAP
        height = max(height, y)
    # Centre the model's column on the tallest one: the edges fan out from it.
    for _label, boxes in columns[1:3]:
        used = sum(b.height for b in boxes) + BOX_GAP * (len(boxes) - 1)
        shift = max(0, (height - TOP - BOX_GAP - used) // 2)
        for box in boxes:
            box.y += shift
            for line in box.text:
                line["y"] += shift
    # Datasets flow through the training job to the model; an unknown job is drawn as a dashed pass-through.
    edges = []
    for box in columns[0][1]:
        if box.kind != "none":
            edges.append(_edge(box, job))
    for box in source_column:
        if box.kind != "none" or any(d.kind != "none" for d in columns[0][1]):
            edges.append(_edge(box, this))
    # The model is evaluated, and what was evaluated is deployed: deployments hang off the evaluations (off a
    # dashed pass-through when there is none), so no edge crosses a column.
    evaluated, deployed = columns[3][1], [box for box in columns[4][1] if box.kind != "none"]
    for box in evaluated:
        if box.kind != "none" or deployed:
            edges.append(_edge(this, box))
        for target in deployed:
            edges.append(_edge(box, target))
    all_boxes = [box for _label, boxes in columns for box in boxes]
    width = LEFT * 2 + len(columns) * BOX_WIDTH + (len(columns) - 1) * COLUMN_GAP
    return {"width": width, "height": height + 4, "columns": column_heads, "boxes": all_boxes, "edges": edges,
            "box_width": BOX_WIDTH}


def _edge(source: Box, target: Box) -> dict:
    x1, y1 = source.x + BOX_WIDTH, source.y + source.height // 2
    x2, y2 = target.x, target.y + target.height // 2
    middle = (x1 + x2) // 2
    return {"d": f"M{x1},{y1} C{middle},{y1} {middle},{y2} {x2 - 6},{y2}",
            "unknown": "none" in (source.kind, target.kind)}


def _metrics_line(metrics) -> str:
    if not isinstance(metrics, dict) or not metrics:
        return _("no metrics")
    key, value = next(iter(metrics.items()))
    more = f" +{len(metrics) - 1}" if len(metrics) > 1 else ""
    return f"{key}={value}{more}"
