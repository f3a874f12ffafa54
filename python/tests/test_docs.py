"""Every Python code block of the docs (README.md, docs/*.md, python/README.md) is kept true: a block
marked `<!-- python example -->` is run as a program against a fresh database (its `DSN = ...` line
pointed there), and one marked `<!-- excerpt of PATH -->` is found, as it is, in that file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from conftest import PACKAGE_ROOT, PATIENCE, Database

ROOT = PACKAGE_ROOT.parent


def python_blocks() -> List[Tuple[str, Optional[str], str]]:
    """(place, marker, code) of every ```python block."""
    pages = [ROOT / "README.md", PACKAGE_ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    blocks = []
    for page in pages:
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            if lines[i].strip() != "```python":
                i += 1
                continue
            indent = len(lines[i]) - len(lines[i].lstrip())
            start = i
            body = []
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i][indent:])
                i += 1
            found = re.fullmatch(r"<!--\s*(.*?)\s*-->", lines[start - 1].strip()) if start else None
            place = f"{page.relative_to(ROOT)}:{start + 1}"
            blocks.append((place, found.group(1) if found else None, "\n".join(body) + "\n"))
            i += 1
    return blocks


def test_every_python_block_is_marked_and_the_docs_have_some() -> None:
    blocks = python_blocks()
    assert any(m == "python example" for _, m, _ in blocks)
    unmarked = [
        place for place, marker, _ in blocks if marker != "python example" and not (marker or "").startswith("excerpt of ")
    ]
    assert not unmarked, f"python blocks with no <!-- python example --> or <!-- excerpt of PATH -->: {unmarked}"


@pytest.mark.parametrize(
    "place,code",
    [(p, c) for p, m, c in python_blocks() if m == "python example"],
    ids=[p for p, m, _ in python_blocks() if m == "python example"],
)
def test_a_python_example_runs(db: Database, tmp_path: Path, place: str, code: str) -> None:
    assert re.search(r'^DSN = ".*"$', code, re.M), f"{place}: the example names its database in a line `DSN = \"...\"`"
    program = re.sub(r'^DSN = ".*"$', f"DSN = {db.dsn!r}", code, flags=re.M)
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=PATIENCE, cwd=tmp_path
    )
    assert done.returncode == 0, f"{place}:\n{done.stdout}{done.stderr}"
    assert db.one("SELECT bool_and(released_at IS NOT NULL) FROM system_nodes")[0], f"{place} left its id held"


@pytest.mark.parametrize(
    "place,marker,code",
    [b for b in python_blocks() if (b[1] or "").startswith("excerpt of ")],
    ids=[p for p, m, _ in python_blocks() if (m or "").startswith("excerpt of ")],
)
def test_an_excerpt_is_in_its_file_as_it_is(place: str, marker: str, code: str) -> None:
    source = (ROOT / marker.removeprefix("excerpt of ")).read_text()
    assert code in source, f"{place}: the excerpt differs from {marker.removeprefix('excerpt of ')}"
