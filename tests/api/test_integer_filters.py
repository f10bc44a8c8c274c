"""Integer query parameters: values the database cannot hold, or digits of other scripts, are a 400
naming the parameter (they were 500s), on every list that filters by an integer."""

import json

import pytest

from appliance.core.roles import Role

pytestmark = pytest.mark.django_db

HUGE = "99999999999999999999"
RANGE_MESSAGE = "Enter a whole number between -9223372036854775808 and 9223372036854775807."

INTEGER_FILTERS = [
    ("/api/v1/inventory/nodes/", "pool_id"),
    ("/api/v1/inventory/nodes/", "appliance_id"),
    ("/api/v1/inventory/gpus/", "node_id"),
    ("/api/v1/inventory/gpus/", "index"),
    ("/api/v1/inventory/hcas/", "node_id"),
    ("/api/v1/inventory/hca-ports/", "node_id"),
    ("/api/v1/inventory/hca-ports/", "hca_id"),
    ("/api/v1/inventory/hca-ports/", "port"),
    ("/api/v1/inventory/hca-ports/", "rate_gbps"),
    ("/api/v1/inventory/platforms/", "gpu_count"),
    ("/api/v1/inventory/switches/", "appliance_id"),
    ("/api/v1/inventory/networks/", "appliance_id"),
    ("/api/v1/inventory/filesystems/", "appliance_id"),
    ("/api/v1/inventory/pools/", "appliance_id"),
    ("/api/v1/audit/records/", "actor_id"),
    ("/api/v1/provisioning/stage-runs/", "run"),
    ("/api/v1/provisioning/events/", "stage_run"),
    ("/api/v1/provisioning/events/", "stage_run__run"),
    ("/api/v1/provisioning/events/", "after"),
]


@pytest.mark.parametrize(("endpoint", "parameter"), INTEGER_FILTERS)
def test_integer_filter_beyond_64_bits_is_a_400_naming_the_parameter(client_for, endpoint, parameter):
    response = client_for(Role.ADMINISTRATOR).get(endpoint, {parameter: HUGE})
    assert response.status_code == 400, response.content
    error = json.loads(response.content)["error"]
    assert error["fields"] == {parameter: [RANGE_MESSAGE]}
    assert error["message"] == f"{parameter}: {RANGE_MESSAGE}"


@pytest.mark.parametrize("value", ["-" + HUGE, "9223372036854775808", "1" + "0" * 4000])
def test_integer_filter_range_edges(client_for, value):
    response = client_for(Role.ADMINISTRATOR).get("/api/v1/inventory/nodes/", {"pool_id": value})
    assert response.status_code == 400
    assert json.loads(response.content)["error"]["fields"] == {"pool_id": [RANGE_MESSAGE]}


def test_largest_64_bit_value_is_a_valid_filter_that_matches_nothing(client_for):
    response = client_for(Role.ADMINISTRATOR).get("/api/v1/inventory/nodes/", {"pool_id": "9223372036854775807"})
    assert response.status_code == 200
    assert json.loads(response.content)["count"] == 0


@pytest.mark.parametrize("value", ["¹²³", "١٢٣", "12.5", "1e3", " "])
def test_events_after_takes_ascii_digits_only(client_for, value):
    response = client_for(Role.ADMINISTRATOR).get("/api/v1/provisioning/events/", {"after": value})
    if value == " ":  # blank: no filter
        assert response.status_code == 200
        return
    assert response.status_code == 400
    assert json.loads(response.content)["error"]["fields"] == {"after": ["Enter a whole number in ASCII digits."]}


def test_events_after_filters_by_counter(client_for):
    response = client_for(Role.ADMINISTRATOR).get("/api/v1/provisioning/events/", {"after": "123"})
    assert response.status_code == 200


def test_portal_node_list_ignores_an_out_of_range_pool_id(client_for):
    response = client_for(Role.OPERATOR).get("/inventory/nodes/", {"pool_id": HUGE})
    assert response.status_code == 200
