"""The Roles page of the documentation (docs/roles.md) and appliance/core/roles.py say the same thing."""

from pathlib import Path

from appliance.core.roles import CAPABILITIES, Role

ROLES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "roles.md"
COLUMNS = ("Administrator", "Operator", "ML engineer", "Auditor", "Viewer")


def readme_matrix() -> dict[str, frozenset[str]]:
    section = ROLES_PAGE.read_text()
    header = f"| capability | {' | '.join(COLUMNS)} |"
    assert header in section, "docs/roles.md has no capability table"
    table = section.split(header, 1)[1].strip().splitlines()[1:]
    matrix = {}
    for line in table:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert set(cells[1:]) <= {"yes", "no"}, line
        matrix[cells[0].strip("`")] = frozenset(label for label, cell in zip(COLUMNS, cells[1:], strict=True)
                                               if cell == "yes")
    return matrix


def test_the_readme_table_is_the_roles_table():
    in_code = {capability: frozenset(Role(role).label for role in roles) for capability, roles in CAPABILITIES.items()}
    assert readme_matrix() == in_code

