"""What `bootstrap` prints at the end of a run (appliance.provisioning.terminal): the run titled by what
it ran, the acceptance verdict with passed/failed counts per node, the failed checks whole, one per line,
measured values with their unit, and where the full report is; --all prints every check."""

import pytest

from appliance.provisioning import terminal
from appliance.provisioning.models import AcceptanceCheck, AcceptanceReport, Run

pytestmark = pytest.mark.django_db

CHECKS = [  # host, name, expected, measured, passed, message
    ("gpu01", "service.nvidia-dcgm", "active", "active", True, ""),
    ("gpu01", "service.nvidia-fabricmanager", "active", "inactive", False,
     "systemctl is-active nvidia-fabricmanager: inactive"),
    ("gpu01", "ib_write_bw.mlx5_0", ">= 380 Gb/s", 392.6, True, ""),
    ("gpu02", "ib_write_bw.mlx5_0", ">= 380 Gb/s", 200.0, False, "ib_write_bw -d mlx5_0: below the gate"),
    ("gpu02", "gpu.count", 8, None, False, "NVML: nvmlInit failed: Driver Not Loaded"),
    ("gpu02", "service.nvidia-dcgm", "active", "active", True, ""),
    ("mgmt01", "service.chrony", "active", "active", True, ""),
]


@pytest.fixture
def run(appliance):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.BOOTSTRAP, stages=["acceptance"], state="failed")
    report = AcceptanceReport.objects.create(run=run)
    for host, name, expected, measured, passed, message in CHECKS:
        AcceptanceCheck.objects.create(report=report, host=host, name=name, expected=expected, measured=measured,
                                       passed=passed, message=message)
    return run


def test_the_acceptance_result_prints_failures_a_summary_per_node_and_where_the_report_is(run):
    lines = terminal.acceptance_lines(run, AcceptanceReport.objects.get(run=run))
    assert lines == [
        "Acceptance: FAILED (4/7 checks passed)",
        "  node    passed  failed",
        "  gpu01        2       1",
        "  gpu02        1       2",
        "  mgmt01       1       0",
        "Failed checks:",
        "  FAIL  gpu01  service.nvidia-fabricmanager  expected active, measured inactive"
        "  (systemctl is-active nvidia-fabricmanager: inactive)",
        "  FAIL  gpu02  gpu.count  expected 8, measured nothing  (NVML: nvmlInit failed: Driver Not Loaded)",
        "  FAIL  gpu02  ib_write_bw.mlx5_0  expected >= 380 Gb/s, measured 200.0 Gb/s"
        "  (ib_write_bw -d mlx5_0: below the gate)",
        f"Full report: http://127.0.0.1:8000/provisioning/acceptance/?appliance=lab "
        f"(this run: http://127.0.0.1:8000/provisioning/runs/{run.pk}/); --all prints every check here",
    ]


def test_all_prints_every_check(run):
    lines = terminal.acceptance_lines(run, AcceptanceReport.objects.get(run=run), all_checks=True)
    assert lines[5:13] == [
        "Checks:",
        "  pass  gpu01  ib_write_bw.mlx5_0  expected >= 380 Gb/s, measured 392.6 Gb/s",
        "  pass  gpu01  service.nvidia-dcgm  expected active, measured active",
        "  FAIL  gpu01  service.nvidia-fabricmanager  expected active, measured inactive"
        "  (systemctl is-active nvidia-fabricmanager: inactive)",
        "  FAIL  gpu02  gpu.count  expected 8, measured nothing  (NVML: nvmlInit failed: Driver Not Loaded)",
        "  FAIL  gpu02  ib_write_bw.mlx5_0  expected >= 380 Gb/s, measured 200.0 Gb/s"
        "  (ib_write_bw -d mlx5_0: below the gate)",
        "  pass  gpu02  service.nvidia-dcgm  expected active, measured active",
        "  pass  mgmt01  service.chrony  expected active, measured active",
    ]
    assert lines[13].endswith(f"/provisioning/runs/{run.pk}/)")


@pytest.mark.parametrize("stages,title", [
    (["firmware"], "(bootstrap, stage firmware)"),
    (["gpu", "fabric"], "(bootstrap, stages gpu, fabric)"),
    (["firmware", "os", "gpu", "fabric", "gpudirect", "storage", "workloads", "partitioning", "monitoring", "acceptance"],
     "(bootstrap, every stage)"),
])
def test_a_run_is_titled_by_what_it_runs(appliance, stages, title):
    run = Run.objects.create(appliance=appliance, kind=Run.Kind.BOOTSTRAP, stages=stages)
    assert terminal.run_title(run) == f"run #{run.pk} {title}"
    run.dry_run = True
    assert terminal.run_title(run) == f"run #{run.pk} {title[:-1]}, check mode)"


def test_a_node_that_failed_before_acceptance_makes_the_verdict_incomplete(appliance):
    """gpu02 failed the gpu stage: the acceptance stage ran on the others only, and their checks all
    passed. The verdict may not read PASSED as if gpu02 had been checked."""
    from appliance.provisioning.models import StageRun

    run = Run.objects.create(appliance=appliance, kind=Run.Kind.BOOTSTRAP, stages=["gpu", "acceptance"],
                             state="failed")
    StageRun.objects.create(run=run, stage="gpu", order=0, state="failed", hosts=["gpu01", "gpu02"])
    StageRun.objects.create(run=run, stage="acceptance", order=1, state="succeeded", hosts=["gpu01"])
    report = AcceptanceReport.objects.create(run=run, passed=True, checks_total=1)
    AcceptanceCheck.objects.create(report=report, host="gpu01", name="gpu.count", expected=8, measured=8, passed=True)

    lines = terminal.acceptance_lines(run, report)
    assert lines[0] == "Acceptance: INCOMPLETE (1/1 checks passed; not checked: gpu02, failed an earlier stage of this run)"
