"""The README's Python snippet runs as written, on small generated data under the names it uses."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import dstore
from dstore.testing import file_digests

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def _python_blocks() -> list[str]:
    with open(README, encoding="utf-8") as f:
        return re.findall(r"^```python\n(.*?)^```$", f.read(), flags=re.DOTALL | re.MULTILINE)


def test_readme_has_one_python_snippet():
    assert len(_python_blocks()) == 1


@pytest.mark.slow  # runs the README's Python on the demo data (~6 s)
def test_readme_python_snippet_runs(tmp_path, tiles):
    pytest.importorskip("tensorflow")
    pytest.importorskip("distributed")
    (code,) = _python_blocks()
    # Every file the snippet opens must be one this test makes; every other name is an output.
    names = set(re.findall(r'"([\w.-]+\.(?:npz|zarr|h5|tfrecords))"', code))
    inputs = {"data.npz"}
    assert inputs <= names, names
    x, y = tiles
    np.savez(
        tmp_path / "data.npz",
        x_train=x[:40],
        y_train=y[:40],
        x_test=x[40:50],
        y_test=y[40:50],
        x_val=x[50:],
        y_val=y[50:],
    )
    before = file_digests(str(tmp_path / "data.npz"))
    script = tmp_path / "readme_snippet.py"
    script.write_text(code)
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert file_digests(str(tmp_path / "data.npz")) == before  # the input is untouched
    outputs = names - inputs
    assert outputs == {"out.tfrecords", "small.zarr", "dask.tfrecords"}, outputs
    for name in outputs:
        assert os.path.exists(tmp_path / name), name
    # what the comments promise: the Dask run writes the same shards as a local one
    local, dask = tmp_path / "out.tfrecords", tmp_path / "dask.tfrecords"
    shards = sorted(n for n in os.listdir(local) if n.endswith(".tfrecord"))
    assert shards and shards == sorted(n for n in os.listdir(dask) if n.endswith(".tfrecord"))
    for n in shards:
        assert (local / n).read_bytes() == (dask / n).read_bytes(), n
    with dstore.open(str(tmp_path / "small.zarr")) as small:
        np.testing.assert_array_equal(small["train"]["x"][:], x[:8])
        np.testing.assert_array_equal(small["train"]["y"][:], y[:8])


def _fenced(language: str) -> list[str]:
    with open(README, encoding="utf-8") as f:
        return re.findall(rf"^```{language}\n(.*?)^```$", f.read(), flags=re.DOTALL | re.MULTILINE)


def test_readme_has_two_setup_commands_from_a_checkout():
    """Exactly two set-up lines: one ends in `dstore demo`, one runs the tests; both install
    from the checkout (the distribution is not on the package index)."""
    (setup,) = _fenced("console")
    lines = [line for line in setup.splitlines() if line.strip()]
    assert len(lines) == 2, lines
    demo, tests = lines
    assert "pip install -e '.[all]'" in demo and demo.endswith("dstore demo"), demo
    assert "pip install -e '.[test]'" in tests and "pytest" in tests, tests


def test_readme_test_setup_line_installs_what_it_runs():
    """The tests' set-up line takes torch's CPU build (the default Linux wheel pulls ~4 GB of
    CUDA libraries) and `[test]` installs pytest-xdist when the line runs `pytest -n`."""
    (setup,) = _fenced("console")
    tests = [line for line in setup.splitlines() if line.strip()][1]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in tests, tests
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(os.path.dirname(README), "pyproject.toml"), "rb") as f:
        test_extra = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    names = {re.split(r"[<>=\[ ;]", spec, maxsplit=1)[0].lower() for spec in test_extra}
    if re.search(r"pytest .*-n \d", tests):
        assert "pytest-xdist" in names, sorted(names)


@pytest.mark.slow  # runs the README's commands (~6 s)
def test_readme_commands_run_on_the_demo_files(tmp_path):
    """The README's five commands, as written, in a folder holding the files `dstore demo`
    writes under the names they use (made smaller here: the demo itself is tests/test_cli.py's)."""
    pytest.importorskip("sklearn")  # dstore bench's probe
    from dstore.cli import build_parser
    from dstore.demo import make_features_npz, make_label_maker_npz

    (commands,) = _fenced("bash")
    # `dstore demo` writes into the folder the README then enters
    assert commands.startswith(f"cd {build_parser().parse_args(['demo']).dir}\n"), commands
    used = [line.split("#")[0].split() for line in commands.splitlines()[1:]]
    assert [words[1] for words in used] == ["formats", "info", "convert", "verify", "bench"]
    demo = tmp_path / "dstore-demo"
    demo.mkdir()
    make_label_maker_npz(str(demo / "data.npz"), n=30, size=64)
    make_features_npz(str(demo / "features.npz"), n=300)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", commands],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert (demo / "out.tfrecords").is_dir()
    assert "recommendation:" in proc.stdout
