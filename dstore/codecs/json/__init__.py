"""JSON documents and JSON Lines: records as objects, one field per key.

Reading follows one generic rule (pyspacer's feature files are one case of it):

* the records are the document's top-level list of objects, or the list of
  objects held by one of its top-level members (``{"point_features": [...]}``);
  several such members are one split each, named by their keys. JSON Lines
  holds one object per line;
* per field: JSON numbers become int64 (all integers) or float64 fields,
  ``true``/``false`` bool fields, lists of numbers of one length fixed-shape
  fields (``(1280,)``), lists whose length varies ragged fields, strings
  string fields;
* every other top-level member (``"feature_dim": 1280``) is a root attribute;
  columnar documents (lists of values) follow :mod:`dstore.codecs.json.columns`.

A record whose value disagrees in kind with the field's first record (a
number here, a string there), a missing key, a ``null`` or a truncated file is
refused with one line naming the file, field and record.

Writing gives the same shape of document, one record per line, the root
attributes as top-level members and dstore's schema as the member
``"dstore:schema"`` (the last line of a JSON Lines file), so that a round trip
restores kinds and dtypes JSON cannot tell (float32 vs float64, big-endian,
complex numbers as ``[re, im]``, bytes and encoded images as base64, raw
images as nested lists). NaN and infinities are written as Python's json
writes them (``NaN``, ``Infinity``); a NaN whose bits are not numpy's NaN (a
payload, a sign) as the string ``"nan:0x<bits>"``, so values come back bit
for bit.

Parsing uses orjson when it is installed (the ``json`` extra: 5x faster than
the standard library on float arrays, see ``benchmarks/bench_json.py``) and
the standard library otherwise, or when orjson refuses a document the standard
library reads (``NaN``/``Infinity``), whose message with line and column is
the one reported for a broken file. Numbers follow one rule whichever parser
runs: a literal beyond float64 (``1e400``, which the standard library reads as
inf) and an integer beyond 64 bits (which orjson reads as a float64 from 2**64
on) are refused naming the record and field. orjson's floats of 2**63 or
more in magnitude (rare in data, and what it makes of such integers) send the
document to the standard library's parser with checking hooks, which
decides. Nesting deeper than a parser follows is one error, not a
``RecursionError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ... import fs
from ...abc import Codec, Reader, Writer
from ...fs import is_regular_file, read_at
from ...model import Bytes, Image, Ragged, String, Tensor
from ...model.schema import Schema
from .parse import JsonRangeError, loads
from .reader import JsonReader
from .values import SCHEMA_MEMBER

__all__ = ["JsonCodec", "JsonLinesCodec", "JsonRangeError", "loads"]


@dataclass(frozen=True)
class _NoOptions:
    pass


class JsonCodec(Codec):
    """A JSON document of records (``.json``)."""

    name = "json"
    extensions: ClassVar[tuple[str, ...]] = (".json",)
    stores_text = True
    kinds = (Tensor, String, Bytes, Ragged, Image)
    keeps_empty_rows = False  # its reader takes a record as the values it holds
    Options = _NoOptions
    lines, media_type = False, "application/json"  # the Croissant encodingFormat

    def supports(self, dtype: np.dtype) -> bool:
        return dtype.kind in "biufc"  # complex numbers as [re, im]

    @classmethod
    def owns(cls, path: str) -> bool:
        """A JSON file dstore wrote: it ends with its schema member."""
        if not is_regular_file(path):
            return False
        size = fs.getsize(path)
        return SCHEMA_MEMBER.encode() in read_at(path, max(0, size - 65536), 65536)

    def attribute_notes(self, schema: Schema) -> list[str]:
        # root attributes that are JSON scalars are top-level members; the rest stay in
        # dstore's schema member, which any JSON reader sees too
        return []

    def open_reader(self, path: str) -> Reader:
        from .stream import open_streamed  # dstore's own files: a batch at a time

        return open_streamed(path, self.lines) or JsonReader(path, self.lines)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        from .writer import JsonWriter

        self.check_schema(schema)
        return JsonWriter(path, schema, self.lines)


class JsonLinesCodec(JsonCodec):
    """JSON Lines (``.jsonl``): one record object per line."""

    name = "jsonl"
    extensions = (".jsonl", ".ndjson")
    lines, media_type = True, "application/jsonlines"

    # Several splits are a folder of one file per split (:mod:`.split_files`): a reader
    # of a file's lines as records (pandas, ``datasets``, mlcroissant) takes all of them.

    @classmethod
    def owns(cls, path: str) -> bool:
        """A JSON Lines file dstore wrote, or its folder of one file per split whose
        manifest loads (else its files would all be called a user's)."""
        from ...sharding.manifest import manifest_files
        from .split_files import FORMAT_ID

        if fs.isdir(path):
            return manifest_files(path, FORMAT_ID) is not None
        return super().owns(path)

    @classmethod
    def foreign_files(cls, path: str) -> list[str]:
        from ...sharding.manifest import foreign_files
        from .split_files import FORMAT_ID, is_split_folder

        # an append writes the folder whole again: it keeps no versions folder of dstore's
        return foreign_files(path, FORMAT_ID, versions=False) if is_split_folder(path) else []

    def open_reader(self, path: str) -> Reader:
        from .split_files import SplitFilesReader

        # a folder is one of split files: its manifest says which (or why it cannot be read)
        if fs.isdir(path):
            return SplitFilesReader(path, self.follow_links)
        return super().open_reader(path)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        from .split_files import SplitFilesWriter

        if len(schema.splits) < 2:
            return super().open_writer(path, schema)
        self.check_schema(schema)
        return SplitFilesWriter(path, schema)

    @classmethod
    def trailing_lines(cls, path: str) -> int:
        """1 for a file whose last line is dstore's schema alone, as dstore wrote JSON
        Lines before the schema joined the last record."""
        if not is_regular_file(path):
            return 0
        size = fs.getsize(path)
        tail = read_at(path, max(0, size - 65536), 65536).rstrip(b"\n")
        last = tail.rsplit(b"\n", 1)[-1]
        return int(last.startswith(b'{"' + SCHEMA_MEMBER.encode() + b'": '))
