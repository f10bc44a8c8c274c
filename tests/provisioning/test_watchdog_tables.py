"""The watchdog reads the failed-twin tables: it hard-codes no target state. Changing a twin in the table
changes where the watchdog sends that state."""

import socket

from appliance.provisioning import services
from appliance.provisioning import states as provisioning_states
from appliance.provisioning.states import StageState
from tests.provisioning.test_watchdog import dead_pid, running_run


def test_the_watchdog_moves_each_outlived_state_to_the_twin_its_table_names(state_dir, appliance, catalogue,
                                                                           monkeypatch):
    run = running_run(appliance, catalogue, socket.gethostname(), dead_pid())
    assert dict(run.stage_runs.values_list("stage", "state")) == {
        "first": "succeeded", "second": "running", "gpu-only": "pending"}
    # The product's table cancels a pending stage of a dead run; a table that skips it is obeyed.
    monkeypatch.setitem(provisioning_states.STAGE_FAILED_TWIN, StageState.PENDING, StageState.SKIPPED)

    assert [r.pk for r in services.watchdog()] == [run.pk]
    assert dict(run.stage_runs.values_list("stage", "state")) == {
        "first": "succeeded", "second": "failed", "gpu-only": "skipped"}
