"""Signals provisioning sends to the apps above it, which it must not import (the layer order, DESIGN.md).

demo_workload_started: at the end of a whole bootstrap of a simulated appliance, once its demo workload runs
(started then, or already running). Keyword arguments: `appliance`, `run`. The simulation connects the demo's
story (simulation/demo.py: the models its services serve, registered, promoted and deployed through the
lifecycle; the pools' lending policies); a receiver that raises fails the run with its message.
"""

from django.dispatch import Signal

demo_workload_started = Signal()
