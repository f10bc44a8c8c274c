"""Site values that reach files on the nodes have a type and a pattern; untrusted YAML has limits.

A tunable, a mount point or a label with a newline would become a second line of a root-owned file
(modprobe.d, a systemd unit); a mount point with '..' would leave the node's directory. Each is refused
at parse time with file:line and field path. A YAML alias bomb is refused before it is expanded.
"""

import time

import pytest
from django.core.management import CommandError, call_command

from appliance.core.roles import Role
from appliance.inventory.services import validate_site
from appliance.inventory.sitedef import SiteValidationError

SCRATCH_TUNABLES = '    tunables: {"osc.*.max_rpcs_in_flight": 64, "osc.*.max_dirty_mb": 2000, "llite.*.max_read_ahead_mb": 1024}'


def errors_for(text: str, prefix: str = "filesystems") -> list[str]:
    """The errors (as `file:line: path: message`) whose field path starts with `prefix`."""
    with pytest.raises(SiteValidationError) as caught:
        validate_site(text, "site.yml")
    return [str(e) for e in caught.value.errors if e.path.startswith(prefix)]


def line_of(text: str, needle: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), start=1) if needle in line)


def with_scratch(demo_text: str, old: str, new: str) -> str:
    assert old in demo_text
    return demo_text.replace(old, new, 1)


def test_a_tunable_value_with_a_newline_is_refused_with_file_line_and_path(site_env, demo_text):
    text = with_scratch(demo_text, SCRATCH_TUNABLES,
                        '    tunables: {"osc.*.max_dirty_mb": "2000\\ninstall lnet /bin/sh -c id"}')
    line = line_of(text, "install lnet")
    errors = errors_for(text)
    assert (f"site.yml:{line}: filesystems[0].tunables.osc.*.max_dirty_mb: control character U+000A (line feed) "
            "is not allowed in text") in errors


@pytest.mark.parametrize(("value", "name"), [('"a\\rb"', "carriage return"), ('"a\\0b"', "nul"),
                                             ('"a\\x85b"', "next line"), ('"a\\tb"', "tab")])
def test_every_control_character_is_refused_anywhere(site_env, demo_text, value, name):
    text = demo_text.replace("description: Simulated appliance", f"description: {value} #", 1)
    line = line_of(text, "description:")
    assert [e for e in errors_for(text, "appliance") if "control character" in e] == [
        f"site.yml:{line}: appliance.description: control character "
        f"U+{ {'carriage return': 0x0D, 'nul': 0, 'next line': 0x85, 'tab': 9}[name]:04X} ({name}) "
        "is not allowed in text"]


def test_a_key_with_a_control_character_is_refused(site_env, demo_text):
    text = demo_text.replace("labels: {rack: r01, slot: 1}", 'labels: {rack: r01, "slot\\nx": 1}', 1)
    line = line_of(text, "slot\\nx")
    assert f"site.yml:{line}: nodes[0].labels.slot\\nx: control character U+000A (line feed) in a key is not allowed" \
        in errors_for(text, "nodes[0].labels")


def test_an_unknown_tunable_is_refused_with_the_valid_names(site_env, demo_text):
    text = with_scratch(demo_text, SCRATCH_TUNABLES, '    tunables: {"lnet.install": 1}')
    [error] = errors_for(text)
    assert error.startswith(f"site.yml:{line_of(text, 'lnet.install')}: filesystems[0].tunables.lnet.install: "
                            "unknown lustre tunable 'lnet.install' (valid: ")
    assert "ko2iblnd.peer_credits" in error and "osc.*.max_rpcs_in_flight" in error


@pytest.mark.parametrize(("tunable", "message"), [
    ('"ko2iblnd.peer_credits": 256', "ko2iblnd.peer_credits: 256 is out of range (1-255)"),
    ('"osc.*.max_rpcs_in_flight": "64 lnet"', "osc.*.max_rpcs_in_flight: '64 lnet' is not a whole number"),
    ('"llite.*.max_read_ahead_mb": true', "llite.*.max_read_ahead_mb: True is not a whole number"),
])
def test_tunable_values_are_typed(site_env, demo_text, tunable, message):
    text = with_scratch(demo_text, SCRATCH_TUNABLES, f"    tunables: {{{tunable}}}")
    path = tunable.split(":")[0].strip('"')
    assert errors_for(text) == [f"site.yml:{line_of(text, 'tunables:')}: filesystems[0].tunables.{path}: {message}"]


def test_nfs_takes_no_tunables_and_known_ones_pass(site_env, demo_text):
    text = demo_text.replace('options: "proto=rdma,port=20049,nconnect=8,vers=4.2"',
                             'options: "proto=rdma,port=20049,nconnect=8,vers=4.2"\n    tunables: {rsize: 1048576}')
    assert errors_for(text) == [f"site.yml:{line_of(text, 'rsize')}: filesystems[1].tunables.rsize: unknown nfs-rdma "
                                "tunable 'rsize' (valid: none: tune it through its mount options)"]
    good = with_scratch(demo_text, SCRATCH_TUNABLES,
                        '    tunables: {"ko2iblnd.peer_credits": 128, "ko2iblnd.concurrent_sends": 256, '
                        '"ko2iblnd.map_on_demand": 32, "lnet.lnet_transaction_timeout": 50}')
    filesystem = validate_site(good, "site.yml").filesystems[0]
    assert filesystem.tunables == {"ko2iblnd.peer_credits": 128, "ko2iblnd.concurrent_sends": 256,
                                   "ko2iblnd.map_on_demand": 32, "lnet.lnet_transaction_timeout": 50}


@pytest.mark.parametrize(("mount_point", "message"), [
    ("/mnt/../../x", "'/mnt/../../x' is not normalized: '.' and '..' are not allowed in a mount point"),
    ("/mnt/../../../keys", "'/mnt/../../../keys' is not normalized: '.' and '..' are not allowed in a mount point"),
    ("/etc/modprobe.d", "'/etc/modprobe.d' is a system directory; mount filesystems elsewhere (e.g. /mnt/NAME, /lustre/NAME)"),
    ("/", "'/' is a system directory; mount filesystems elsewhere (e.g. /mnt/NAME, /lustre/NAME)"),
    ("/var", "'/var' is a system directory; mount filesystems elsewhere (e.g. /mnt/NAME, /lustre/NAME)"),
    ("/mnt/scratch/", "'/mnt/scratch/' ends with '/' (write /mnt/scratch)"),
    ("/mnt//scratch", "'/mnt//scratch' has an empty component ('//')"),
    ("mnt/scratch", "'mnt/scratch' is not an absolute path"),
    ('"/mnt/a b"', "'/mnt/a b': component 'a b' has characters other than letters, digits and . _ @ + - "
                   "(or starts with '.')"),
])
def test_mount_points_are_normalized_absolute_paths_outside_the_system(site_env, demo_text, mount_point, message):
    text = demo_text.replace("mount_point: /mnt/scratch", f"mount_point: {mount_point}", 1)
    assert errors_for(text) == [f"site.yml:{line_of(text, 'mount_point: ' + mount_point)}: "
                                f"filesystems[0].mount_point: {message}"]


def test_mount_options_come_from_the_catalogue(site_env, demo_text):
    text = (demo_text.replace("options: [flock, noatime]", "options: [flock, x-systemd.requires=evil]", 1)
            .replace("nconnect=8,vers=4.2", "nconnect=64,vers=4.2", 1))
    assert errors_for(text) == [
        f"site.yml:{line_of(text, 'x-systemd')}: filesystems[0].options[1]: unknown lustre mount option "
        "'x-systemd.requires=evil' (valid: _netdev, acl, checksum, flock, lazystatfs, localflock, noacl, noatime, "
        "nochecksum, nodev, nodiratime, noexec, noflock, nolazystatfs, nosuid, nouser_xattr, relatime, ro, rw, "
        "user_xattr)",
        f"site.yml:{line_of(text, 'nconnect=64')}: filesystems[1].options: mount option nconnect: 64 is out of "
        "range (1-16)"]


def test_filesystem_sources_follow_their_type(site_env, demo_text):
    text = demo_text.replace('source: "10.10.1.1@o2ib:/scratch"', 'source: "10.10.1.1@o2ib:/scratch,x-mount.mkdir"', 1)
    assert errors_for(text) == [f"site.yml:{line_of(text, 'x-mount')}: filesystems[0].source: "
                                "'10.10.1.1@o2ib:/scratch,x-mount.mkdir' is not a lustre source (MGS NIDs, ':/' and "
                                "the filesystem name, e.g. 10.10.1.1@o2ib:/scratch)"]


def test_labels_and_pool_settings_have_patterns(site_env, demo_text):
    text = (demo_text.replace("labels: {rack: r01, slot: 1}", 'labels: {rack: "r01 r02", slot: 1}', 1)
            .replace("settings: {partition: train}", "settings: {partition: train, max_time: '1-00:00:00', "
                     "ExecStart: x}", 1))
    assert errors_for(text, "nodes[0].labels") == [
        f"site.yml:{line_of(text, 'r01 r02')}: nodes[0].labels.rack: label value 'r01 r02' is not a number, "
        "true/false or text of letters, digits, '-', '_', '.' (at most 63 characters)"]
    assert errors_for(text, "pools") == [
        f"site.yml:{line_of(text, 'ExecStart')}: pools[0].settings.ExecStart: unknown key (allowed here: "
        "partition, max_time, time_slicing, mig_strategy, mig_config)"]


# --------------------------------------------------------------------------------------------------
# YAML limits

BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]) + "\n"


def test_the_billion_laughs_bomb_is_refused_fast(site_env):
    started = time.monotonic()
    with pytest.raises(SiteValidationError) as caught:
        validate_site(BILLION_LAUGHS, "bomb.yml")
    assert time.monotonic() - started < 0.5
    assert [str(e) for e in caught.value.errors] == [
        "bomb.yml:5: alias *d expands the document beyond 50000 nodes (setting SITE_MAX_NODES): aliases may "
        "repeat a part, not multiply it"]


def test_anchors_within_the_limits_still_work(site_env, demo_text):
    text = demo_text.replace("labels: {rack: r01, slot: 1}", "labels: &r01 {rack: r01}", 1)
    text = text.replace("labels: {rack: r01, slot: 2}", "labels: *r01", 1)
    site = validate_site(text, "site.yml")
    assert site.nodes[1].labels == {"rack": "r01"}


def test_depth_size_and_recursion_limits(site_env, settings):
    deep = "a: " + "[" * 30 + "]" * 30 + "\n"
    with pytest.raises(SiteValidationError, match=r"^deep.yml:1: nested deeper than 20 levels \(setting SITE_MAX_DEPTH\)$"):
        validate_site(deep, "deep.yml")
    through_alias = "a: &a " + "[" * 15 + "1" + "]" * 15 + "\nb: " + "[" * 6 + "*a" + "]" * 6 + "\n"
    with pytest.raises(SiteValidationError, match=r"^alias.yml:2: alias \*a nests the document deeper than 20 levels"):
        validate_site(through_alias, "alias.yml")
    recursive = "a: &a\n  - b\n  - *a\n"
    with pytest.raises(SiteValidationError, match=r"^rec.yml:3: alias \*a refers to a collection that contains it"):
        validate_site(recursive, "rec.yml")
    settings.SITE_MAX_BYTES = 100
    with pytest.raises(SiteValidationError, match=r"^big.yml:1: the file has 101 bytes; the limit is 100 "
                                                  r"\(setting SITE_MAX_BYTES\)$"):
        validate_site("#" * 100 + "\n", "big.yml")


def test_the_api_answers_a_bomb_with_a_400_naming_the_line(site_env, client_for):
    started = time.monotonic()
    response = client_for(Role.OPERATOR).post("/api/v1/inventory/site/validate/?filename=bomb.yml", BILLION_LAUGHS,
                                              content_type="application/yaml")
    assert time.monotonic() - started < 2
    assert response.status_code == 400, response.content
    assert response.json()["error"]["errors"] == [
        {"file": "bomb.yml", "line": 5, "path": "",
         "message": "alias *d expands the document beyond 50000 nodes (setting SITE_MAX_NODES): aliases may repeat "
                    "a part, not multiply it"}]


def test_the_cli_names_file_and_line_of_a_bomb(site_env, tmp_path, db):
    from io import StringIO

    bomb = tmp_path / "bomb.yml"
    bomb.write_text(BILLION_LAUGHS)
    err = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("site", "validate", str(bomb), stdout=StringIO(), stderr=err)
    assert caught.value.returncode == 1
    assert err.getvalue().splitlines() == [f"{bomb}:5: alias *d expands the document beyond 50000 nodes "
                                           "(setting SITE_MAX_NODES): aliases may repeat a part, not multiply it"]


def test_a_value_valid_but_for_a_trailing_newline_is_refused(site_env, demo_text):
    """`$` matches before a final newline: the value patterns are called with fullmatch. A mount point stops at
    the control-character check; a label's value fails its own pattern as well."""
    text = demo_text.replace("mount_point: /mnt/scratch", 'mount_point: "/mnt/scratch\\n"', 1)
    assert errors_for(text) == [f"site.yml:{line_of(text, 'mount_point: ')}: filesystems[0].mount_point: control "
                                "character U+000A (line feed) is not allowed in text"]
    text = demo_text.replace("labels: {rack: r01, slot: 1}", 'labels: {rack: "r01\\n", slot: 1}', 1)
    line = line_of(text, "r01\\n")
    assert errors_for(text, "nodes[0].labels") == [
        f"site.yml:{line}: nodes[0].labels.rack: control character U+000A (line feed) is not allowed in text",
        f"site.yml:{line}: nodes[0].labels.rack: label value 'r01\\n' is not a number, true/false or text of "
        "letters, digits, '-', '_', '.' (at most 63 characters)"]
