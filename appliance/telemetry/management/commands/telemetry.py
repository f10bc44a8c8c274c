"""`manage.py telemetry collect --node X [--once | --interval S] [--metrics-port P]`: run the collector of a
simulated node in this process (the simulation starts one per node). A real node runs the same collector
itself (python -m appliance.telemetry.agent), deployed by the monitoring stage. Points go to the site's
InfluxDB (settings.INFLUXDB) through the node's disk buffer in STATE_DIR/telemetry/<node>/buffer.sqlite."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from appliance.telemetry.agent import Agent
from appliance.telemetry.buffer import Buffer
from appliance.telemetry.collector import Collector, CollectorError
from appliance.telemetry.sinks import InfluxSink


def buffer_path(node_name: str) -> Path:
    return Path(settings.STATE_DIR) / "telemetry" / node_name / "buffer.sqlite"


class Command(BaseCommand):
    help = "Run a simulated node's telemetry collector."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="action", required=True)
        collect = commands.add_parser("collect", help="run the collector of a simulated node")
        collect.add_argument("--node", required=True)
        when = collect.add_mutually_exclusive_group()
        when.add_argument("--once", action="store_true", help="one sweep, sent, then exit")
        when.add_argument("--interval", type=float, default=1.0, help="seconds between sweeps (default 1)")
        collect.add_argument("--metrics-port", type=int, default=None, help="serve /metrics on this port")
        collect.add_argument("--buffer-max-mib", type=int, default=256)

    def handle(self, *args, **options):
        from appliance.inventory.models import Node
        from appliance.simulation import nvml

        name = options["node"]
        node = Node.objects.filter(name=name).first()
        if node is None:
            raise CommandError(f"--node {name}: no such node")
        if not node.sysroot:
            raise CommandError(f"--node {name}: a real node runs its collector itself "
                               "(python -m appliance.telemetry.agent, deployed by the monitoring stage)")
        if options["interval"] <= 0:
            raise CommandError(f"--interval {options['interval']}: must be more than 0 seconds")
        os.environ["APPLIANCE_SIM_SYSROOT"] = node.sysroot
        influx = settings.INFLUXDB
        sink = InfluxSink(influx["url"], influx["token"], influx["org"], influx["bucket"]) if influx["url"] else None
        agent = Agent(Collector(node.name, node.sysroot, str(nvml.library_path())),
                      Buffer(buffer_path(node.name), options["buffer_max_mib"] * 2**20), sink, options["metrics_port"])
        try:
            agent.start()
        except CollectorError as exc:
            raise CommandError(str(exc)) from None
        signal.signal(signal.SIGTERM, lambda *_: agent.stopping.set())
        try:
            agent.run(options["interval"], 1 if options["once"] else None)
        except KeyboardInterrupt:
            pass
        finally:
            agent.stop()
        depth = agent.buffer_depth_at_stop
        self.stdout.write(f"{node.name}: {agent.sweeps} sweep(s), last at {agent.last_sweep_ns}, "
                          f"buffered {depth['points']} point(s) in {depth['rows']} row(s)"
                          + (f", sink {sink.url}" if sink else ", no sink configured (settings.INFLUXDB)"))
