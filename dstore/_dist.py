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

#: Import names of the optional backends whose versions a bug report needs, in
#: the order printed. Versions come from installed metadata only: printing
#: them never imports TensorFlow (or anything else).
BACKENDS = (
    "numpy",
    "zarr",
    "numcodecs",
    "h5py",
    "hdf5plugin",
    "imagecodecs",
    "isal",
    "google_crc32c",
    "tensorflow",
    "dask",
    "s3fs",
)


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


def version_report() -> list[str]:
    """The lines of ``dstore --version``: dstore, Python, found backends, conflicts."""
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
    index = _top_level_index()
    missing = []
    for module in BACKENDS:
        # distribution names, as pip shows them: tensorflow may be tensorflow-cpu
        owners = _owners(module, index)
        lines.extend(f"{dist} {version}" for dist, version in owners)
        if not owners:
            missing.append(module)
    if missing:
        lines.append("not installed: " + ", ".join(missing))
    # Another distribution shipping a top-level ``dstore`` (the ORM of that
    # name, an old install of this project under its old name) overwrites or
    # shadows these files: say so rather than let a bug report hide it.
    others = [(d, v) for d, v in _owners("dstore", index) if not _same(d, DIST_NAME)]
    if others:
        names = ", ".join(f"{d} {v}" for d, v in others)
        lines.append(
            f"warning: the module 'dstore' is also installed by {names}, which may shadow or "
            f"overwrite this one: pip uninstall {others[0][0]}, then reinstall {DIST_NAME}"
        )
    return lines


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
