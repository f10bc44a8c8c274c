"""`manage.py simulation {prepare,start,stop,status,remove,fault}`: the simulated appliance from the shell."""

from django.core.management.base import BaseCommand, CommandError

from appliance.core import context, resources
from appliance.inventory.models import Appliance, Node
from appliance.simulation import portal_server, repository_server, services, slurm, workload
from appliance.simulation import state as node_state
from appliance.simulation.management.commands.simulation_workload import add_workload_arguments, run_workload


class Command(BaseCommand):
    help = ("Manage the simulated appliance: prepare its nodes (sysroots, state, simulated commands, NVML library), "
            "start/stop/show its BMC emulators and its nodes' SSH servers, inject and clear faults; `remove` stops "
            "everything and removes the simulation's SSH files and (as root) its service account.")

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="action", required=True)
        for name, text in (("prepare", "create sysroots and state files (never resets an existing node)"),
                           ("start", "start what is not running: the BMC emulators, SSH servers, Slurm, the "
                                     "collectors and the demo portal (with its worker and beat)"),
                           ("stop", "stop the collectors, workload, Slurm, the demo portal, SSH servers and BMC "
                                    "emulators"),
                           ("status", "show each node's BMC emulator, SSH server, collector and faults, and the "
                                      "demo portal")):
            sub = commands.add_parser(name, help=text)
            sub.add_argument("--appliance", help="appliance name (default: every simulated appliance)")
        commands.add_parser("remove", help="stop every simulated appliance, remove the nodes' SSH servers' files "
                            "and, as root, the simulation's service account and its sudoers drop-in")
        add_workload_arguments(commands.add_parser(
            "workload", help="start, stop or show the workload model (training jobs on the simulated Slurm, inference "
                             "services)"))
        fault = commands.add_parser("fault", help="inject, clear or list faults of a simulated node")
        fault_actions = fault.add_subparsers(dest="fault_action", required=True)
        inject = fault_actions.add_parser("inject", help="inject a fault: NODE KIND [name=value ...]")
        inject.add_argument("node")
        inject.add_argument("kind", choices=sorted(services.FAULT_KINDS))
        inject.add_argument("params", nargs="*", metavar="name=value")
        clear = fault_actions.add_parser("clear", help="clear a node's faults (all, or of one kind)")
        clear.add_argument("node")
        clear.add_argument("kind", nargs="?", choices=sorted(services.FAULT_KINDS))
        listing = fault_actions.add_parser("list", help="list injected faults")
        listing.add_argument("node", nargs="?")

    def handle(self, *args, action, **options):
        with context.acting_as(channel="cli"):
            try:
                if action == "fault":
                    return self._fault(options)
                if action == "remove":
                    return self._remove()
                if action == "workload":
                    return run_workload(self, options)
                appliances = self._appliances(options.get("appliance"))
                for appliance in appliances:
                    getattr(self, f"_{action}")(appliance)
            except services.SimulationError as exc:
                raise CommandError(str(exc)) from None

    def _appliances(self, name):
        queryset = Appliance.objects.filter(simulated=True)
        if name:
            queryset = queryset.filter(name=name)
            if not queryset.exists():
                raise CommandError(f"no simulated appliance named {name!r}")
        appliances = list(queryset)
        if not appliances:
            raise CommandError(f"no simulated appliance in the inventory: import a site first ({resources.program()} site import)")
        return appliances

    def _prepare(self, appliance):
        result = services.prepare_appliance(appliance)
        nodes = appliance.nodes.count()
        self.stdout.write(f"{appliance.name}: {nodes} node(s) ready, {len(result['created'])} created "
                          f"({', '.join(result['created']) or 'none new'}); existing state kept")
        self.stdout.write(f"  simulated commands: {result['bin']}")
        self.stdout.write(f"  NVML library:       {result['library']}")

    def _start(self, appliance):
        started = services.start(appliance)
        for node, pid in started["bmc"].items():
            self.stdout.write(f"{node}: BMC {'running, pid ' + str(pid) if pid else 'down (injected fault bmc_down)'}")
        for node, pid in started["ssh"].items():
            self.stdout.write(f"{node}: SSH server running, pid {pid}")
        cluster = started["slurm"]
        self.stdout.write(f"Slurm: slurmctld pid {cluster['controller']}, slurmd on {', '.join(cluster['nodes'])}"
                          if isinstance(cluster, dict) else f"Slurm: not running ({cluster})")
        if isinstance(started["collectors"], str):
            self.stdout.write(f"collectors: not started ({started['collectors']})")
        else:
            for node, pid in started["collectors"].items():
                self.stdout.write(f"{node}: collector " + (f"running, pid {pid}" if isinstance(pid, int) else str(pid)))
        pid = services.start_portal()
        self.stdout.write(f"portal: {portal_server.url()} running, pid {pid} (with its worker and beat)")

    def _stop(self, appliance):
        stopped = services.stop(appliance)
        for node, pid in stopped["bmc"].items():
            self.stdout.write(f"{node}: BMC {'stopped (pid ' + str(pid) + ')' if pid else 'was not running'}")
        for node, pid in stopped["ssh"].items():
            self.stdout.write(f"{node}: SSH server {'stopped (pid ' + str(pid) + ')' if pid else 'was not running'}")
        for node, pid in stopped["collectors"].items():
            if pid:
                self.stdout.write(f"{node}: collector stopped (pid {pid})")
        self.stdout.write(f"portal: {'stopped (pid ' + str(stopped['portal']) + ')' if stopped['portal'] else 'was not running'}")
        daemons = stopped["slurm"]["stopped"]
        self.stdout.write(f"Slurm: {'stopped ' + ', '.join(daemons) if daemons else 'was not running'}; workload: "
                          f"{'stopped' if stopped['workload']['pid'] else 'was not running'}")

    def _remove(self):
        appliances = list(Appliance.objects.filter(simulated=True))
        result = services.remove(appliances)
        self.stdout.write(f"stopped {len(appliances)} simulated appliance(s); SSH servers' files removed")
        self.stdout.write(f"service account {result['account']} and its sudoers drop-in removed" if result["account"]
                          else "no service account to remove")

    def _status(self, appliance):
        statuses = services.bmc_status(appliance)
        ssh = services.ssh_status(appliance)
        collectors = services.collector_status(appliance)
        self.stdout.write(f"{appliance.name}:")
        for node in appliance.nodes.order_by("name"):
            status = statuses.get(node.name)
            if status is None:
                bmc_text = "no BMC"
            elif status["running"]:
                bmc_text = f"{status['url']} pid {status['pid']} {'answering' if status['answering'] else 'NOT answering'}"
            else:
                bmc_text = f"{status['url']} stopped"
            faults = []
            if node.sysroot and node_state.exists(node.sysroot):
                faults = [self._describe(fault) for fault in node_state.load(node.sysroot)["faults"]]
                prepared = "prepared"
            else:
                prepared = "NOT prepared"
            server = ssh.get(node.name) or {}
            if server.get("running"):
                ssh_text = (f"{server['address']}:{server['port']} pid {server['pid']} "
                            f"{'answering' if server['answering'] else 'NOT answering'}")
            else:
                ssh_text = "stopped"
            self.stdout.write(f"  {node.name:<16} {prepared:<13} BMC {bmc_text}  SSH {ssh_text}"
                              + f"  collector {self._collector(collectors.get(node.name))}"
                              + (f"  faults: {'; '.join(faults)}" if faults else ""))
        served = repository_server.status()
        self.stdout.write(f"  package repository {served['url'] or '(no port yet)'} {served['directory']} "
                          + (f"pid {served['pid']} {'answering' if served['answering'] else 'NOT answering'}"
                             if served["running"] else "stopped"))
        portal = portal_server.status()
        self.stdout.write(f"  portal             {portal['url'] or '(no port yet)'} "
                          + (f"pid {portal['pid']} {'answering' if portal['answering'] else 'NOT answering'} "
                             "(gunicorn; with no broker also the worker and the beat)"
                             if portal["running"] else "stopped (simulation start starts it)"))
        cluster = slurm.status(appliance)
        if not cluster["configured"]:
            self.stdout.write("  Slurm              not configured yet (the workloads stage has not run)")
        else:
            controller = cluster["controller"]
            self.stdout.write(f"  Slurm              {controller['name']} "
                              + (f"slurmctld pid {controller['pid']}; " if controller["pid"] else "stopped; ")
                              + ", ".join(f"{name} {node['state'] or 'stopped'}" for name, node in cluster["nodes"].items()))
        model = workload.status(appliance)
        self.stdout.write("  workload           " + (f"{model['profile']} pid {model['pid']} speed {model['speed']:g}"
                                                     if model["running"] else "stopped"))

    @staticmethod
    def _collector(status: dict | None) -> str:
        if not status or not status["deployed"]:
            return "not deployed yet"
        if not status["pid"]:
            return "stopped"
        where = f" /metrics {status['metrics']} {'answering' if status['answering'] else 'NOT answering'}" \
            if status["metrics"] else ""
        return f"pid {status['pid']}{where}"

    @staticmethod
    def _describe(fault: dict) -> str:
        params = " ".join(f"{key}={value}" for key, value in fault.items() if key != "kind")
        return f"{fault['kind']} {params}".strip()

    def _node(self, name):
        try:
            return Node.objects.select_related("appliance").get(name=name)
        except Node.DoesNotExist:
            raise CommandError(f"no node named {name!r}") from None

    def _fault(self, options):
        action = options["fault_action"]
        if action == "inject":
            params = {}
            for item in options["params"]:
                key, sep, value = item.partition("=")
                if not sep or not key:
                    raise CommandError(f"fault parameter {item!r}: write name=value")
                params[key] = value
            fault = services.inject_fault(self._node(options["node"]), options["kind"], **params)
            self.stdout.write(f"{options['node']}: injected {self._describe(fault)}")
        elif action == "clear":
            removed = services.clear_faults(self._node(options["node"]), options.get("kind"))
            self.stdout.write(f"{options['node']}: cleared {len(removed)} fault(s)"
                              + (f": {'; '.join(self._describe(fault) for fault in removed)}" if removed else ""))
        else:
            nodes = [self._node(options["node"])] if options.get("node") else \
                Node.objects.filter(appliance__simulated=True).order_by("name")
            for node in nodes:
                if node.sysroot and node_state.exists(node.sysroot):
                    faults = node_state.load(node.sysroot)["faults"]
                    self.stdout.write(f"{node.name}: " + ("; ".join(self._describe(f) for f in faults) or "no faults"))
