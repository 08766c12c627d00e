"""The distribution dstore is published as, its version, and the install hints it prints.

The import name and the command are ``dstore``, but the name ``dstore`` on the
package index belongs to an unrelated project (an ORM), so the distribution is
``dstore-ml`` (as ``scikit-learn`` ships ``sklearn``). Every ``pip install``
hint dstore prints comes from :func:`install_hint`, so the name lives here only.
The version is read from here by the build too (``[tool.setuptools.dynamic]``).
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.metadata costs ~25 ms: imported where a report needs it
    import importlib.metadata

__all__ = [
    "DIST_NAME",
    "__version__",
    "install_hint",
    "installed_package_dir",
    "version_report",
]

DIST_NAME = "dstore-ml"
__version__ = "0.1.0"

#: Extras that are developers' tools or bundles of the others, not libraries of a format.
_NOT_LIBRARIES = frozenset({"all", "docs", "test"})
#: Another distribution of the same library that satisfies a requirement just as well.
_ALTERNATIVES = {"tensorflow-cpu": ("tensorflow",)}
#: Libraries users read dstore's outputs with for training. In no extra (dstore never
#: imports them; the tests do), but a bug report about reading needs their versions too.
READERS = {"webdataset": "webdataset", "datasets": "parquet", "grain": "arrayrecord"}


def install_hint(extra: str) -> str:
    """The command that installs dstore's optional dependencies for ``extra``."""
    return f"pip install '{DIST_NAME}[{extra}]'"


def _top_level_index() -> dict[str, list[importlib.metadata.Distribution]]:
    """Top-level module name -> every installed distribution providing it.

    Like ``importlib.metadata.packages_distributions`` but keeps distributions,
    not names: two installed distributions may share a name (an old install of
    this project as ``dstore`` beside the index's ``dstore``), and each counts.
    """
    import importlib.metadata

    index: dict[str, list[importlib.metadata.Distribution]] = {}
    for dist in importlib.metadata.distributions():
        names = (dist.read_text("top_level.txt") or "").split()
        if not names:
            for file in dist.files or ():
                if len(file.parts) > 1 and not file.parts[0].endswith((".dist-info", "..")):
                    names.append(file.parts[0])
                elif len(file.parts) == 1 and file.suffix == ".py":
                    names.append(file.stem)
        for name in dict.fromkeys(names):
            index.setdefault(name, []).append(dist)
    return index


def _owners(
    module: str, index: dict[str, list[importlib.metadata.Distribution]]
) -> list[tuple[str, str]]:
    """(name, version) of every installed distribution providing ``module``, as pip shows them."""
    found = {(dist.metadata["Name"], dist.version): None for dist in index.get(module, [])}
    return list(found)


def _requirement(spec: str) -> tuple[str, str | None]:
    """``(distribution, extra)`` of a requirement line (``pyarrow>=15; extra == "parquet"``);
    the extra is None for a core dependency."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", spec)
    return (name.group(1) if name else spec.strip()), (extra.group(1) if extra else None)


def _declared_requirements() -> list[str]:
    """dstore's requirement lines: the ``pyproject.toml`` of the source tree this package
    runs from (a checkout, an editable install), else the installed distribution's metadata."""
    import importlib.metadata

    pyproject = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml"
    )
    try:
        import tomllib

        with open(pyproject, "rb") as f:
            project = tomllib.load(f).get("project", {})
    except (ImportError, OSError, ValueError):  # no tomllib before 3.11; no tree; a broken file
        project = {}
    if _same(str(project.get("name", "")), DIST_NAME):
        lines = list(project.get("dependencies", []))
        for extra, specs in project.get("optional-dependencies", {}).items():
            lines.extend(f"{spec}; extra == {extra!r}" for spec in specs)
        return lines
    try:
        return importlib.metadata.requires(DIST_NAME) or []
    except importlib.metadata.PackageNotFoundError:
        return []


def library_extras() -> dict[str, list[str]]:
    """Each library dstore can use (a distribution name) -> the extras that install it
    (``core`` for a dependency of every install), in pyproject's order."""
    out: dict[str, list[str]] = {}
    for spec in _declared_requirements():
        name, extra = _requirement(spec)
        if _same(name, DIST_NAME) or extra in _NOT_LIBRARIES:
            continue  # `all` and `test` name dstore's own extras; `docs` is mkdocs
        extras = out.setdefault(name, [])
        if (extra or "core") not in extras:
            extras.append(extra or "core")
    return out


def version_report() -> list[str]:
    """The lines of ``dstore --version``: dstore, Python, the library of every format and
    feature with the extras that install it, the readers of its outputs, conflicts."""
    import importlib.metadata

    here = os.path.dirname(os.path.abspath(__file__))
    lines = [f"{DIST_NAME} {__version__} ({here})"]
    try:
        installed = importlib.metadata.version(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        lines[0] += f" -- {DIST_NAME} is not installed: running from a source tree"
    else:
        package_dir = installed_package_dir()
        if package_dir is not None and os.path.realpath(package_dir) != os.path.realpath(here):
            lines[0] += f" -- not the installed {DIST_NAME} {installed} ({package_dir})"
    lines.append(f"Python {sys.version.split()[0]} ({sys.executable})")
    # metadata only, looked up by name: printing a version never imports the library
    # (TensorFlow takes seconds), nor parses the metadata of every installed package
    wanted = [(name, ", ".join(extras)) for name, extras in library_extras().items()]
    wanted += [(name, f"reads {fmt} outputs") for name, fmt in READERS.items()]
    found, missing = [], []
    for name, role in wanted:
        hit = next(filter(None, map(_installed, (name, *_ALTERNATIVES.get(name, ())))), None)
        if hit is None:
            missing.append(f"{name} ({role})")
        else:
            found.append((hit, role))
    width = max((len(text) for text, _ in found), default=0)
    lines.extend(f"{text:<{width}}  {role}" for text, role in found)
    if missing:
        lines.append("not installed: " + ", ".join(missing))
    lines.extend(_shadowing_warning())
    return lines


def _shadowing_warning() -> list[str]:
    """Another distribution shipping a top-level ``dstore`` (the ORM of that name, an old
    install of this project under its old name) overwrites or shadows these files: say so
    rather than let a bug report hide it."""
    index = _top_level_index()
    others = [(d, v) for d, v in _owners("dstore", index) if not _same(d, DIST_NAME)]
    if not others:
        return []
    names = ", ".join(f"{d} {v}" for d, v in others)
    return [
        f"warning: the module 'dstore' is also installed by {names}, which may shadow or "
        f"overwrite this one: pip uninstall {others[0][0]}, then reinstall {DIST_NAME}"
    ]


def _installed(name: str) -> str | None:
    """``"<name as installed> <version>"`` of distribution ``name``, None if not installed."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return f"{dist.metadata['Name'] or name} {dist.version}"


def _same(a: str, b: str) -> bool:
    """Equal as distribution names (PEP 503: case and runs of '-', '_', '.' do not count)."""
    return re.sub(r"[-_.]+", "-", a).lower() == re.sub(r"[-_.]+", "-", b).lower()


def installed_package_dir() -> str | None:
    """Where the installed ``dstore-ml`` put the ``dstore`` package, if it is installed.

    None when it is not installed, or installed editable (its files then stay
    in the source tree and the metadata does not list them).
    """
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.as_posix() == "dstore/__init__.py":
            return os.path.dirname(os.path.abspath(str(dist.locate_file(file))))
    return None
