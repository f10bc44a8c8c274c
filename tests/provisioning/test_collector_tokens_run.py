"""Through the real provisioning engine, a run hands each node its own collector token as a secret of the
run (as the BMC passwords are): written where collector.json says, never in the run's folder, its events or
the audit log, even when a playbook prints it; a second run issues nothing new."""

import json
import os
import stat
from pathlib import Path

import pytest

from appliance.audit.models import AuditRecord
from appliance.core.secrets import MASK
from appliance.provisioning import services
from appliance.provisioning.catalogue import Catalogue, Stage
from appliance.provisioning.models import Run, StageRun, TaskEvent
from appliance.provisioning.states import StageState
from appliance.telemetry.models import NodeCollector
from tests.provisioning import catalogue as test_catalogue

TOKEN_STAGE = Catalogue([Stage("monitoring", str(test_catalogue.PLAYBOOKS / "collector_token.yml"),
                               "writes the collectors' tokens", vars_provider="telemetry.monitoring_stage_vars",
                               secrets_provider="telemetry.monitoring_stage_secrets")])


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.mark.slow
def test_a_run_gives_each_node_its_token_and_stores_it_nowhere(state_dir, appliance, settings):
    settings.TELEMETRY_INGEST_URL = "https://appliance.example:8443/telemetry/ingest"  # as the installer writes it
    run = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["monitoring"], catalogue=TOKEN_STAGE)
    run = services.execute_run(run.pk, catalogue=TOKEN_STAGE)

    stage_run = StageRun.objects.get(run=run)
    assert stage_run.state == StageState.SUCCEEDED, stage_run.message
    issued = dict(NodeCollector.objects.values_list("node__name", "token"))
    assert sorted(issued) == ["gpu01", "gpu02", "mgmt01"]
    for node in appliance.nodes.all():
        token_file = Path(node.sysroot) / "etc/appliance-collector.token"
        assert token_file.read_text() == issued[node.name]
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        config = json.loads((Path(node.sysroot) / "etc/appliance-collector.json").read_text())
        # A real appliance: the first management node's portal (https, the production install's port), the
        # site's /metrics port on every address.
        assert config == {
            "hostname": node.name, "interval_s": 1.0, "buffer_dir": "/var/lib/appliance/collector",
            "buffer_max_mib": 256,
            "appliance": {"url": "https://appliance.example:8443/telemetry/ingest",
                          "token_file": "/etc/appliance/collector.token", "ca_file": ""},
            "influxdb": {"url": "", "org": "appliance", "bucket": "telemetry", "token_file": ""},
            "metrics": {"address": "0.0.0.0", "port": 9400}}
    # Nothing the run kept holds a token: its folder (inventory, masked secrets, artifacts), its events,
    # the audit log. The careless debug task did print them: masked.
    stored = files_under(Path(state_dir) / "runs" / str(run.pk))
    assert stored, "the run kept no files"
    for token in issued.values():
        assert not [name for name, data in stored.items() if token.encode() in data]
    masked = json.loads(next(data for name, data in stored.items() if name.endswith("secrets.masked.json")))
    assert masked["appliance_collector_tokens"] == {"gpu01": MASK, "gpu02": MASK, "mgmt01": MASK}
    events = [event.stdout + json.dumps(event.data) for event in TaskEvent.objects.filter(stage_run=stage_run)]
    assert any(f"the token of gpu01 is {MASK}" in text for text in events)
    assert not [text for text in events for token in issued.values() if token in text]
    audit_text = json.dumps(list(AuditRecord.objects.values("details", "reason", "target_name")))
    assert not [token for token in issued.values() if token in audit_text]
    assert AuditRecord.objects.filter(event="telemetry.collector.register").count() == 3

    second = services.create_run(appliance, kind=Run.Kind.STAGES, stages=["monitoring"], catalogue=TOKEN_STAGE)
    services.execute_run(second.pk, catalogue=TOKEN_STAGE)

    assert dict(NodeCollector.objects.values_list("node__name", "token")) == issued
    assert AuditRecord.objects.filter(event="telemetry.collector.register").count() == 3
