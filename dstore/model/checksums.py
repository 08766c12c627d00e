"""Content checksums: a sha256 per field, stored with the schema, checked by ``dstore verify PATH``.

Single-file and chunked formats (npz, zarr, HDF5) carry these in the schema
they already store (its ``checksums`` key, beside the user's ``attrs``; files
written before kept them in ``attrs["dstore.sha256"]``, still read): the hash of each field's
values in record order, as stored (dtype and byte order). Unlike a file hash
it survives copying and re-chunking, and it catches what the formats' own
checks miss -- blosc chunks have no checksum, so a flipped byte in a zarr
chunk can decompress to wrong numbers without any error. TFRecord outputs
hash whole shard files in their manifest instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import VarColumn
from .schema import LEGACY_CHECKSUM_ATTR, Batch, Schema

__all__ = ["CHECKSUM_ATTR", "FieldHasher", "stored_checksums"]

#: the attrs key older files kept the checksums under (never written now; readers that
#: build a schema of another's leave it out of the attrs they copy)
CHECKSUM_ATTR = LEGACY_CHECKSUM_ATTR


class FieldHasher:
    """sha256 of every field of every split, fed batch by batch in record order.

    A dense field hashes its values as stored (dtype and byte order). A field
    whose records vary hashes three streams -- the values, each record's
    length (int64 little-endian) and, for raw images of varying size, each
    record's shape -- and combines them, so the digest does not depend on
    how the records were cut into batches."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self._hashes: dict[tuple[str, str], list[Any]] = {
            (split.name, name): [hashlib.sha256()]
            if spec.dense
            else [hashlib.sha256() for _ in range(3)]
            for split in schema.splits.values()
            for name, spec in split.fields.items()
        }

    def update(self, split: str, batch: Batch) -> None:
        fields = self.schema.splits[split].fields
        for name, col in batch.items():
            hashes = self._hashes[(split, name)]
            if isinstance(col, VarColumn) and col.nested:
                # a list of strings per record: bytes, records' list lengths, string lengths
                hashes[0].update(np.ascontiguousarray(col.strings.flat_values))
                hashes[1].update(np.ascontiguousarray(col.lengths, dtype="<i8"))
                hashes[2].update(np.ascontiguousarray(col.strings.lengths, dtype="<i8"))
                continue
            if isinstance(col, VarColumn):
                values = np.ascontiguousarray(
                    col.flat_values.astype(fields[name].dtype, copy=False)
                )
                hashes[0].update(values)
                hashes[1].update(np.ascontiguousarray(col.lengths, dtype="<i8"))
                if col.shapes is not None:
                    hashes[2].update(np.ascontiguousarray(col.shapes, dtype="<i8"))
                continue
            stored = np.ascontiguousarray(np.asarray(col).astype(fields[name].dtype, copy=False))
            hashes[0].update(stored)

    def hexdigests(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for (split, name), hashes in self._hashes.items():
            if len(hashes) == 1:
                digest = hashes[0].hexdigest()
            else:
                digest = hashlib.sha256(b"".join(h.digest() for h in hashes)).hexdigest()
            out.setdefault(split, {})[name] = digest
        return out


def stored_checksums(schema: Schema) -> Mapping[str, Mapping[str, Any]] | None:
    """The checksums stored with ``schema`` (its own slot; a file written before it had
    one kept them in ``attrs[CHECKSUM_ATTR]``, moved to the slot when read), or None."""
    return schema.checksums or None
