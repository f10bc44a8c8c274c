"""The renderers refuse a value that would break out of its line, even when the site parser was bypassed
(a value already in the database, a view built by code): a newline in a tunable must never become
`install lnet /bin/sh -c ...` in modprobe.d or `ExecStartPost=` in a systemd unit."""

from dataclasses import replace

import pytest

from appliance.partitioning.renderers import fabric, slurm, stage_vars, storage
from appliance.partitioning.renderers.site import RenderError
from tests.partitioning.demo_site import demo_site


def with_filesystem(site, index: int, **changes):
    filesystems = list(site.filesystems)
    filesystems[index] = replace(filesystems[index], **changes)
    return replace(site, filesystems=tuple(filesystems))


def test_a_module_tunable_with_a_newline_is_not_written_to_modprobe_d():
    site = with_filesystem(demo_site(), 0, tunables={"ko2iblnd.peer_credits": "32\ninstall lnet /bin/sh -c id"})
    with pytest.raises(RenderError, match=r"^filesystems lustre: ko2iblnd.peer_credits: '32\\ninstall lnet "):
        storage.render_lnet_conf(site)
    with pytest.raises(RenderError, match=r"^filesystems lustre: "):
        stage_vars.storage_vars(site)


def test_an_lctl_tunable_with_a_newline_is_not_written_to_a_unit():
    site = with_filesystem(demo_site(), 0, tunables={"osc.*.max_rpcs_in_flight": "64\nExecStartPost=/bin/sh -c id"})
    with pytest.raises(RenderError, match=r"^filesystems lustre: osc.\*.max_rpcs_in_flight: "):
        storage.render_lustre_tunables_unit(site.filesystems[0])


def test_the_quoting_helpers_refuse_a_newline_whatever_the_catalogue_says():
    from appliance.partitioning.renderers import quoting

    for helper, value in [(quoting.systemd_value, "a\nb"), (quoting.systemd_exec_argument, "a\rb"),
                          (quoting.slurm_value, "a\x00b"), (quoting.word, "a\x85b")]:
        with pytest.raises(RenderError, match="^field: control character U\\+00"):
            helper(value, "field")
    with pytest.raises(RenderError, match="^field: control character U\\+000A"):
        quoting.modprobe_option("peer_credits", "1\n2", "field")
    with pytest.raises(RenderError, match="^field: control character U\\+000A"):
        quoting.beegfs_setting("connRDMABufNum", "1\n2", "field")
    assert quoting.systemd_value("50% at /mnt/x", "field") == "50%% at /mnt/x"
    assert quoting.systemd_exec_argument("a b$HOME", "field") == '"a b$$HOME"'


@pytest.mark.parametrize("mount_point", ["/mnt/../../../keys", "/mnt/x\nExecStartPre=/bin/sh", "/etc", "mnt/x"])
def test_a_mount_point_out_of_pattern_is_refused_by_the_renderer(mount_point):
    site = with_filesystem(demo_site(), 0, mount_point=mount_point)
    with pytest.raises(RenderError, match=r"^filesystems lustre: mount_point: "):
        storage.render_mount_unit(site.filesystems[0])
    with pytest.raises(RenderError, match=r"^mount point: "):
        storage.unit_name_for_path(mount_point)
    with pytest.raises(RenderError):
        stage_vars.storage_vars(site)


def test_a_source_or_option_with_a_newline_is_refused():
    site = with_filesystem(demo_site(), 0, source="172.17.0.21@o2ib:/lustre\nExecStartPre=/bin/sh")
    with pytest.raises(RenderError, match=r"^filesystems lustre: .* is not a lustre source"):
        storage.render_mount_unit(site.filesystems[0])
    site = with_filesystem(demo_site(), 0, options=("flock\nExecStartPre=/bin/sh",))
    with pytest.raises(RenderError, match=r"^filesystems lustre: unknown lustre mount option"):
        storage.render_mount_unit(site.filesystems[0])
    site = with_filesystem(demo_site(), 2, tunables={"connRDMABufNum": "70\nsysMgmtdHost = evil"})
    with pytest.raises(RenderError, match=r"^filesystems scratch: connRDMABufNum: "):
        storage.render_beegfs_client_conf(site.filesystems[2])


def test_slurm_and_fabric_values_stay_on_their_line():
    site = demo_site()
    train = replace(site.pools[1], settings={"partition": "training\nNodeName=evil"})
    with pytest.raises(RenderError, match=r"^pool train: settings.partition: control character U\+000A"):
        slurm.render_slurm_conf(replace(site, pools=(site.pools[0], train)))
    train = replace(site.pools[1], settings={"max_time": "1-00:00:00 Hidden=YES"})
    with pytest.raises(RenderError, match=r"^pool train: settings.max_time: '1-00:00:00 Hidden=YES' is not a "
                                          r"slurm.conf value"):
        slurm.render_slurm_conf(replace(site, pools=(site.pools[0], train)))
    settings = {**site.settings, "fabric": {**site.settings["fabric"], "routing_engine": "ftree\nguid 0x1"}}
    with pytest.raises(RenderError, match=r"^fabric.routing_engine: control character U\+000A"):
        fabric.render_opensm_conf(replace(site, settings=settings))
    networks = (replace(site.networks[1], name="../../etc/x"),) + site.networks[:1] + site.networks[2:]
    with pytest.raises(RenderError, match=r"^networks ../../etc/x: '../../etc/x' is not usable in a file name"):
        fabric.ipoib_files(replace(site, networks=networks),
                           replace(site.node("gpu01"), ipoib_addresses={"../../etc/x": "172.17.0.11"}))
