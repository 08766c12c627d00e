"""Codec registry: names and extensions to codec classes, imported on first use.

Built-in codecs are dotted paths with the extra that installs their
dependencies (fsspec's ``known_implementations`` model), so ``import dstore``
never imports zarr, h5py or an image library. Third-party codecs register with
:func:`register_codec` or through the entry-point group ``dstore.codecs``
(``name = "package.module:CodecClass"``), loaded only when looked up.

A folder whose name says nothing (``out/``) is recognised by the marker file
its format writes inside it (a dstore TFRecord folder's ``dstore.json``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import fs
from ._dist import install_hint
from .bounded_json import load_json_file
from .errors import MissingDependencyError, UnknownCodecError

if TYPE_CHECKING:
    from .abc import Codec

__all__ = [
    "available_codecs",
    "codec_names",
    "codecs_with",
    "default_extension",
    "get_codec",
    "get_codec_class",
    "infer_codec",
    "register_codec",
    "registry",
]

ENTRY_POINT_GROUP = "dstore.codecs"


@dataclass(frozen=True)
class _Entry:
    target: str  # "module:Class"
    extensions: tuple[str, ...]
    extra: str | None = None  # pip extra that installs ``requires``
    requires: tuple[str, ...] = ()  # importable module names
    pattern: str | None = None  # regex on the file name, for names extensions miss
    marker: str | None = None  # a file inside a folder of this format, whatever the folder's name
    #: the ``format`` the marker (a JSON manifest) must name: formats sharing a marker file
    marker_format: str | None = None


_BUILTIN: dict[str, _Entry] = {
    "npz": _Entry("dstore.codecs.npz:NpzCodec", (".npz",)),
    "zarr": _Entry(
        "dstore.codecs.zarr:ZarrCodec", (".zarr", ".zarr.zip"), "zarr", ("zarr", "numcodecs")
    ),
    "hdf5": _Entry(
        "dstore.codecs.hdf5:HDF5Codec", (".h5", ".hdf5", ".he5", ".hdf"), "hdf5", ("h5py",)
    ),
    "tfrecord": _Entry(
        "dstore.codecs.tfrecord:TFRecordCodec",
        (".tfrecords", ".tfrecord", ".tfrecords.gz", ".tfrecord.gz"),
        "tfrecord",
        ("imagecodecs", "isal", "google_crc32c"),
        # TFDS shard names: mnist-train.tfrecord-00000-of-00001
        pattern=r"\.tfrecords?(-\d+-of-\d+)?(\.gz)?$",
        marker="dstore.json",
        marker_format="dstore-tfrecord",
    ),
    "parquet": _Entry(
        "dstore.codecs.parquet:ParquetCodec",
        (".parquet",),
        "parquet",
        ("pyarrow", "imagecodecs", "isal"),
        marker="dstore.json",
        marker_format="dstore-parquet",
    ),
    "webdataset": _Entry(
        "dstore.codecs.webdataset:WebDatasetCodec",
        (".wds", ".tar"),
        "webdataset",
        ("imagecodecs", "isal"),
        marker="dstore.json",
        marker_format="dstore-webdataset",
    ),
    "arrayrecord": _Entry(
        "dstore.codecs.arrayrecord:ArrayRecordCodec",
        (".arrayrecord", ".array_record"),
        "arrayrecord",
        ("array_record", "imagecodecs", "isal"),
        # TFDS shard names: mnist-train.array_record-00000-of-00001
        pattern=r"\.array_?record(-\d+-of-\d+)?$",
        marker="dstore.json",
        marker_format="dstore-arrayrecord",
    ),
    # the standard library parses JSON; orjson (extra "json") is used when installed
    "json": _Entry("dstore.codecs.json:JsonCodec", (".json",)),
    "jsonl": _Entry(
        "dstore.codecs.json:JsonLinesCodec",
        (".jsonl", ".ndjson"),
        # several splits: a folder of one file per split, with its manifest
        marker="dstore.json",
        marker_format="dstore-jsonl",
    ),
}

_entries: dict[str, _Entry] = dict(_BUILTIN)
_classes: dict[str, type[Codec]] = {}
_entry_points_loaded = False
#: Read-only view of the registered names and where they come from.
registry = types.MappingProxyType(_entries)


def _load_entry_points() -> None:
    global _entry_points_loaded  # noqa: PLW0603 - a module flag that tests/test_registry.py resets
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    # imported here: importlib.metadata, and the scan of every installed distribution's
    # metadata, cost start-up time that a built-in codec's name or extension never needs
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _entries:  # built-ins win unless replaced explicitly
            _entries[ep.name] = _Entry(ep.value, ())


def register_codec(cls: type[Codec], *, name: str | None = None, clobber: bool = False) -> None:
    """Register a codec class under ``name`` (default ``cls.name``).

    Raises ValueError if the name is taken, unless ``clobber=True``.
    """
    key = name or cls.name
    if not clobber and (key in _classes or key in _entries):
        raise ValueError(f"a codec named {key!r} is already registered (pass clobber=True)")
    target = f"{cls.__module__}:{cls.__qualname__}"
    _entries[key] = _Entry(target, tuple(cls.extensions))
    _classes[key] = cls


def codec_names() -> list[str]:
    _load_entry_points()
    return list(_entries)


def get_codec_class(name: str) -> type[Codec]:
    """Import (once) and return the codec class registered as ``name``."""
    if name not in _entries:  # an entry point never replaces a known name: look only now
        _load_entry_points()
    if name in _classes:
        return _classes[name]
    entry = _entries.get(name)
    if entry is None:
        raise _unknown_name(name)
    for required in entry.requires:
        if importlib.util.find_spec(required) is None:
            raise MissingDependencyError(name, entry.extra or name, required)
    module_name, _, attr = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if entry.extra:
            raise MissingDependencyError(name, entry.extra, e.name or str(e)) from e
        raise
    cls = getattr(module, attr)
    _classes[name] = cls
    return cls


def get_codec(name_or_config: str | dict[str, Any], **options: Any) -> Codec:
    """A configured codec instance from a name (plus options) or a config dict."""
    if isinstance(name_or_config, dict):
        config = dict(name_or_config)
        return get_codec_class(config.pop("name")).from_config(config)
    return get_codec_class(name_or_config)(**options)


def available_codecs() -> dict[str, str | None]:
    """Name -> None when usable, else the pip command that makes it usable.

    Never imports a backend: only checks that its modules can be found.
    """
    _load_entry_points()
    out: dict[str, str | None] = {}
    for name, entry in _entries.items():
        missing = [m for m in entry.requires if importlib.util.find_spec(m) is None]
        out[name] = install_hint(entry.extra or name) if missing else None
    return out


def codecs_with(capability: Callable[[type[Codec]], object]) -> list[str]:
    """The registered formats whose codec class has ``capability`` (e.g. ``lambda c:
    c.sharded``), in registry order, for messages that name them; a format whose
    module cannot be imported here is left out."""
    names = []
    for name in codec_names():
        try:
            cls = get_codec_class(name)
        except ImportError:  # MissingDependencyError is one
            continue
        if capability(cls):
            names.append(name)
    return names


def default_extension(name: str) -> str:
    """The extension outputs of codec ``name`` get (the first one it claims)."""
    _load_entry_points()
    entry = _entries.get(name)
    if entry is None:
        raise _unknown_name(name)
    extensions = entry.extensions or get_codec_class(name).extensions
    return extensions[0] if extensions else f".{name}"


def _has_marker(path: str, entry: _Entry) -> bool:
    """``path`` is a folder holding ``entry``'s marker (naming its format, when it says one)."""
    if not entry.marker or not fs.isdir(path) or not fs.exists(fs.join(path, entry.marker)):
        return False
    if entry.marker_format is None:
        return True
    return _marker_format(fs.join(path, entry.marker)) == entry.marker_format


def _marker_format(marker: str) -> object:
    """The ``format`` a JSON marker file names (None when it is not a regular file of a
    JSON object): read here, not by the container that writes it, so that the
    registry stays below every format and container."""
    if not fs.is_regular_file(marker):
        return None
    try:
        doc = load_json_file(marker, "marker")
    except OSError:  # a CodecIOError too: not JSON, too large, nested too deeply
        return None
    return doc.get("format") if isinstance(doc, dict) else None


def infer_codec(path: str) -> str:
    """The codec name claimed by ``path``'s extension or file name."""
    base = os.path.basename(os.path.normpath(str(path))).lower()
    best: tuple[int, str] | None = None
    for name, entry in _entries.items():
        for ext in entry.extensions:
            if base.endswith(ext) and (best is None or len(ext) > best[0]):
                best = (len(ext), name)
        if best is None and entry.pattern and re.search(entry.pattern, base):
            best = (0, name)
    if best is None:
        # Entry points name no extensions, their classes do: load and look only now.
        _load_entry_points()
        for name in list(_entries):
            if name in _BUILTIN:
                continue
            cls = get_codec_class(name)
            if any(base.endswith(ext) for ext in cls.extensions):
                return name
        for name, entry in _entries.items():
            if _has_marker(str(path), entry):
                return name
        raise _unclaimed(str(path), base)
    return best[1]


def _unclaimed(path: str, base: str) -> UnknownCodecError:
    """The error for a path no format claims, suggesting the extension nearest to its
    own: the last suffix (``data.v2.tfrecrods``), else all of them (``x.tfrecords.gzz``)."""
    extensions = [ext for entry in _entries.values() for ext in entry.extensions]
    suffixes = [os.path.splitext(base)[1], base[base.find(".") :] if "." in base else ""]
    near = next(filter(None, (_nearest(s, extensions) for s in suffixes if s)), None)
    hint = f"; did you mean {near}?" if near else ""
    return UnknownCodecError(
        base,
        list(_entries),
        f"{path}: no format claims this extension{hint} (name one with to=/from_format=)",
    )


def _nearest(word: str, choices: list[str]) -> str | None:
    """The one of ``choices`` close to ``word`` (a misspelt extension or format name), if
    any. Close is difflib's ratio of at least 0.8: ``.tfrecrods`` and ``.jsn`` are,
    ``.npy`` (another format: 0.75 to ``.npz``) is not."""
    import difflib

    near = difflib.get_close_matches(word.lower(), choices, n=1, cutoff=0.8)
    return near[0] if near else None


def _unknown_name(name: str) -> UnknownCodecError:
    near = _nearest(name, list(_entries))
    hint = f" (did you mean {near!r}?)" if near else ""
    return UnknownCodecError(name, list(_entries), f"unknown format {name!r}{hint}")
