"""The model list, the version list and a version's detail answer with the same number of queries at 3 and at
60 versions ("api" part): the bound is one number, written down, for both sizes (the issue asks for a
constant number at 10,000 versions; a count that grew with the versions would exceed it at 60)."""

import pytest
from django.test import Client

from appliance.core.roles import Role

from .api_support import many_versions

pytestmark = pytest.mark.django_db

API = "/api/v1/lifecycle/"
# Session and user (2), the session's refresh (3: savepoint, update, release), then the page: a list is its
# count, its rows and one prefetch; a version is its row and one query per kind of thing it shows (files,
# aliases, evaluations, stage history, requests and their evidence, deployments, children).
MAX_QUERIES = {
    API + "models/": 8,
    API + "versions/": 8,
    API + "versions/?model=llama": 8,
    API + "models/llama/": 7,
    API + "models/llama/versions/2/": 14,
    API + "requests/": 8,
    API + "deployments/": 8,
}


@pytest.fixture
def viewer(make_user):
    client = Client()
    client.force_login(make_user(Role.VIEWER, "val"))
    return client


@pytest.mark.parametrize("count", [3, 60])
@pytest.mark.parametrize("url", list(MAX_QUERIES))
def test_the_same_bound_at_3_and_at_60_versions(viewer, make_user, django_assert_max_num_queries, count, url):
    erin = make_user(Role.ML_ENGINEER, "erin")
    many_versions("llama", count, erin)
    many_versions("mistral", 3, erin)
    viewer.get(url)  # the session's first read is not the page's
    with django_assert_max_num_queries(MAX_QUERIES[url]):
        response = viewer.get(url)
    assert response.status_code == 200, response.content


def test_what_the_bounded_pages_show(viewer, make_user):
    erin = make_user(Role.ML_ENGINEER, "erin")
    many_versions("llama", 60, erin)
    models = viewer.get(API + "models/").json()["results"]
    assert [(m["name"], m["versions"], m["latest_version"], m["aliases"]) for m in models] == [
        ("llama", 60, 60, {"challenger": 60, "champion": 1})]
    detail = viewer.get(API + "models/llama/versions/2/").json()
    assert [a["path"] for a in detail["artifacts"]] == ["shard-0.safetensors", "shard-1.safetensors",
                                                        "shard-2.safetensors"]
    assert detail["lineage"]["parent"] == "llama/1" and detail["lineage"]["children"] == ["llama/3"]
    assert [e["name"] for e in detail["evaluations"]] == ["mmlu"]
    assert [h["stage"] for h in detail["stage_history"]] == ["registered", "staging"]
    assert [(r["state"], r["requested_by"]) for r in detail["requests"]] == [("rejected", "erin")]
    assert [(d["name"], d["state"], d["appliance"]) for d in detail["deployments"]] == [("llama", "stopped", "lab")]
    page = viewer.get(API + "versions/", {"model": "llama", "page_size": 100}).json()
    assert page["count"] == 60 and [v["number"] for v in page["results"][:3]] == [60, 59, 58]
    assert page["results"][0]["parent"] == "llama/59" and page["results"][0]["aliases"] == ["challenger"]
