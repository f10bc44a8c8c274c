"""The check every stage run goes through (tests/playbooks/conftest.py): a deprecation warning of
ansible-core that tests/playbooks/deprecations.py does not list fails the run, named."""

import pytest

from tests.playbooks.deprecations import assert_no_new_deprecation, unknown_deprecations

# As ansible-playbook 2.19 prints them with deprecation_warnings on and the Mitogen strategy.
MITOGEN = ("[DEPRECATION WARNING]: Use of strategy plugins not included in ansible.builtin are deprecated and do "
           "not carry any backwards compatibility guarantees. No alternative for third party strategy plugins is "
           "currently planned. This feature will be removed in the future.")
NOTICE = "[WARNING]: Deprecation warnings can be disabled by setting `deprecation_warnings=False` in ansible.cfg."
NEW = ("[DEPRECATION WARNING]: The 'bare_module' option is deprecated. This feature will be removed from "
       "ansible-core version 2.23.")


def output(*lines: str) -> str:
    return "\nPLAY [Firmware] ****\n" + "\n".join(lines) + "\n\nPLAY RECAP ****\nnode : ok=3 changed=0\n"


def test_the_mitogen_strategy_warning_is_known():
    assert unknown_deprecations(output(NOTICE, MITOGEN, MITOGEN)) == []
    assert_no_new_deprecation(output(NOTICE, MITOGEN), "stages/firmware.yml")


def test_a_new_deprecation_fails_the_run_naming_it_once():
    assert unknown_deprecations(output(NOTICE, MITOGEN, NEW, NEW)) == [
        "The 'bare_module' option is deprecated. This feature will be removed from ansible-core version 2.23."]
    with pytest.raises(AssertionError) as failure:
        assert_no_new_deprecation(output(MITOGEN, NEW), "stages/firmware.yml")
    assert str(failure.value).startswith(
        "stages/firmware.yml: 1 deprecation warning(s) of ansible-core that tests/playbooks/deprecations.py does "
        "not list (fix them, or list them there with the reason):\n"
        "  - The 'bare_module' option is deprecated.")
