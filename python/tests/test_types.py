"""The package's type hints hold: mypy --strict finds nothing in the installed package (its stubs of
the native module included) nor in the FastAPI example, which uses it as a service would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import PACKAGE_ROOT, PATIENCE


def mypy(tmp_path: Path, *target: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *target],
        capture_output=True,
        text=True,
        timeout=PATIENCE * 3,
        # Not the source tree: the installed package is checked.
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_installed_package_type_checks_strictly(tmp_path: Path) -> None:
    mypy(tmp_path, "-p", "idgen_client")


def test_the_fastapi_example_type_checks_strictly_against_it(tmp_path: Path) -> None:
    mypy(tmp_path, str(PACKAGE_ROOT / "examples" / "fastapi_app.py"))
