"""The simulated appliance: nodes that are directories, hardware that is a state file, real BMC emulators.

Layout (SIMULATION_DIR = APPLIANCE_STATE_DIR/simulation):
  nodes/<node>/                       the node's sysroot (Node.sysroot); playbooks write under it
  nodes/<node>/var/lib/appliance-sim/state.json   the node's hardware and OS state (state.py)
  nodes/<node>/var/lib/appliance-sim/nvml.state   line-oriented view read by the NVML library
  nodes/<node>/proc/{cmdline,modules,mounts}, sys/class/infiniband/..., dev/kmsg   views kept in step
  bin/<command>                       wrappers of the simulated commands (tools/), first on the PATH
  lib/libnvidia-ml.so.1               the simulated NVML (nvml/simnvml.c), built on first use
  ca/ca.pem, bmc-password             the BMCs' CA and password (bmc.ensure_credentials)
  bmc/<node>.{pid,log,htpasswd,crt,key}   one sushy-emulator per node

Decisions the stages rely on:
- InfiniBand ports are cabled and managed from the start (Active, LinkUp, the platform's rate);
  the faults port_down and port_rate change that.
- update-grub applies the kernel command line at once (as if the node rebooted); `reboot` boots the
  node again from its configuration on disk (modules-load.d, blacklists, enabled units, sysctl.d).
- The factory OS has nouveau loaded; `modprobe nvidia` fails until it is unloaded (or blacklisted
  and the node rebooted). NVML answers DRIVER_NOT_LOADED until the `nvidia` module is loaded.
- A BMC keeps its BIOS attributes and power state in the node's state file, so a restarted emulator
  (stop/start, or ensure after a crash) serves what was set; the first start serves the registry's
  factory values.
"""
