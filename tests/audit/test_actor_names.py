"""A record without a person as actor names what acted: "system" for a task or the appliance itself
(a beat tick, a watchdog), "anonymous" only for a request nobody logged in made."""

import pytest

from appliance import audit
from appliance.core import context
from appliance.core.roles import Role

pytestmark = pytest.mark.django_db

RUSSIAN = {"HTTP_ACCEPT_LANGUAGE": "ru"}


def test_a_tasks_record_names_the_system_and_a_web_request_without_login_anonymous(client_for):
    with context.use(context.ActionContext(channel="task")):
        by_task = audit.record("task.run", target_name="lending.advance", details={"task": "lending.advance"})
    with context.use(context.ActionContext(channel="web", source_address="192.0.2.7")):
        by_nobody = audit.record("access.anonymous.denied", details={"requests": 3})
    auditor = client_for(Role.AUDITOR)
    log = auditor.get("/audit/").content.decode()
    task_row = log.split(f'<tr data-sequence="{by_task.sequence}">', 1)[1].split("</tr>", 1)[0]
    web_row = log.split(f'<tr data-sequence="{by_nobody.sequence}">', 1)[1].split("</tr>", 1)[0]
    assert '<span class="muted" data-testid="actor-system">system</span>' in task_row and "anonymous" not in task_row
    assert '<span class="muted">anonymous</span>' in web_row and "system" not in web_row
    record = auditor.get(f"/audit/records/{by_task.sequence}/").content.decode()
    assert 'data-testid="actor-system">system</span>' in record and ">anonymous<" not in record
    russian = auditor.get(f"/audit/records/{by_task.sequence}/", **RUSSIAN).content.decode()
    assert 'data-testid="actor-system">система</span>' in russian
