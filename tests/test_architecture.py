"""The house in layers: module sizes and the import contracts (docs/architecture.md).

The contracts themselves live in ``pyproject.toml`` (``[tool.importlinter]``) and
``.ci/run`` runs ``lint-imports``; this test runs the same check where
import-linter is installed, so a developer's ``pytest`` sees a broken floor too,
and checks what import-linter cannot: that no module grows past 500 lines.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import dstore

PACKAGE = pathlib.Path(dstore.__file__).parent
#: the ceiling for one module: past it a file holds more than one job (STYLE.md §3)
MAX_LINES = 500


def _modules() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_exceeds_the_line_ceiling() -> None:
    sizes = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in _modules()}
    too_long = {str(p.relative_to(PACKAGE)): n for p, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines (split them by job): {too_long}"
    assert len(sizes) > 50  # the walk found the package, not an empty folder


def _checkout() -> pathlib.Path | None:
    """The source tree whose pyproject.toml holds the contracts (None for a wheel
    installed elsewhere: CI runs lint-imports on the checkout itself)."""
    root = PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() else None


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter not installed")
def test_import_contracts_hold() -> None:
    root = _checkout()
    if root is None:
        pytest.skip("the installed package has no pyproject.toml beside it")
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [shutil.which("lint-imports") or "lint-imports", "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout
    assert " KEPT" in done.stdout  # contracts were found and checked


def test_import_linter_finds_a_broken_floor(tmp_path: pathlib.Path) -> None:
    """The layers contract is not vacuous: a module of the model importing the API
    (a copy of the package in a temporary folder) breaks it."""
    if shutil.which("lint-imports") is None:
        pytest.skip("import-linter not installed")
    root = _checkout()
    if root is None:
        pytest.skip("the installed package has no pyproject.toml beside it")
    shutil.copytree(PACKAGE, tmp_path / "dstore", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")
    bad = tmp_path / "dstore" / "model" / "upward.py"
    bad.write_text("from ..api import convert  # a floor importing one above it\n")
    done = subprocess.run(
        [shutil.which("lint-imports") or "lint-imports", "--no-cache"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "dstore.model.upward" in done.stdout


def test_the_interfaces_import_without_any_format() -> None:
    """``dstore.abc`` loads in a fresh interpreter without any format, container or
    engine module coming with it."""
    code = (
        "import sys, dstore.abc; "
        "bad = [m for m in sys.modules if m.startswith(('dstore.codecs', 'dstore.sharding',"
        " 'dstore.engine', 'dstore.images'))]; print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
