"""What a stage's playbook is given: the Ansible inventory generated from the database, the extra
variables, and the secrets (interfaces contract, section 2).

Secrets are rendered twice, as AWX does: once for real into a vars file only the run can read, and
once masked for display. The inventory itself holds no secret: each host's `bmc_password` is a
template pointing into the secrets file, so the inventory can be kept and shown as it was used.

A BMC's login comes from its credential through appliance.inventory.credentials.login_for_run, the
one gate that refuses a credential to an endpoint it is not bound to: a stage whose BMC was pointed
elsewhere fails before anything is sent.
"""

from dataclasses import dataclass, field
from pathlib import Path

from appliance.core.secrets import MASK
from appliance.inventory.models import Node

from . import baseline, repository

SECRETS_VAR = "appliance_bmc_passwords"
# The node's Python venv holding the NVML binding (the node_python role), relative to the node's root.
NODE_PYTHON_VENV = "/opt/appliance/python"
# A real node's SSH login unless the appliance's settings say otherwise (settings["ssh"]).
REAL_NODE_SSH = {"user": "appliance", "become_method": "sudo", "become_user": "root", "python": "auto_silent"}


class SecretUnavailable(RuntimeError):
    pass


@dataclass
class PlaybookInput:
    inventory: dict
    extravars: dict
    secrets: dict
    secret_values: list[str] = field(default_factory=list)

    def masked_secrets(self) -> dict:
        return {name: {host: MASK for host in values} for name, values in self.secrets.items()}


def bmc_login(bmc):
    """The BMC's login for this run (user name, password, CA file), if its credential may be sent there."""
    from appliance.inventory.credentials import CredentialRefused, login_for_run

    try:
        return login_for_run(bmc)
    except CredentialRefused as exc:
        raise SecretUnavailable(f"{bmc.node.name}: BMC credential refused: {exc}") from None


def node_environment(node: Node) -> dict:
    # Only nodes of a simulated appliance have simulated tools and NVML to point at.
    if not node.sysroot or not node.appliance.simulated:
        return {}
    from appliance.simulation.services import node_environment as simulated_environment

    return dict(simulated_environment(node))


def real_node_ssh(appliance) -> dict:
    """A real node's SSH settings: the appliance's `ssh` settings over the defaults."""
    return {**REAL_NODE_SSH, **((appliance.settings or {}).get("ssh") or {})}


def connection_vars(node: Node, simulated: bool) -> dict:
    """How Ansible reaches the node: over SSH with the appliance's key and host keys checked, become
    for privileges, and the node's own Python (never the controller's). A simulated node is reached the
    same way, at its own SSH server (appliance.simulation.sshd)."""
    if simulated:
        from appliance.simulation import sshd

        return sshd.connection_vars(node)
    from django.conf import settings

    ssh = real_node_ssh(node.appliance)
    known_hosts = ssh.get("known_hosts") or str(Path(settings.STATE_DIR) / "ssh" / "known_hosts")
    key = ssh.get("private_key_file") or str(Path(settings.KEYS_DIR) / "ssh" / "id_ed25519")
    return {
        "ansible_connection": "ssh",
        "ansible_host": node.management_address,
        "ansible_port": int(ssh.get("port", 22)),
        "ansible_user": ssh["user"],
        "ansible_ssh_private_key_file": key,
        "ansible_ssh_common_args": (f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes "
                                    "-o IdentitiesOnly=yes"),
        "ansible_become": True,
        "ansible_become_method": ssh["become_method"],
        "ansible_become_user": ssh["become_user"],
        "ansible_python_interpreter": ssh["python"],
    }


def host_vars(node: Node) -> tuple[dict, str | None]:
    """A host's variables, and its BMC password (kept apart from them)."""
    spec = node.platform.spec if node.platform_id else {}
    simulated = bool(node.sysroot)
    variables = {
        "sysroot": node.sysroot or "",
        "node_role": node.role,
        "simulated": simulated,
        "node_environment": node_environment(node),
        "management_address": node.management_address,
        "ipoib_addresses": node.ipoib_addresses or {},
        "platform": spec or {},
        "bios_registry": baseline.load_registry(spec),
    }
    variables["appliance_node_python"] = (variables["sysroot"].rstrip("/") + NODE_PYTHON_VENV) + "/bin/python3"
    variables.update(connection_vars(node, simulated))
    password = None
    bmc = getattr(node, "bmc", None) if hasattr(node, "bmc") else None
    if bmc is not None:
        login = bmc_login(bmc)
        variables["bmc"] = {"url": bmc.url, "username": login.username, "verify_tls": bmc.verify_tls,
                            "ca_file": login.ca_file, "system_id": bmc.system_id}
        password = login.password
        variables["bmc_password"] = "{{ " + SECRETS_VAR + "[inventory_hostname] }}"
    else:
        variables["bmc"] = {}
    return variables, password


def appliance_vars(appliance) -> dict:
    return {
        "appliance": {"name": appliance.name, "simulated": appliance.simulated, "settings": appliance.settings or {}},
        # Where every node installs from (air-gapped): roles package_sources and node_python.
        "package_repository": repository.playbook_vars(appliance),
        "networks": [{"name": n.name, "kind": n.kind, "cidr": n.cidr, "pkey": n.pkey, "mtu": n.mtu}
                     for n in appliance.networks.all()],
        "filesystems": [{"name": f.name, "type": f.type, "servers": f.servers, "source": f.source,
                         "mount_point": f.mount_point, "options": f.options, "tunables": f.tunables}
                        for f in appliance.filesystems.all()],
        "pools": [{"name": p.name, "kind": p.kind, "scheduler": p.scheduler, "sharing": p.sharing,
                   "settings": p.settings, "nodes": sorted(m.node.name for m in p.memberships.all())}
                  for p in appliance.pools.prefetch_related("memberships__node")],
    }


def build(run, stage, nodes: list[Node]) -> PlaybookInput:
    hosts, passwords = {}, {}
    for node in nodes:
        variables, password = host_vars(node)
        hosts[node.name] = variables
        if password is not None:
            passwords[node.name] = password
    inventory = {"all": {"hosts": hosts}}
    extravars = {**appliance_vars(run.appliance), "stage": stage.name, **stage.extra_vars(run, nodes)}
    # A stage's own secrets (the collectors' ingest tokens) travel like the BMC passwords: {variable: {host: secret}}.
    stage_secrets = stage.secret_vars(run, nodes)
    if SECRETS_VAR in stage_secrets:
        raise ValueError(f"stage {stage.name}: its secrets provider may not define {SECRETS_VAR}")
    secrets = {SECRETS_VAR: passwords, **stage_secrets}
    values = {*passwords.values(), *(value for per_host in stage_secrets.values() for value in per_host.values())}
    return PlaybookInput(inventory, extravars, secrets, sorted(values, key=len, reverse=True))
