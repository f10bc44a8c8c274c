"""A plan's time-slicing changes read in words: "time-sliced × 4 replicas → not time-sliced", never "4 → -"."""

from django.template.loader import render_to_string
from django.utils import translation


def _changes(changes) -> str:
    html = render_to_string("partitioning/_result.html", {
        "result": {"placed": [], "unplaced": [], "served_weight": 1, "total_weight": 1,
                   "disruption": {"destroyed": [], "created": [], "mig_mode_changes": [],
                                  "time_slicing_changes": changes, "gpus_changed": []}}})
    return " ".join(html.split('data-part="time_slicing_changes">', 1)[1].split("</dd>", 1)[0].split())


def test_time_slicing_changes_in_words():
    changes = [{"gpu": "gpu04/0", "from": 4, "to": None}, {"gpu": "gpu04/1", "from": None, "to": 1}]
    assert _changes(changes) == ("2: gpu04/0 time-sliced × 4 replicas → not time-sliced, "
                                 "gpu04/1 not time-sliced → time-sliced × 1 replica")
    with translation.override("ru"):
        assert _changes(changes[:1]) == "1: gpu04/0 разделение по времени × 4 реплики → без разделения по времени"
