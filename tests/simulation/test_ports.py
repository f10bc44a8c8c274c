"""Each state directory allocates its own loopback ports (appliance.simulation.ports): kept once
allocated, never one another state directory's process holds or claims, and the demo site is imported
with them, its credential bound to them and to nothing else."""

import json
import socket
import subprocess
import sys
import textwrap

import pytest
from django.conf import settings

from appliance.inventory.models import BMC, Credential
from appliance.inventory.services import import_site
from appliance.inventory.sitedef import SiteValidationError
from appliance.simulation import ports, services

NODES = ["gpu01", "gpu02", "gpu03", "gpu04", "stor01", "stor02", "mgmt01"]


def test_ports_are_allocated_once_kept_and_distinct_per_state_directory(tmp_path):
    first = ports.allocate(tmp_path / "a", NODES)
    assert sorted(first) == sorted(NODES)
    assert len(set(first.values())) == 7
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    assert all(20000 <= port < low for port in first.values()), first
    assert json.loads((tmp_path / "a" / "ports.json").read_text()) == {"bmc": first}
    assert ports.allocate(tmp_path / "a", NODES) == first
    assert ports.allocate(tmp_path / "a", ["gpu02"]) == {"gpu02": first["gpu02"]}

    other = ports.allocate(tmp_path / "b", NODES)
    assert not set(other.values()) & set(first.values())


def allocate_elsewhere(directory, lowest: int, highest: int) -> subprocess.CompletedProcess:
    """Another process allocating one port, its only candidates lowest..highest."""
    script = textwrap.dedent(f"""
        from appliance.simulation import ports
        ports.LOWEST = {lowest}
        ports._ephemeral_low = lambda: {highest + 1}
        print(ports.allocate({str(directory)!r}, ["gpu01"])["gpu01"])
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=settings.BASE_DIR)


def unclaimed(port: int) -> bool:
    """Whether no process holds the simulation's claim on `port` (tried and let go at once)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(b"\0appliance-simulation-port:" + str(port).encode())
        except OSError:
            return False
    return True


def test_a_port_another_process_claimed_is_passed_over(tmp_path):
    """Two state directories allocating at the same time: the second never takes what the first chose
    before the first's emulators listen on it."""
    # The port after the one allocated must be free for the second half, neither bound nor claimed: by
    # another test's simulation, or by this very worker process, which keeps every claim it made in
    # earlier tests until it exits.
    for attempt in range(20):
        mine = ports.allocate(tmp_path / f"a{attempt}", ["gpu01"])["gpu01"]
        neighbour = mine + 1
        if ports.listening_possible(neighbour) and unclaimed(neighbour):
            break
    else:
        pytest.skip("no allocated port on this machine had a free neighbour in 20 tries")
    alone = allocate_elsewhere(tmp_path / "b", mine, mine)
    assert alone.returncode == 1 and alone.stdout == ""
    assert f"PortError: no free port on 127.0.0.1 between {mine} and {mine}" in alone.stderr
    done = allocate_elsewhere(tmp_path / "c", mine, neighbour)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == neighbour


def test_refresh_moves_a_port_a_foreign_process_listens_on_and_keeps_its_own(tmp_path):
    allocation = ports.allocate(tmp_path, ["gpu01", "gpu02"])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", allocation["gpu01"]))
        squatter.listen()
        assert ports.allocate(tmp_path, ["gpu01", "gpu02"]) == allocation  # without refresh: kept as allocated
        moved = ports.allocate(tmp_path, ["gpu01", "gpu02"], refresh=True)
        assert moved["gpu01"] != allocation["gpu01"] and moved["gpu02"] == allocation["gpu02"]
        assert ports.allocated(tmp_path) == moved
        # Its own emulator listening on it: kept.
        squatter_port = moved["gpu01"]
    with socket.socket() as own:
        own.bind(("127.0.0.1", squatter_port))
        own.listen()
        kept = ports.allocate(tmp_path, ["gpu01"], refresh=True, serving=lambda name, port: name == "gpu01")
        assert kept == {"gpu01": squatter_port}


def test_an_unreadable_allocation_is_one_clear_error(tmp_path):
    (tmp_path / "ports.json").write_text("{not json")
    with pytest.raises(ports.PortError, match=r"ports\.json: not a readable port allocation .*remove it"):
        ports.allocate(tmp_path, ["gpu01"])


def test_the_demo_is_imported_with_its_own_ports_and_its_credential_bound_to_them_only(db, sim_settings):
    services.ensure_credentials()
    allocation = services.demo_bmc_ports()
    text = services.demo_site_text()
    written = settings.DEMO_SITE.read_text().splitlines()
    served = text.splitlines()
    assert len(served) == len(written)
    changed = [(before, after) for before, after in zip(written, served, strict=True) if before != after]
    assert changed == [
        (f'    bmc: {{url: "https://127.0.0.1:{nominal}"}}', f'    bmc: {{url: "https://127.0.0.1:{allocation[name]}"}}')
        for nominal, name in zip(range(18441, 18448), ["gpu01", "gpu02", "gpu03", "gpu04", "stor01", "stor02", "mgmt01"],
                                 strict=True)]

    services.ensure_demo_credential()
    credential = Credential.objects.get(name="demo-bmc")
    assert sorted(credential.endpoints) == sorted(f"https://127.0.0.1:{port}" for port in allocation.values())
    # The file as written names ports this state directory does not serve: its credential may not go there.
    with pytest.raises(SiteValidationError, match="18441"):
        import_site(settings.DEMO_SITE.read_text(), "demo.yml")
    import_site(text, "demo.yml")
    assert {bmc.node.name: bmc.url for bmc in BMC.objects.select_related("node")} == {
        name: f"https://127.0.0.1:{port}" for name, port in allocation.items()}


def test_a_bmc_port_another_process_holds_is_one_clear_error_and_starts_nothing(prepared):
    from appliance.simulation import bmc

    port = int(prepared.bmc.url.rsplit(":", 1)[1])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(services.SimulationError) as refused:
            services.start_bmcs(prepared.appliance)
    assert str(refused.value) == (f"gpu01: port {port} of its BMC URL https://127.0.0.1:{port} is in use by another "
                                  "process (a bootstrap of the demo appliance moves its BMCs to free ports of their own)")
    assert bmc.running_pid("gpu01") is None
