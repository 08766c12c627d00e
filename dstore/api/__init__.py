"""The library surface: open, convert, save, verify, check, info.

Everything the CLI does goes through these functions. One module per job:

- :mod:`.views`: lazy dataset views (``open``);
- :mod:`.convert`: the conversion entry points and their report;
- :mod:`.memory`: writing in-memory data (``save``);
- :mod:`.verify`: ``verify`` and ``check`` and their report;
- :mod:`.info`: ``info`` and its report;
- :mod:`.index`: ``index``, record indexes for shards dstore did not write;
- :mod:`.append`, :mod:`.versions`: appends (``convert(..., append=True)``) and the
  versions they make (``log``, ``compact``, ``prune``).

The names below are re-exported so that ``dstore.api.X`` keeps working for
every caller (the CLI, the bench harness, tests, plugins).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..images.decoding import decode_column_images
    from ..sources.decoded_images import DecodedImages
    from ..sources.opening import open_reader
    from ..sources.unify import SOURCES_ATTR
    from .convert import ConvertReport, Progress, convert, write_dataset
    from .index import IndexReport, index
    from .info import InfoReport, dtype_name, info
    from .memory import ArrayReader, save
    from .verify import FieldResult, VerifyReport, check, verify
    from .versions import LogReport, PruneReport, compact, log, prune
    from .views import Dataset, FieldView, Split, open

# Imported on first use (PEP 562), as dstore's own names: `dstore info x.npz` then never
# imports the conversion engine, the sharding runner or the multi-file reader.
_LAZY = {
    "open_reader": "..sources",
    # for dstore.check, which reads through this layer: encoded images as pixels
    "DecodedImages": "..sources.decoded_images",
    "decode_column_images": "..images.decoding",
    "SOURCES_ATTR": "..sources.unify",
    **dict.fromkeys(["ConvertReport", "Progress", "convert", "write_dataset"], ".convert"),
    **dict.fromkeys(["IndexReport", "index"], ".index"),
    **dict.fromkeys(["InfoReport", "dtype_name", "info"], ".info"),
    **dict.fromkeys(["ArrayReader", "save"], ".memory"),
    **dict.fromkeys(["FieldResult", "VerifyReport", "check", "verify"], ".verify"),
    **dict.fromkeys(["Dataset", "FieldView", "Split", "open"], ".views"),
    **dict.fromkeys(["LogReport", "PruneReport", "compact", "log", "prune"], ".versions"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    setattr(sys.modules[__name__], name, value)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """``api.convert``, ``api.info``, ``api.verify`` and ``api.index`` are the functions, as
    when this package imported them eagerly: importing the submodule of the same name binds
    it here, and would shadow the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and isinstance(
            getattr(value, name, None), types.FunctionType
        ):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "SOURCES_ATTR",
    "ArrayReader",
    "ConvertReport",
    "Dataset",
    "DecodedImages",
    "FieldResult",
    "FieldView",
    "IndexReport",
    "InfoReport",
    "LogReport",
    "Progress",
    "PruneReport",
    "Split",
    "VerifyReport",
    "check",
    "compact",
    "convert",
    "decode_column_images",
    "dtype_name",
    "index",
    "info",
    "log",
    "open",
    "open_reader",
    "prune",
    "save",
    "verify",
    "write_dataset",
]
