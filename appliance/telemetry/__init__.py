"""Telemetry: the collector a node runs (collector.py, buffer.py, sinks.py, exposition.py: plain Python and
pynvml, no Django, since they are deployed to nodes) and the appliance's side that configures and starts it
(management/commands/telemetry.py)."""
