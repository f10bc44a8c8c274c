"""The site definition's optional `telemetry:` section (the nodes' collectors): checked values are kept in
the appliance's settings, where the monitoring stage reads them; every bad value is one error naming
file:line and the field."""

import pytest

from appliance.inventory import credentials
from appliance.inventory.models import Appliance
from appliance.inventory.services import import_site, validate_site
from appliance.inventory.sitedef import SiteValidationError

GOOD = """
telemetry:
  interval_s: 0.5
  ingest_url: https://mgmt01.example:8443/telemetry/ingest
  metrics_port: 9500
  buffer_max_mib: 512
  influxdb: {url: "https://influx.example:8086", org: hpc-ops, bucket: gpu.telemetry, token_credential: influx-token}
"""

BAD = """
telemetry:
  interval_s: 0.05
  ingest_url: "ftp://mgmt01/telemetry/ingest"
  metrics_port: 70000
  buffer_max_mib: 1
  colour: blue
  influxdb:
    url: "https://influx.example:8086/?org=x y"
    org: "hpc ops; rm -rf /"
    bucket: telemetry
    token_credential: influx-token
"""


def line_of(text: str, needle: str) -> int:
    # The demo's comment block names the keys too: the line of the value, not of its description.
    return next(number for number, line in enumerate(text.splitlines(), start=1)
                if needle in line and not line.lstrip().startswith("#"))


def with_telemetry(demo_text: str, section: str) -> str:
    return demo_text.rstrip("\n") + "\n" + section


@pytest.fixture
def allowed(site_env):
    """What an Administrator allowed for GOOD: its ingest endpoint and an InfluxDB token bound to its InfluxDB."""
    credentials.create("site-ingest", kind="ingest", endpoints=["https://mgmt01.example:8443"])
    credentials.create("influx-token", kind="influxdb", secret="influx-Tok3n", endpoints=["https://influx.example:8086"])


def test_a_telemetry_section_is_kept_in_the_appliance_settings(demo_text, allowed):
    text = with_telemetry(demo_text, GOOD)

    site = validate_site(text, "demo.yml")
    import_site(text, "demo.yml")

    expected = {"interval_s": 0.5, "ingest_url": "https://mgmt01.example:8443/telemetry/ingest",
                "metrics_port": 9500, "buffer_max_mib": 512,
                "influxdb": {"url": "https://influx.example:8086", "org": "hpc-ops", "bucket": "gpu.telemetry",
                             "token_credential": "influx-token"}}
    assert site.telemetry == expected
    assert Appliance.objects.get(name=site.name).settings["telemetry"] == expected


def test_every_bad_telemetry_value_is_named_with_its_line(demo_text, site_env):
    text = with_telemetry(demo_text, BAD)

    with pytest.raises(SiteValidationError) as caught:
        validate_site(text, "demo.yml")

    found = {(error.line, error.path): error.message for error in caught.value.errors}
    assert found == {
        (line_of(text, "interval_s: 0.05"), "telemetry.interval_s"): "0.05 is out of range (must be between 0.1 and 3600)",
        (line_of(text, "ftp://"), "telemetry.ingest_url"):
            "'ftp://mgmt01/telemetry/ingest' is not a URL (expected https://host[:port])",
        (line_of(text, "metrics_port"), "telemetry.metrics_port"): "70000 is out of range (must be between 1 and 65535)",
        (line_of(text, "buffer_max_mib"), "telemetry.buffer_max_mib"):
            "1 is out of range (must be between 16 and 65536)",
        (line_of(text, "colour"), "telemetry.colour"):
            "unknown key (allowed here: interval_s, ingest_url, metrics_port, buffer_max_mib, influxdb)",
        (line_of(text, "?org=x y"), "telemetry.influxdb.url"):
            "'https://influx.example:8086/?org=x y' is not a URL (expected https://host[:port])",
        (line_of(text, "hpc ops"), "telemetry.influxdb.org"):
            "'hpc ops; rm -rf /' is not an InfluxDB organisation or bucket name (letters, digits, '-', '_', '.')",
    }
    assert str(caught.value).count("demo.yml:") >= 7


@pytest.mark.parametrize("value, message", [
    ('"http://mgmt01:8000/telemetry/ingest?x=1"', "the ingest URL takes no query or fragment"),
    ("true", "expected text, got true/false"),
    ("[http://a]", "expected text, got a list"),
])
def test_an_ingest_url_that_is_not_a_plain_http_url_is_refused(demo_text, site_env, value, message):
    text = with_telemetry(demo_text, f"telemetry:\n  ingest_url: {value}\n")

    with pytest.raises(SiteValidationError) as caught:
        validate_site(text, "demo.yml")

    [error] = caught.value.errors
    assert (error.line, error.path) == (line_of(text, "ingest_url"), "telemetry.ingest_url")
    assert message in error.message


def test_a_site_without_the_section_keeps_none(demo_text, allowed):
    import_site(with_telemetry(demo_text, GOOD), "demo.yml")

    site = validate_site(demo_text, "demo.yml")
    import_site(demo_text, "demo.yml")

    assert site.telemetry == {}
    assert "telemetry" not in Appliance.objects.get(name=site.name).settings
