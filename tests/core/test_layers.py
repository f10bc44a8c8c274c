"""The layer order is checked, not hoped for (issue 33): import-linter's layers contract (.importlinter) passes
on the product, its ignore list holds exactly the imports that break the order today, and an upward import
added anywhere, inside a function too, fails it."""

import shutil

from tests.core import layers


def test_the_layer_contract_holds_and_lists_only_what_breaks_it_today():
    result = layers.run()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "Contracts: 1 kept, 0 broken." in result.stdout
    # import-linter refuses an ignored import that no longer exists: the list can only shrink.
    assert len(layers.ignored()) == len(set(layers.ignored()))


def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path):
    shutil.copytree(layers.ROOT / "appliance", tmp_path / "appliance",
                    ignore=shutil.ignore_patterns("__pycache__", "_data", "*.so"))
    shutil.copy(layers.CONTRACT, tmp_path / ".importlinter")
    dispatch = tmp_path / "appliance" / "core" / "dispatch.py"
    dispatch.write_text(dispatch.read_text() + "\n\ndef _reach_up():\n    from appliance.portal import views  # noqa\n")
    result = layers.run(tmp_path / ".importlinter", cwd=tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "Contracts: 0 kept, 1 broken." in result.stdout
    assert "appliance.core.dispatch -> appliance.portal.views" in result.stdout
    assert layers.broken_edges(result.stdout) == ["appliance.core.dispatch -> appliance.portal.views"]
