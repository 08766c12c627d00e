"""dstore: move ML datasets between npz, zarr, HDF5 and TFRecord, and measure the cost.

Importing dstore is light: its names are imported on first use (PEP 562), so
``dstore --help`` and ``import dstore`` load neither numpy nor any backend;
``dstore.convert`` loads numpy, and zarr, h5py, image codecs, TensorFlow,
scikit-learn and matplotlib are imported when a codec or feature needs them.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from ._dist import __version__

if TYPE_CHECKING:
    # the functions from their modules: dstore.api.convert etc. are also submodule names
    from .api import ConvertReport, Dataset, VerifyReport, open, save
    from .api.card import CardReport, card
    from .api.convert import convert
    from .api.info import info
    from .api.verify import verify
    from .api.versions import LogReport, PruneReport, compact, log, prune
    from .bench import bench
    from .check import check
    from .engine.dtypes import DtypePolicy, parse_policy
    from .errors import (
        AppendConflictError,
        AppendError,
        CodecIOError,
        DstoreError,
        DtypePolicyError,
        MissingDependencyError,
        OldOutputLeftError,
        OutputExistsError,
        SchemaError,
        UnknownCodecError,
        UnsafeInputError,
        UnsupportedDtypeError,
        VersionError,
    )
    from .model.schema import FieldSpec, Schema, SplitSpec
    from .registry import (
        available_codecs,
        get_codec,
        get_codec_class,
        infer_codec,
        register_codec,
    )

#: Public name -> the module defining it, imported when the name is first used.
_LAZY = {
    **dict.fromkeys(
        ["ConvertReport", "Dataset", "VerifyReport", "convert", "info", "open", "save", "verify"],
        "api",
    ),
    **dict.fromkeys(["LogReport", "PruneReport", "compact", "log", "prune"], "api.versions"),
    **dict.fromkeys(["DtypePolicy", "parse_policy"], "engine.dtypes"),
    **dict.fromkeys(
        [
            "AppendConflictError",
            "AppendError",
            "CodecIOError",
            "DstoreError",
            "DtypePolicyError",
            "MissingDependencyError",
            "OldOutputLeftError",
            "OutputExistsError",
            "SchemaError",
            "UnknownCodecError",
            "UnsafeInputError",
            "UnsupportedDtypeError",
            "VersionError",
        ],
        "errors",
    ),
    **dict.fromkeys(
        ["available_codecs", "get_codec", "get_codec_class", "infer_codec", "register_codec"],
        "registry",
    ),
    **dict.fromkeys(["FieldSpec", "Schema", "SplitSpec"], "model.schema"),
    "bench": "bench",
    **dict.fromkeys(["CardReport", "card"], "api.card"),
    "check": "check",
}

__all__ = [
    "AppendConflictError",
    "AppendError",
    "CardReport",
    "CodecIOError",
    "ConvertReport",
    "Dataset",
    "DstoreError",
    "DtypePolicy",
    "DtypePolicyError",
    "FieldSpec",
    "LogReport",
    "MissingDependencyError",
    "OldOutputLeftError",
    "OutputExistsError",
    "PruneReport",
    "Schema",
    "SchemaError",
    "SplitSpec",
    "UnknownCodecError",
    "UnsafeInputError",
    "UnsupportedDtypeError",
    "VerifyReport",
    "VersionError",
    "__version__",
    "available_codecs",
    "bench",
    "card",
    "check",
    "compact",
    "convert",
    "get_codec",
    "get_codec_class",
    "infer_codec",
    "info",
    "log",
    "open",
    "parse_policy",
    "prune",
    "register_codec",
    "save",
    "to_tf_dataset",
    "to_torch",
    "verify",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    setattr(sys.modules[__name__], name, value)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """``dstore.bench`` and ``dstore.check`` are functions: the subpackages of the same
    names are bound here when imported (``from dstore.bench import harness``) and would
    shadow them. ``dstore.card`` is a function too: the package of that name holds the
    cards' parts below the API, the function is ``dstore.api.card.card``, found on first
    use (``__getattr__``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("bench", "check") and isinstance(value, types.ModuleType):
            value = getattr(value, name)
        elif name == "card" and isinstance(value, types.ModuleType):
            return  # leaves the name to __getattr__: the function
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def to_tf_dataset(path: str, split: str = "train", **kwargs: Any) -> Any:
    """A ``tf.data.Dataset`` over a dstore TFRecord directory (needs the ``tf`` extra)."""
    from .readers.tf import to_tf_dataset as _impl

    return _impl(path, split=split, **kwargs)


def to_torch(path: str, split: str = "train", **kwargs: Any) -> Any:
    """A PyTorch ``IterableDataset`` (or with ``map_style=True`` a ``Dataset``) of
    ``{field: tensor}`` records of any format (needs the ``torch`` extra)."""
    try:
        from .readers.torch import to_torch as _impl
    except ImportError as e:
        if e.name != "torch":
            raise
        from .errors import MissingDependencyError

        raise MissingDependencyError("to_torch", "torch", "torch") from e

    return _impl(path, split=split, **kwargs)
