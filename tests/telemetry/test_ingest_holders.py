"""A minute that changed hands at the ingest: a gpu_rollup line's `holders` field (the seconds each job
held the GPU, as the collector timed them) checked, its jobs verified against where the scheduler put
them, stored on the row and carried by the node's and the fleet's minute frames. Values written by hand."""

import numpy as np
import pytest
from django.test import Client

from appliance.telemetry import frames
from appliance.telemetry.models import FleetMinuteFrame, GpuMinuteFrame, GpuRollup

from . import test_frames
from .test_frames import T_1158, T_1159, TOKEN, at, gpu_line, stored_fleet, stored_frames, write

pytestmark = pytest.mark.django_db
node = test_frames.node  # gpu-01 with its collector's token, jobs 4242, 4243 and 4300 placed on it


def refused(line: str) -> str:
    response = Client().generic("POST", "/telemetry/ingest/api/v2/write?precision=s",
                                f"{gpu_line(1, T_1158, 'util=1')}\n{line}", HTTP_AUTHORIZATION=f"Token {TOKEN}")
    assert response.status_code == 400, response.content
    assert not GpuRollup.objects.exists()  # the whole write refused
    return response.json()["message"]


def stored(gpu: int) -> tuple[str, str, str, str]:
    row = GpuRollup.objects.get(gpu=gpu, start=at(11, 59))
    return row.job, row.unverified_job, row.holders, row.unverified_holders


def test_a_minute_that_changed_hands_is_stored_with_each_holders_seconds_and_packed_in_the_frames(node):
    write(gpu_line(0, T_1159, 'util=50,holders="4242:35"', ",hpc_job=4242"),
          gpu_line(1, T_1159, 'util=20,holders="4243:20,4300:25"', ",hpc_job=4300"),
          gpu_line(2, T_1159, "util=90", ",hpc_job=4242"))
    assert stored(0) == ("4242", "", "4242:35", "")
    assert stored(1) == ("4300", "", "4243:20,4300:25", "")
    assert stored(2) == ("4242", "", "", "")  # one holder all the minute: no holders
    frame = GpuMinuteFrame.objects.get(node=node, start=at(11, 59))
    assert frame.holders.split("\n") == ["4242:35", "4243:20,4300:25", ""]  # by GPU
    columns = frames.unpack(stored_frames())
    assert columns["holder_values"][columns["holder_code"]].tolist() == ["4242:35", "4243:20,4300:25", ""]
    # the fleet frame packs them too, and reads back as its node frames do
    assert frames.build_fleet([at(11, 59)]) == 1
    fleet = FleetMinuteFrame.objects.get(start=at(11, 59))
    texts = fleet.holders.split("\n")
    assert [texts[code] for code in np.frombuffer(bytes(fleet.holder_codes), dtype="<i4")] == \
        ["4242:35", "4243:20,4300:25", ""]
    from_fleet = frames.unpack_fleet(stored_fleet())
    assert from_fleet["holder_values"][from_fleet["holder_code"]].tolist() == ["4242:35", "4243:20,4300:25", ""]


def test_a_minute_without_holders_packs_no_holders_text(node):
    write(gpu_line(0, T_1159, "util=50", ",hpc_job=4242"), gpu_line(1, T_1159, "util=5"))
    assert GpuMinuteFrame.objects.get(node=node, start=at(11, 59)).holders == ""
    columns = frames.unpack(stored_frames())
    assert columns["holder_code"].tolist() == [0, 0]


def test_a_holder_the_scheduler_did_not_put_on_the_node_is_kept_unverified(node):
    # 4242 is placed on gpu-01 (the fixture), 777 is not
    write(gpu_line(0, T_1159, 'util=50,holders="4242:30,777:20"', ",hpc_job=4242"),
          gpu_line(1, T_1159, 'util=50,holders="4242:10,777:40"', ",hpc_job=777"))
    assert stored(0) == ("4242", "", "4242:30", "777:20")
    assert stored(1) == ("", "777", "4242:10", "777:40")


@pytest.mark.parametrize(("field", "message"), [
    ('holders="4242"', "field holders: '4242' is not job:seconds (whole seconds)"),
    ('holders="4242:35.5"', "field holders: '4242:35.5' is not job:seconds (whole seconds)"),
    ('holders="42 42:35"', "field holders: job '42 42' does not match"),
    ('holders=":35"', "field holders: job '' does not match"),
    ('holders="4242:100"', "field holders: '4242:100' is not job:seconds"),  # two digits at most
    ('holders="4242:61"', "field holders: 4242: 61 seconds is out of range (0 to 60)"),
    ('holders="4242:35,4243:26"', "field holders: the seconds add up to 61, more than the minute's 60"),
    ('holders="4242:20,4242:20"', "field holders: job 4242 is named twice"),
    ('holders="4243:35"', "field holders: hpc_job=4242 is not one of them"),
    ("holders=35i", "field holders: expected a quoted string"),
])
def test_holders_that_are_not_what_a_collector_sends_refuse_the_write_naming_line_and_field(node, field, message):
    found = refused(gpu_line(0, T_1159, f"util=50,{field}", ",hpc_job=4242"))
    assert found.startswith("line 2: ") and message in found, found


def test_the_collectors_rollup_of_a_minute_that_changed_hands_is_taken_as_it_sends_it(node):
    from appliance.telemetry.collector import Series, Sweep
    from appliance.telemetry.rollup import Rollup

    rollup, lines = Rollup("gpu-01"), []
    labels = (("gpu", "0"), ("UUID", "GPU-0000"), ("Hostname", "gpu-01"))
    for second in range(61):  # job 4242 until 11:59:35, nobody after
        job = (("hpc_job", "4242"),) if second < 35 else ()
        lines += rollup.add(Sweep((T_1159 + second) * 10**9, [Series("gpu", labels + job,
                                                                      {"DCGM_FI_DEV_GPU_UTIL": 90.0})]))
    assert 'holders="4242:35"' in lines[0]
    response = Client().generic("POST", "/telemetry/ingest/api/v2/write?precision=ns", "\n".join(lines),
                                HTTP_AUTHORIZATION=f"Token {TOKEN}")
    assert response.status_code == 204, response.content
    assert stored(0) == ("4242", "", "4242:35", "")
