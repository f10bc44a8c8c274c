"""The stage runs fail on a deprecation warning of ansible-core that is not known here.

Deprecation warnings are on (playbooks/ansible.cfg, the engine's environment): they announce the next
ansible-core release that will break the stages. A new one must be fixed, or, when it cannot be yet,
added below with the reason, so that it is a decision and never noise nobody reads.
"""

from __future__ import annotations

import re

# Each entry: a pattern matched against the text after "[DEPRECATION WARNING]: ", and why it is accepted.
KNOWN_DEPRECATIONS: list[tuple[re.Pattern[str], str]] = [
    # Mitogen's strategy plugin (mitogen_linear) is a third-party strategy: ansible-core warns about every
    # one of them and plans no replacement. The stages need it for speed (FIELD-NOTES "Ansible speed").
    (re.compile(r"^Use of strategy plugins not included in ansible\.builtin are deprecated\b"),
     "Mitogen's mitogen_linear strategy"),
]

_DEPRECATION = re.compile(r"^\[DEPRECATION WARNING\]:\s*(?P<message>.+)$", re.MULTILINE)


def deprecation_warnings(output: str) -> list[str]:
    """The messages of every deprecation warning in the output of an ansible-playbook run."""
    return [match.group("message").strip() for match in _DEPRECATION.finditer(output)]


def unknown_deprecations(output: str) -> list[str]:
    """The deprecation warnings of the output that KNOWN_DEPRECATIONS does not list, each once."""
    unknown: list[str] = []
    for message in deprecation_warnings(output):
        if not any(pattern.search(message) for pattern, _reason in KNOWN_DEPRECATIONS) and message not in unknown:
            unknown.append(message)
    return unknown


def assert_no_new_deprecation(output: str, playbook: str) -> None:
    unknown = unknown_deprecations(output)
    assert not unknown, (
        f"{playbook}: {len(unknown)} deprecation warning(s) of ansible-core that "
        "tests/playbooks/deprecations.py does not list (fix them, or list them there with the reason):\n"
        + "\n".join(f"  - {message}" for message in unknown))
