"""`manage.py simulation_workload {start,stop,status}` (also `manage.py simulation workload ...`): the workload
model of the simulated appliance (appliance/simulation/workload.py) from the shell."""

from django.core.management.base import BaseCommand, CommandError

from appliance.core import context, resources
from appliance.inventory.models import Appliance
from appliance.simulation import slurm, workload


def add_workload_arguments(parser) -> None:
    actions = parser.add_subparsers(dest="workload_action", required=True)
    start = actions.add_parser("start", help="start the workload model in the background (training jobs go to the "
                                             "simulated Slurm, which must be running)")
    start.add_argument("--profile", default="demo", choices=workload.PROFILES,
                       help="demo: every kind over a simulated day; or one kind on every node it applies to")
    start.add_argument("--speed", type=float, default=60.0,
                       help="simulated seconds per real second (1: real time; 60: a simulated minute per second)")
    start.add_argument("--seed", type=int, default=1, help="the same seed gives the same jobs, load and ground truth")
    for name, text in (("stop", "stop the model: its Slurm jobs are cancelled and every GPU left idle"),
                       ("status", "show whether the model runs, its profile and the simulated time")):
        actions.add_parser(name, help=text)
    for sub in actions.choices.values():
        sub.add_argument("--appliance", help="appliance name (default: the only simulated appliance)")


def run_workload(command: BaseCommand, options: dict) -> None:
    """Carry out `workload <action>` for `command` (this module's or `manage.py simulation`'s)."""
    appliances = Appliance.objects.filter(simulated=True)
    if options.get("appliance"):
        appliances = appliances.filter(name=options["appliance"])
    appliances = list(appliances)
    if len(appliances) != 1:
        raise CommandError("name the simulated appliance with --appliance" if appliances else
                           f"no simulated appliance in the inventory: import a site first ({resources.program()} site import)")
    appliance, action = appliances[0], options["workload_action"]
    with context.acting_as(channel="cli"):
        try:
            if action == "start":
                started = workload.start(appliance, profile=options["profile"], speed=options["speed"],
                                         seed=options["seed"])
                command.stdout.write(f"{appliance.name}: workload {started['profile']} running (pid {started['pid']}, "
                                     f"seed {started['seed']}, speed {started['speed']:g}) on "
                                     f"{', '.join(started['nodes'])}")
                command.stdout.write(f"  ground truth: {started['directory'] / 'ground-truth.jsonl'}")
            elif action == "stop":
                stopped = workload.stop(appliance)
                command.stdout.write(f"{appliance.name}: workload " + (
                    f"stopped (pid {stopped['pid']}), {stopped['jobs_cancelled']} Slurm job(s) cancelled, GPUs idle"
                    if stopped["pid"] else "was not running"))
            else:
                status = workload.status(appliance)
                if not status["running"]:
                    command.stdout.write(f"{appliance.name}: workload not running")
                    return
                command.stdout.write(f"{appliance.name}: workload {status['profile']} running (pid {status['pid']}, "
                                     f"seed {status['seed']}, speed {status['speed']:g}), simulated time "
                                     f"{status['simulated_seconds'] // 3600} h {status['simulated_seconds'] % 3600 // 60:02d} min")
                for activity in status.get("activities", []):
                    where = "Slurm job" if activity["slurm"] else "inference service (simulation state)"
                    command.stdout.write(f"  {activity['node']:<8} GPUs {','.join(map(str, activity['gpus'])):<16} "
                                         f"{activity['kind']:<18} {activity['name']}: {where}")
                command.stdout.write(f"  ground truth: {status['ground_truth'] or 'none yet'}")
        except (workload.WorkloadError, slurm.SlurmError) as exc:
            raise CommandError(str(exc)) from None


class Command(BaseCommand):
    help = ("Start, stop or show the simulated appliance's workload model: training jobs on its Slurm and "
            "inference services that move its GPU, fabric and storage counters and record the ground truth.")

    def add_arguments(self, parser):
        add_workload_arguments(parser)

    def handle(self, *args, **options):
        run_workload(self, options)
