"""Install hints and extras: every ``pip install`` dstore prints names this distribution
and an extra of it that installs what the message says is missing.

The hints are collected from the code that runs (``MissingDependencyError(...)``
calls and the codec registry, read with ``ast``), the extras from pyproject.toml
and the dependency metadata of the installed packages. The ``network`` test
resolves every hint with pip against the package index and a freshly built wheel.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dstore
from dstore import _dist, registry

tomllib = pytest.importorskip("tomllib")
requirements = pytest.importorskip("packaging.requirements")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
PACKAGE = Path(dstore.__file__).resolve().parent  # the code that runs: checkout or wheel


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def project() -> dict:
    with open(PYPROJECT, "rb") as f:
        return tomllib.load(f)["project"]


def _string_constants(node: ast.AST) -> list[str]:
    """The literal names an expression can take: both branches of ``a if c else b``."""
    if isinstance(node, ast.IfExp):
        return _string_constants(node.body) + _string_constants(node.orelse)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return []  # a computed message (fsspec's own) names no extra of ours


def _calls(name: str) -> list[tuple[str, ast.Call]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if called == name:
                    out.append((f"{path.relative_to(PACKAGE.parent)}:{node.lineno}", node))
    return out


def collect_hints() -> list[tuple[str, str, list[str]]]:
    """(where, extra, modules or distributions said to be missing) for every hint dstore prints."""
    hints = []
    for where, call in _calls("MissingDependencyError"):
        assert len(call.args) == 3 and all(k.arg == "what" for k in call.keywords), where
        extra = call.args[1]
        if where.startswith("dstore/registry.py"):
            continue  # the extras of the built-in entries, below
        assert isinstance(extra, ast.Constant), f"{where}: the extra must be a literal"
        if extra.value is None:  # no extra installs it: no hint of ours is printed
            continue
        hints.append((where, extra.value, _string_constants(call.args[2])))
    for where, call in _calls("install_hint"):
        if where.startswith("dstore/_dist.py"):
            continue
        arg = call.args[0]
        if isinstance(arg, ast.Constant):
            hints.append((where, arg.value, []))
        else:  # MissingDependencyError's message (its callers are above) and the registry's
            assert where.startswith(("dstore/errors.py", "dstore/registry.py")), where
    for name, entry in registry._BUILTIN.items():
        if entry.requires:
            assert entry.extra, f"codec {name} requires {entry.requires} but names no extra"
            hints.append((f"registry {name}", entry.extra, list(entry.requires)))
    return hints


@pytest.fixture(scope="module")
def hints() -> list[tuple[str, str, list[str]]]:
    return collect_hints()


def closure(project: dict, extra: str) -> set[str]:
    """Normalized names of every distribution ``pip install 'dstore-ml[extra]'`` installs.

    Our own extras come from pyproject.toml (self-references expanded), everything
    below them from the installed packages' metadata (the test extra installs them all).
    """
    ours = norm(project["name"])
    seen: set[str] = set()
    todo = [requirements.Requirement(f"{ours}[{extra}]")]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req = todo.pop()
        key = (norm(req.name), frozenset(req.extras))
        if key in done:
            continue
        done.add(key)
        seen.add(key[0])
        if key[0] == ours:
            specs = [r for e in req.extras for r in project["optional-dependencies"][e]]
            specs += project["dependencies"]
        else:
            try:
                specs = importlib.metadata.requires(req.name) or []
            except importlib.metadata.PackageNotFoundError:
                continue  # not installed here: its own dependencies cannot be followed
        for spec in specs:
            sub = requirements.Requirement(spec)
            envs = [{"extra": e} for e in (req.extras or {""})]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                todo.append(sub)
    return seen


def test_distribution_name_is_the_one_in_pyproject(project):
    assert norm(project["name"]) == norm(_dist.DIST_NAME) == "dstore-ml"
    # the unrelated ORM owns "dstore" on the index: never print that name
    assert norm(_dist.DIST_NAME) != "dstore"
    assert _dist.install_hint("zarr") == "pip install 'dstore-ml[zarr]'"
    assert dstore.__version__ == _dist.__version__
    assert project["dynamic"] == ["version"]


def test_every_hint_names_an_extra_that_installs_what_is_missing(project, hints):
    extras = project["optional-dependencies"]
    index = importlib.metadata.packages_distributions()
    assert len(hints) >= 12  # the scan found the calls (codecs, URLs, dask, tf, bench, demo)
    for where, extra, missing in hints:
        assert extra in extras, f"{where}: no extra {extra!r} in pyproject.toml"
        installs = closure(project, extra)
        for name in missing:
            providers = {norm(d) for d in index.get(name.split(".")[0], [])} | {norm(name)}
            assert providers & installs, (
                f"{where}: says {name!r} is missing, but {_dist.install_hint(extra)} installs "
                f"none of {sorted(providers)}"
            )


def test_missing_dependency_message_is_the_hint():
    err = dstore.MissingDependencyError("hdf5 blosc", "hdf5-plugins", "hdf5plugin")
    assert str(err).endswith(": pip install 'dstore-ml[hdf5-plugins]'")
    assert isinstance(err, ImportError)


def test_url_without_its_fsspec_package_names_that_package_not_an_extra():
    """No extra of dstore installs gcsfs: the message is fsspec's, naming the package."""
    if importlib.util.find_spec("fsspec") is None:
        pytest.skip("fsspec is not installed")
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    from dstore import fs

    with pytest.raises(dstore.MissingDependencyError) as exc:
        fs.url_fs("gs://bucket/data.zarr")
    assert str(exc.value) == "gs:// URLs: Please install gcsfs to access Google Storage"
    assert exc.value.extra is None


def _used_modules(hints: list[tuple[str, str, list[str]]]) -> set[str]:
    """Top-level modules dstore's code imports or names as a missing dependency."""
    used = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                used.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                used.add(node.module.split(".")[0])
    for _, _, missing in hints:
        used.update(m.split(".")[0] for m in missing)
    return used


def test_every_extra_names_only_packages_dstore_uses(project, hints):
    """An extra naming a package no code of dstore imports is dead weight on users' machines."""
    provides: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            provides.setdefault(norm(dist), set()).add(module)
    used = _used_modules(hints)
    ours = norm(project["name"])
    for extra, specs in project["optional-dependencies"].items():
        if extra in ("test", "docs"):  # the developers' tools: pytest, moto, mkdocs, ...
            continue
        for spec in specs:
            req = requirements.Requirement(spec)
            if norm(req.name) == ours:
                assert req.extras <= set(project["optional-dependencies"]), spec
                continue
            modules = provides.get(norm(req.name))
            assert modules is not None, (
                f"[{extra}] {req.name} is not installed: pip install -e .[test]"
            )
            assert modules & used, f"[{extra}] {req.name} provides {sorted(modules)}, none used"


def test_no_other_install_name_is_printed_or_documented():
    """Every `pip install NAME[extra]` in the package, the README and the docs names this
    distribution."""
    pattern = re.compile(r"""pip install\s+(?:-\S+\s+)*['"]?([A-Za-z0-9][A-Za-z0-9._-]*)\[""")
    files = [*sorted(PACKAGE.rglob("*.py")), ROOT / "README.md", *sorted(ROOT.glob("docs/**/*.md"))]
    found = 0
    for path in files:
        if not path.exists():  # README is beside the tests in a checkout
            continue
        for match in pattern.finditer(path.read_text()):
            found += 1
            assert norm(match.group(1)) == norm(_dist.DIST_NAME), f"{path}: {match.group(0)}"
    assert found >= 1  # at least the README's Install line


def test_version_lists_backends_and_warns_of_another_dstore(tmp_path, monkeypatch, capsys):
    """`dstore --version` names every distribution that also installs a `dstore` module."""
    # A stand-in for the unrelated ORM "dstore" 0.1.2, later on sys.path than ours.
    other = tmp_path / "other"
    (other / "dstore").mkdir(parents=True)
    (other / "dstore" / "__init__.py").write_text("ORM = True\n")
    info = other / "dstore-0.1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dstore\nVersion: 0.1.2\n")
    (info / "RECORD").write_text("dstore/__init__.py,,\ndstore-0.1.2.dist-info/METADATA,,\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(other)])
    from dstore import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"dstore-ml {dstore.__version__} ({PACKAGE}")
    assert lines[1].startswith(f"Python {sys.version.split()[0]}")
    shown = _shown_versions(lines)
    assert shown["numpy"] == (importlib.metadata.version("numpy"), "core")
    for module in ("zarr", "h5py", "imagecodecs"):
        dists = importlib.metadata.packages_distributions().get(module)
        if dists:
            assert shown[norm(dists[0])][0] == importlib.metadata.version(dists[0]), module
    warning = [line for line in lines if line.startswith("warning:")]
    assert len(warning) == 1 and "dstore 0.1.2" in warning[0], lines


def _shown_versions(lines: list[str]) -> dict[str, tuple[str, str]]:
    """``dstore --version``'s library lines: normalised name -> (version, what installs it)."""
    out = {}
    for line in lines[2:]:
        match = re.match(r"([A-Za-z0-9][\w.-]*) (\S+) {2,}(.+)$", line)
        if match:
            out[norm(match.group(1))] = (match.group(2), match.group(3))
    return out


def test_version_names_the_library_of_every_extra(project, capsys):
    """Every library an extra of pyproject.toml installs (and the readers of the outputs)
    is in `dstore --version`: with its installed version and the extras that install it,
    or under "not installed"; nothing is printed twice."""
    from dstore import cli

    with pytest.raises(SystemExit):
        cli.main(["--version"])
    lines = capsys.readouterr().out.splitlines()
    shown = _shown_versions(lines)
    (missing,) = [line for line in lines if line.startswith("not installed:")] or [""]
    expected: dict[str, set[str]] = {}
    for extra, specs in project["optional-dependencies"].items():
        for spec in specs:
            name = norm(requirements.Requirement(spec).name)
            if extra not in ("all", "docs", "test") and name != norm(_dist.DIST_NAME):
                expected.setdefault(name, set()).add(extra)
    # the libraries #35 names, and the training readers that no extra installs
    for name in ("pyarrow", "array-record", "fpng", "torch", "scikit-learn", "orjson"):
        assert name in expected, name
    for name in ("webdataset", "datasets", "grain"):
        expected[name] = set()
    alternatives = {"tensorflow-cpu": "tensorflow"}
    for name, extras in expected.items():
        got = shown.get(name) or shown.get(alternatives.get(name, name))
        if got is None:
            assert re.search(rf"\b{re.escape(name)} \(", missing), (name, lines)
            continue
        version, role = got
        installed = alternatives.get(name, name) if name not in shown else name
        assert version == importlib.metadata.version(installed), name
        assert set(role.split(", ")) == extras or (not extras and role.startswith("reads ")), (
            name,
            role,
        )
    assert len(shown) == len(lines[2:]) - bool(missing), "a line printed twice or unparsed"


def test_version_imports_no_backend():
    code = "import sys; from dstore import cli\ntry:\n    cli.main(['--version'])\nexcept SystemExit:\n    pass\n"
    code += "print([m for m in ('tensorflow', 'zarr', 'h5py', 'imagecodecs') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "[]"
    assert out.stdout.startswith("dstore-ml ")


def _wheel_dir(tmp_path: Path) -> Path:
    """CI's freshly built wheel (DSTORE_WHEEL_DIR), or one built from this checkout."""
    if os.environ.get("DSTORE_WHEEL_DIR"):
        return Path(os.environ["DSTORE_WHEEL_DIR"])
    if not PYPROJECT.exists():
        pytest.skip("no checkout to build a wheel from (set DSTORE_WHEEL_DIR)")
    # setuptools writes build/ and *.egg-info beside the sources: build a copy
    src = tmp_path / "src"
    shutil.copytree(ROOT / "dstore", src / "dstore", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
    )
    return out


@pytest.mark.slow  # pip resolves every extra against the index (~26 s)
@pytest.mark.network
def test_every_hint_resolves_with_pip(tmp_path, project, hints):
    """`pip install --dry-run` of every hint, as printed, against the index plus the built wheel.

    pip only warns about an extra a distribution lacks, so the report is checked:
    the one dstore-ml it would install is our wheel, declares each extra, and the
    install set holds each extra's direct requirements (pip's report lists the
    requested extras of the first requirement only). One resolution with every
    hint's requirement: if their union resolves, each one alone does.
    """
    wheels = _wheel_dir(tmp_path)
    (wheel,) = wheels.glob("dstore_ml-*.whl")
    extras = sorted({extra for _, extra, _ in hints} | {"all"})  # "all": the README's line
    args = []
    for extra in extras:
        command = shlex.split(_dist.install_hint(extra))
        assert command[:2] == ["pip", "install"] and len(command) == 3, command
        args.append(command[2])
    report = tmp_path / "report.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "-q",
            "--report",
            str(report),
            "--find-links",
            str(wheels),
            *args,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    install = json.loads(report.read_text())["install"]
    ours = [item for item in install if norm(item["metadata"]["name"]) == "dstore-ml"]
    assert len(ours) == 1, [item["metadata"]["name"] for item in install]
    assert ours[0]["download_info"]["url"].endswith("/" + wheel.name)
    assert set(extras) <= set(ours[0]["metadata"]["provides_extra"])
    names = {norm(item["metadata"]["name"]) for item in install}
    for extra in extras:
        for spec in project["optional-dependencies"][extra]:
            assert norm(requirements.Requirement(spec).name) in names, (extra, spec)
