"""Minutes that change hands on the collector (rollup.py): the seconds each holder held a GPU, timed sweep
by sweep. Every expected value is counted by hand from the sweeps written out here."""

from appliance.telemetry.collector import Series, Sweep
from appliance.telemetry.rollup import Rollup

from .test_rollup import GPU0, MINUTE, S, parse


def held_by(job: str, util: float = 50.0) -> Series:
    return Series("gpu", GPU0 + (("hpc_job", job),), {"DCGM_FI_DEV_GPU_UTIL": util})


def minute(rollup: Rollup, holder_at, seconds=range(60), first: int = 0) -> dict:
    """Sweeps at `seconds` of the minute (a sweep a second), each held by holder_at(second); the minute's
    gpu_rollup (tags and fields), closed by the sweep at 60 s."""
    for second in seconds:
        assert rollup.add(Sweep(MINUTE + first * S + second * S, [held_by(holder_at(second))])) == []
    lines = rollup.add(Sweep(MINUTE + first * S + 60 * S, [held_by(holder_at(60))]))
    _, tags, fields, stamp = parse(lines[0])
    assert stamp == MINUTE + first * S
    return {"job": tags.get("hpc_job"), "holders": fields.get("holders")}


def test_a_job_that_ends_at_second_35_held_35_seconds_and_nobody_the_other_25():
    found = minute(Rollup("gpu01"), lambda second: "7" if second < 35 else "")
    assert found == {"job": "7", "holders": "7:35"}


def test_a_job_that_starts_at_second_50_held_10_seconds_and_the_minute_is_nobody_s():
    found = minute(Rollup("gpu01"), lambda second: "12345_7" if second >= 50 else "")
    assert found == {"job": None, "holders": "12345_7:10"}


def test_two_jobs_in_one_minute_each_with_its_seconds():
    # job 1 until 20 s, nobody from 20 to 25 s, job 2 from 25 s on
    found = minute(Rollup("gpu01"), lambda second: "1" if second < 20 else "" if second < 25 else "2")
    assert found == {"job": "2", "holders": "1:20,2:35"}


def test_a_minute_held_throughout_has_no_holders_field():
    assert minute(Rollup("gpu01"), lambda second: "7") == {"job": "7", "holders": None}
    assert minute(Rollup("gpu01"), lambda second: "") == {"job": None, "holders": None}


def test_sweeps_off_the_second_time_the_holder_from_sweep_to_sweep_and_across_the_minute_boundary():
    rollup = Rollup("gpu01")
    # sweeps every 10 s at 5.5 s, 15.5 s, ... of each minute: the one at 55.5 s of the minute before held
    # the GPU for job 3 until the first sweep of this minute (5.5 s), which sees job 4
    for second in (35.5, 45.5, 55.5):
        rollup.add(Sweep(MINUTE - 60 * S + int(second * S), [held_by("3")]))
    lines = []
    for second in (5.5, 15.5, 25.5, 35.5, 45.5, 55.5, 65.5):
        lines += rollup.add(Sweep(MINUTE + int(second * S), [held_by("4" if second < 40 else "")]))
    previous, this = parse(lines[0]), parse(lines[2])  # each closed minute: its gpu and node lines
    assert previous[1]["hpc_job"] == "3" and "holders" not in previous[2]
    # job 3: 0 to 5.5 s; job 4: 5.5 to 45.5 s (40 s); nobody 45.5 to 60 s (14.5 s); 5.5 + 40 + 14.5 = 60,
    # the half seconds rounded so that the whole seconds add up to 60 (the first of equal remainders up)
    assert (this[3], this[1]["hpc_job"], this[2]["holders"]) == (MINUTE, "4", "3:6,4:40")


def test_the_collector_stopping_inside_a_minute_times_its_holders_up_to_the_stop():
    rollup = Rollup("gpu01")
    for second in range(30):
        rollup.add(Sweep(MINUTE + second * S, [held_by("9" if second >= 20 else "")]))
    _, tags, fields, _ = parse(rollup.close(MINUTE + 30 * S)[0])
    # job 9 from 20 s to the stop at 30 s, not to the minute's end; nobody 20 s
    assert (tags.get("hpc_job"), fields["holders"]) == (None, "9:10")
