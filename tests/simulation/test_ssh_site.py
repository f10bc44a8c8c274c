"""A real node is reached as the site definition says: its `ssh` section (login, key, known_hosts, port,
become, Python) is checked on import, each mistake named with its line, and becomes the host's
connection in the inventory; the controller's interpreter is never sent."""

import pytest

from appliance.inventory.models import Appliance, Node
from appliance.provisioning import playbook_vars

SSH_SECTION = """
ssh:
  user: hgx-admin
  private_key_file: /etc/appliance/ssh/id_ed25519
  known_hosts: /etc/appliance/ssh/known_hosts
  port: 2222
  become_method: sudo
  become_user: root
  python: /usr/bin/python3.10
"""


def ssh_errors(settings, section: str) -> list:
    """The errors of the demo site with `section` appended, in the ssh section only (the demo names a BMC
    credential this test database does not hold)."""
    from appliance.inventory.sitedef import SiteValidationError, parse_site

    try:
        parse_site(settings.DEMO_SITE.read_text() + section, "site.yml")
    except SiteValidationError as exc:
        return [error for error in exc.errors if error.path.startswith("ssh")]
    return []


def ssh_values(section: str) -> dict:
    from appliance.inventory.sitedef import ErrorCollector, _Parser, load_yaml

    collector = ErrorCollector("site.yml")
    fields = load_yaml(section, collector).mapping()
    values = _Parser(collector).ssh(fields["ssh"])
    assert not collector.errors
    return values


@pytest.mark.django_db
def test_the_site_ssh_section_is_the_real_nodes_connection(settings):
    assert ssh_errors(settings, SSH_SECTION) == []
    ssh = ssh_values(SSH_SECTION)
    assert ssh == {"user": "hgx-admin", "private_key_file": "/etc/appliance/ssh/id_ed25519",
                        "known_hosts": "/etc/appliance/ssh/known_hosts", "port": 2222, "become_method": "sudo",
                        "become_user": "root", "python": "/usr/bin/python3.10"}
    appliance = Appliance.objects.create(name="rack1", settings={"ssh": ssh})
    node = Node.objects.create(appliance=appliance, name="gpu01", role="gpu", management_address="10.0.0.11")
    assert playbook_vars.connection_vars(node, simulated=False) == {
        "ansible_connection": "ssh",
        "ansible_host": "10.0.0.11",
        "ansible_port": 2222,
        "ansible_user": "hgx-admin",
        "ansible_ssh_private_key_file": "/etc/appliance/ssh/id_ed25519",
        "ansible_ssh_common_args": "-o UserKnownHostsFile=/etc/appliance/ssh/known_hosts "
                                   "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes",
        "ansible_become": True,
        "ansible_become_method": "sudo",
        "ansible_become_user": "root",
        "ansible_python_interpreter": "/usr/bin/python3.10",
    }


@pytest.mark.django_db
def test_a_real_node_without_an_ssh_section_discovers_its_python_and_becomes_root(settings):
    appliance = Appliance.objects.create(name="rack2")
    node = Node.objects.create(appliance=appliance, name="gpu01", role="gpu", management_address="10.0.0.12")
    variables = playbook_vars.connection_vars(node, simulated=False)
    assert (variables["ansible_user"], variables["ansible_port"], variables["ansible_python_interpreter"],
            variables["ansible_become_user"]) == ("appliance", 22, "auto_silent", "root")
    assert variables["ansible_ssh_private_key_file"] == str(settings.KEYS_DIR / "ssh" / "id_ed25519")


@pytest.mark.django_db
@pytest.mark.parametrize("line, message", [
    ("  user: Root Admin", "'Root Admin' is not a user name (lower-case letters, digits, '_' and '-', at most 32)"),
    ("  private_key_file: keys/id", "'keys/id' is not an absolute path on the controller"),
    ("  port: 70000", "70000 is out of range (must be between 1 and 65535)"),
    ("  become_method: runas", "'runas' is not one of: sudo, su, doas"),
    ("  python: python3", "'python3': an absolute path to the nodes' Python, or auto_silent"),
    ("  password: secret", "unknown key (allowed here: user, private_key_file, known_hosts, port, become_method, "
                           "become_user, python)"),
])
def test_a_wrong_ssh_value_is_one_error_naming_its_place(settings, line, message):
    [error] = ssh_errors(settings, "\nssh:\n" + line + "\n")
    assert error.message == message, (error.path, error.message)
    assert error.line == len(settings.DEMO_SITE.read_text().splitlines()) + 3
