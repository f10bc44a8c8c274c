"""What the demo walk-through tripped on in the portal: the deployments page said the advisor's MIG profile
for a service that the pool had placed on a whole GPU (no MIG instance laid out)."""

import pytest
from django.test import Client

from appliance.lifecycle import deployments

from .deploy_support import demo, lay_out_mig, people, production  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def test_the_deployments_page_says_where_the_advisors_mig_size_was_placed(demo, root, people):  # noqa: F811
    deployments.deploy(production(root, people, "v1", 7), user=people["olga"])
    client = Client()
    client.force_login(people["val"])
    page = client.get("/models/deployments/").content.decode()
    assert ('a MIG instance 1g.10gb; <span data-part="whole-gpu">placed on a whole GPU: the pool had no free MIG '
            'instance of that size</span>') in page

    lay_out_mig(demo, 6)
    deployments.deploy(production(root, people, "v2", 8), user=people["olga"], name="llama-mig")
    page = client.get("/models/deployments/").content.decode()
    assert page.count('data-part="whole-gpu"') == 1   # the MIG-placed service has no such note
