"""The node installs from the appliance's own repository only (air-gapped), on one simulated node:
the package_sources and node_python roles point apt at the repository served by the simulated
management node, and make the node's venv with the NVML binding from it, hash-checked and idempotent.
(That apt then refuses what the repository does not list: tests/provisioning/test_repository.py.)"""

import subprocess

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

NODE_PYTHON_PLAY = """
- name: Node Python
  hosts: all
  gather_facts: false
  environment: "{{ node_environment | default({}) }}"
  roles:
    - role: node_python
"""


@pytest.fixture(scope="module")
def node_python_playbook(tmp_path_factory):
    path = tmp_path_factory.mktemp("node-python") / "node_python.yml"
    path.write_text(NODE_PYTHON_PLAY)
    return str(path)


def test_the_node_venv_gets_the_nvml_binding_from_the_repository_and_stays(simulated_appliance,
                                                                          node_python_playbook):
    sim = simulated_appliance

    first = sim.run(node_python_playbook)

    assert first.returncode == 0, first.output
    venv = sim.sysroot / "opt/appliance/python"
    source = (sim.sysroot / "etc/apt/sources.list.d/appliance.list").read_text()
    assert f"deb [trusted=yes] {sim.package_repository['url']}/apt appliance main" in source
    requirements = (venv / "appliance-requirements.txt").read_text().splitlines()
    assert ("nvidia-ml-py==13.615.71 "
            "--hash=sha256:959bf4adf6fe1308e4bd739e722236b0d1ec8392e2cefad33ff70c311380b9b6") in requirements
    # The collector's sink client, with a hash like every line.
    assert ("influxdb-client==1.50.0 "
            "--hash=sha256:f172975cf7f0c95bfe74f288b31273393b164d2c58a948de55497d9956ab49be") in requirements
    assert len(requirements) == 8 and all(" --hash=sha256:" in line for line in requirements)
    # Imported from the venv's own site packages, with the environment of the node (its simulated NVML).
    probe = subprocess.run([str(venv / "bin/python3"), "-c", "import importlib.metadata as m, pynvml, influxdb_client; "
                            "print(m.version('nvidia-ml-py'), pynvml.__file__, influxdb_client.__file__)"],
                           capture_output=True, text=True, check=True, env={"PIP_CONFIG_FILE": "/dev/null"})
    version, module_file, client_file = probe.stdout.split()
    assert version == "13.615.71" and module_file.startswith(str(venv)) and client_file.startswith(str(venv))
    assert sim.state()["packages"]["python3-pip"] == "22.0.2+dfsg-1ubuntu0.4"
    served = (sim.workdir / "simulation" / "repository-server.log").read_text()
    assert "GET /python/simple/nvidia-ml-py/ HTTP" in served
    assert "GET /python/files/nvidia_ml_py-13.615.71-py3-none-any.whl HTTP" in served
    assert "GET /apt/pool/main/p/python3-pip/python3-pip_22.0.2+dfsg-1ubuntu0.4_amd64.deb HTTP" in served

    second = sim.run(node_python_playbook)

    assert second.returncode == 0, second.output
    assert second.changed() == 0, second.output


def test_a_wheel_that_differs_from_the_pinned_hash_is_refused_on_the_node(simulated_appliance,
                                                                         node_python_playbook):
    sim = simulated_appliance
    requirements = ["nvidia-ml-py==13.615.71 --hash=sha256:" + "0" * 64]
    venv = sim.sysroot / "opt/appliance/python"
    subprocess.run([str(venv / "bin/python3"), "-m", "pip", "uninstall", "-y", "-q", "nvidia-ml-py"], check=True,
                   env={"PIP_CONFIG_FILE": "/dev/null"})

    run = sim.run(node_python_playbook, extra_vars={
        "package_repository": {**sim.package_repository, "python_requirements": requirements}})

    assert run.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in run.output
    assert not list(venv.glob("lib/python3*/site-packages/pynvml.py"))

