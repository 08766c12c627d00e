"""The library surface: open, convert, save, verify, check, info.

Everything the CLI does goes through these functions. One module per job:

- :mod:`.views`: lazy dataset views (``open``);
- :mod:`.convert`: the conversion entry points and their report;
- :mod:`.memory`: writing in-memory data (``save``);
- :mod:`.verify`: ``verify`` and ``check`` and their report;
- :mod:`.info`: ``info`` and its report;
- :mod:`.index`: ``index``, record indexes for shards dstore did not write.

The names below are re-exported so that ``dstore.api.X`` keeps working for
every caller (the CLI, the bench harness, tests, plugins).
"""

from __future__ import annotations

from ..sources import open_reader
from .convert import ConvertReport, Progress, convert, write_dataset
from .index import IndexReport, index
from .info import InfoReport, dtype_name, info
from .memory import ArrayReader, save
from .verify import FieldResult, VerifyReport, check, verify
from .views import Dataset, FieldView, Split, open

__all__ = [
    "ArrayReader",
    "ConvertReport",
    "Dataset",
    "FieldResult",
    "FieldView",
    "IndexReport",
    "InfoReport",
    "Progress",
    "Split",
    "VerifyReport",
    "check",
    "convert",
    "dtype_name",
    "index",
    "info",
    "open",
    "open_reader",
    "save",
    "verify",
    "write_dataset",
]
