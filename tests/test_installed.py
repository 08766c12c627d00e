"""The suite runs against the installed wheel, not the checkout (CI sets DSTORE_TEST_INSTALLED=1).

CI builds the wheel, installs it into a fresh virtual environment and runs
these tests from outside the checkout: the ``dstore`` imported must then be the
one the ``dstore-ml`` distribution installed, whole, and nothing else's.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import dstore
from dstore import _dist

pytestmark = pytest.mark.skipif(
    os.environ.get("DSTORE_TEST_INSTALLED") != "1",
    reason="checks an installed wheel: CI sets DSTORE_TEST_INSTALLED=1",
)

ROOT = Path(__file__).resolve().parents[1]  # the checkout the tests come from
PACKAGE = Path(dstore.__file__).resolve().parent


def _files() -> list[str]:
    return [f.as_posix() for f in importlib.metadata.files(_dist.DIST_NAME) or ()]


def test_dstore_is_imported_from_the_installed_wheel():
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert site / "dstore" == PACKAGE, f"imported {PACKAGE}, not the wheel in {site}"
    assert not PACKAGE.is_relative_to(ROOT), "the checkout's dstore/ shadows the wheel"
    assert Path(_dist.installed_package_dir() or "").resolve() == PACKAGE
    assert importlib.metadata.version(_dist.DIST_NAME) == dstore.__version__
    # a subprocess started from the tests' working directory imports the same one
    out = subprocess.run(
        [sys.executable, "-c", "import dstore; print(dstore.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(out.stdout.strip()).resolve().parent == PACKAGE


def test_no_other_distribution_provides_a_dstore_module():
    """The index's unrelated `dstore`, or this project under its old name, would overwrite us."""
    owners = [
        (d.metadata["Name"], d.version)
        for d in importlib.metadata.distributions()
        if any(f.parts[0] == "dstore" for f in d.files or ())
        or "dstore" in (d.read_text("top_level.txt") or "").split()
    ]
    assert owners == [(_dist.DIST_NAME, dstore.__version__)]


def test_wheel_holds_every_module_and_nothing_else():
    files = _files()
    installed = {f for f in files if f.startswith("dstore/") and "__pycache__" not in f}
    if not (ROOT / "dstore").is_dir():
        pytest.skip("no checkout beside the tests to compare with")
    source = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "dstore").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert source - installed == set(), "missing from the wheel"
    assert installed - source == set(), "in the wheel but not in the checkout"
    info = f"{_dist.DIST_NAME.replace('-', '_')}-{dstore.__version__}.dist-info/"
    others = [
        f
        for f in files
        if not f.startswith(("dstore/", info))
        and not f.endswith(("/bin/dstore", "/bin/dstore.exe"))
    ]
    assert others == [], "benchmarks, notebooks, tests stay out of the wheel"


def test_the_dstore_command_is_the_installed_entry_point():
    (ep,) = importlib.metadata.entry_points(group="console_scripts", name="dstore")
    assert ep.dist is not None and ep.dist.metadata["Name"] == _dist.DIST_NAME
    assert ep.value == "dstore.cli:main"
    script = Path(sysconfig.get_paths()["scripts"]) / "dstore"
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=True)
    first, *rest = out.stdout.splitlines()
    assert first == f"{_dist.DIST_NAME} {dstore.__version__} ({PACKAGE})"
    assert not any(line.startswith("warning:") for line in rest), rest
