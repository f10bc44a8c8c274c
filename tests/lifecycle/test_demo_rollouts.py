"""Rollouts that take their time, as on the bootstrapped demo where the workload driver (its own process)
brings a service up at its next step: `models deploy` follows the rollout until it is healthy (saying that it
waits), and two rollouts of one service that become ready together leave the newer one serving."""

import subprocess
import sys
import threading
import time

import pytest

from appliance.accounts import tokens
from appliance.lifecycle import deployments
from appliance.lifecycle.models import Deployment
from appliance.simulation import kubernetes, workload

from .deploy_support import cluster_file, demo, people, production  # noqa: F401 (fixtures)
from .test_deploy_cli import models

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy_driver(demo):  # noqa: F811
    """A process in the driver's place that never steps: nothing serves a new rollout until it stops (then
    the health check serves the pool itself, as without a driver)."""
    directory = workload.workload_dir()
    directory.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", str(directory / "config.json")])
    (directory / "driver.pid").write_text(str(process.pid))
    deadline = time.monotonic() + 10
    while workload.driver_pid() != process.pid and time.monotonic() < deadline:   # until it has exec'd
        time.sleep(0.1)
    assert workload.driver_pid() == process.pid
    yield process
    process.kill()
    process.wait()


def test_deploy_waits_for_the_rollout_and_says_so(demo, root, people, monkeypatch, busy_driver):  # noqa: F811
    production(root, people, "v1", 7)
    monkeypatch.setenv("APPLIANCE_TOKEN", tokens.issue_token(people["olga"], "cli")[1])
    status, out, err = models("deploy", "llama", "--wait", "0")
    first = Deployment.objects.get()   # its number is the database's (sequences outlive a test)
    assert status == 2 and out.startswith(f"deployment {first.pk}: llama = llama v1 (vllm) on gpu04/gpu0: rolling_out")

    production(root, people, "v2", 8)
    threading.Timer(3.0, busy_driver.kill).start()   # the driver's step, three seconds later
    status, out, err = models("deploy", "llama", "--wait", "60")
    second = Deployment.objects.exclude(pk=first.pk).get()
    assert err == (f"deployment {second.pk}: rolling out (applied; waiting for the pool to report it ready); "
                   "waiting up to 60 s\n")
    assert (status, out) == (0, f"deployment {second.pk}: llama = llama v2 (vllm) on gpu04/gpu1: healthy "
                                "(ready and serving on gpu04/gpu1)\n")
    # The older rollout of the service, ready at the same step, is replaced: version 2 serves.
    deployments.follow_all()
    states = dict(Deployment.objects.values_list("pk", "state"))
    assert states == {first.pk: "replaced", second.pk: "healthy"}
    assert kubernetes.read(cluster_file(demo))["services"]["llama"]["selects"] == deployments.workload_name(second)


def test_two_rollouts_ready_at_one_step_leave_the_newer_serving(demo, root, people, busy_driver):  # noqa: F811
    first = deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    second = deployments.deploy(production(root, people, "v2", 8), user=people["olga"])
    assert (first.state, second.state) == ("rolling_out", "rolling_out")
    busy_driver.kill()
    busy_driver.wait()
    assert deployments.follow_all() == [first.pk, second.pk]
    first.refresh_from_db(), second.refresh_from_db()
    assert (first.state, second.state) == ("replaced", "healthy")
    assert kubernetes.read(cluster_file(demo))["services"]["llama"]["selects"] == deployments.workload_name(second)
