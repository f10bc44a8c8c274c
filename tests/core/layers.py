"""The layer contract (.importlinter): run import-linter, and write the imports that break the order today as
the contract's ignore list (the ratchet issue 33 works down: a new upward import fails, an old one that is
gone must leave the list).

    .venv/bin/python -m tests.core.layers --write   # after removing an upward import: shrink the list
"""

import configparser
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / ".importlinter"
LINT = Path(sys.executable).with_name("lint-imports")
EDGE = re.compile(r"^[-\s]+(appliance[\w.]*) -> (appliance[\w.]*) \(l\.")
SECTION = "importlinter:contract:layers"


def run(config: Path = CONTRACT, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(config), "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def broken_edges(output: str) -> list[str]:
    """Every direct import `a -> b` named in the report's broken chains (a line may wrap: joined first)."""
    text = re.sub(r"\n(?=l\.\d)", "", output)
    return sorted({f"{m.group(1)} -> {m.group(2)}" for line in text.splitlines() if (m := EDGE.match(line))})


def ignored() -> list[str]:
    parser = configparser.ConfigParser()
    parser.read(CONTRACT)
    return [line.strip() for line in parser[SECTION].get("ignore_imports", "").splitlines() if line.strip()]


def write(edges: list[str]) -> None:
    text = CONTRACT.read_text()
    head = text.split("ignore_imports =")[0].rstrip() + "\n"
    CONTRACT.write_text(head + "ignore_imports =\n" + "".join(f"    {edge}\n" for edge in edges))


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.core.layers --write")
    # import-linter names some chains per pair of layers: ignoring them may show others; until none is left.
    edges: list[str] = []
    write(edges)
    while found := broken_edges(run().stdout):
        edges = sorted({*edges, *found})
        write(edges)
    print(f"{len(edges)} imports against the layer order recorded in {CONTRACT.name}")
