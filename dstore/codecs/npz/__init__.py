"""NumPy ``.npz``: streamed in both directions, numpy only.

Reading parses each member's ``.npy`` header and then reads rows in chunks
from the zip member stream, so memory is bounded by the batch size and every
byte is decompressed once (indexing ``np.load(...)[key][i]`` per record
re-reads the whole member each time: that is what made label-maker's
conversion take hours). A range of records that is not a whole member of
a *stored* (uncompressed) npz -- what training readers' workers read -- is
memory-mapped instead (private copy-on-write pages, no read buffer and no
copy); like every partial read it goes without the member's CRC-32, which a
whole read through zipfile still checks. Writing puts the ``.npy`` header
first and appends rows; a zip file can only have one member open for
writing, so the largest field of a split is streamed straight into the
archive and the others are spooled to an anonymous temporary file and
copied in when the split ends.
Deflate runs on all cores (see :class:`dstore.parallel.ParallelDeflate`).
The schema travels in the zip comment, which ``np.load`` ignores.

Field kinds (``np.load`` opens every member without pickle):

* tensors: one ``K.npy`` member, ``(records, *shape)``;
* strings / bytes (and encoded images): one ``<U`` / ``S`` member of the
  widest record's width -- unless a record ends in NUL, which numpy's
  fixed-width strings drop; then values + row splits as below;
* ragged fields (and raw images of varying size): ``K.values.npy`` (every
  record's values, ``(total, *inner_shape)``), ``K.row_splits.npy`` (int64,
  records + 1 offsets into the values: record ``i`` is
  ``values[row_splits[i]:row_splits[i+1]]``, TensorFlow's ``RaggedTensor``
  names) and for images ``K.shapes.npy`` (each record's shape);
* lists of strings (or bytes) per record: ``K.values.npy`` is a ``<U`` / ``S``
  array of every record's strings in order, ``K.row_splits.npy`` counts
  strings (record ``i``'s list is ``values[row_splits[i]:row_splits[i+1]]``);
  a string ending in NUL is refused (fixed-width items would drop it).

Foreign npz files: ``<U``/``S`` members are string/bytes fields, pairs of
``K.values`` and ``K.row_splits`` ragged fields (lists of strings when the values are
``<U``/``S``), and object arrays (how
``np.savez`` stores a list of arrays) are rebuilt through
:mod:`dstore.codecs.npz.safe_pickle` only -- plain arrays, str and bytes; any
other pickled object is refused, naming what it asked for. Nothing else is
ever unpickled.
"""

from __future__ import annotations

import zipfile
from typing import TYPE_CHECKING, Any

from ... import fs
from ...abc import Codec, Reader, Writer
from ...fs import read_at
from ...model import Bytes, Image, Ragged, String, StringList, Tensor
from ...model.schema import Schema
from .options import _COMMENT_PREFIX, _ZIP_ERRORS, NpzOptions
from .reader import NpzReader

if TYPE_CHECKING:
    from .writer import NpzWriter

__all__ = ["NpzCodec", "NpzOptions", "NpzReader", "NpzWriter"]


def __getattr__(name: str) -> Any:
    """``NpzWriter``, imported when first asked for (PEP 562), as :meth:`NpzCodec.open_writer`
    imports it: reading an npz never loads the writer and its parallel deflate."""
    if name == "NpzWriter":
        from .writer import NpzWriter

        return NpzWriter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class NpzCodec(Codec):
    """NumPy ``.npz`` archives (compressed by default)."""

    name = "npz"
    media_type = "https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html"
    extensions = (".npz",)
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    bfloat16_as = "uint16"  # np.save writes ml_dtypes' bfloat16 as opaque V2
    random_access_when = "uncompressed"  # a deflated member only streams
    Options = NpzOptions

    @classmethod
    def owns(cls, path: str) -> bool:
        """A zip file whose members are all ``.npy`` arrays (what numpy and dstore write)."""
        if read_at(path, 0, 4) not in (b"PK\x03\x04", b"PK\x05\x06"):  # a member, or an empty zip
            return False
        try:
            with fs.open_binary(path) as f, zipfile.ZipFile(f) as z:
                names = z.namelist()
        except _ZIP_ERRORS:
            return False
        return all(name.endswith(".npy") for name in names)

    @classmethod
    def random_access_copy(cls, path: str, folder: str) -> str | None:
        """The archive with its members stored (inflated once): memory-mapped at any record."""
        from .inflate import stored_copy

        return stored_copy(path, folder)

    def open_reader(self, path: str) -> Reader:
        drop = tuple(k.strip() for k in self.options.drop.split(",") if k.strip())
        return NpzReader(path, drop)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        self.check_schema(schema)
        from .writer import NpzWriter  # imported to write only: `dstore info` reads

        return NpzWriter(path, schema, self.options)

    def attribute_notes(self, schema: Schema) -> list[str]:
        notes = super().attribute_notes(schema)
        # the zip comment holds 64 kB: a larger schema is not stored, and its attributes with it
        if notes and len(_COMMENT_PREFIX + schema.dumps().encode()) > 0xFFFF:
            note = (
                "npz: dstore's schema with its attributes is larger than a zip comment holds "
                "(64 kB): the attributes and fill values are not kept"
            )
            notes = [note]
        return notes
