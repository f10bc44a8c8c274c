"""README's Roles table and appliance/core/roles.py say the same thing."""

from pathlib import Path

from appliance.core.roles import CAPABILITIES, Role

README = Path(__file__).resolve().parents[2] / "README.md"
COLUMNS = ("Administrator", "Operator", "ML engineer", "Auditor", "Viewer")


def readme_matrix() -> dict[str, frozenset[str]]:
    section = README.read_text().split("\n## Roles\n", 1)[1].split("\n## ", 1)[0]
    header = f"| capability | {' | '.join(COLUMNS)} |"
    assert header in section, "README: the Roles section has no capability table"
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

