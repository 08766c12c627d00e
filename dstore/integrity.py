"""Content checksums: a sha256 per field, stored with the schema, checked by ``dstore verify PATH``.

Single-file and chunked formats (npz, zarr, HDF5) carry these in the schema
they already store (``attrs["dstore.sha256"]``): the hash of each field's
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

from .schema import Batch, Schema

__all__ = ["CHECKSUM_ATTR", "FieldHasher", "stored_checksums"]

CHECKSUM_ATTR = "dstore.sha256"


class FieldHasher:
    """sha256 of every field of every split, fed batch by batch in record order."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self._hashes = {
            (split.name, name): hashlib.sha256() for split in schema.splits.values() for name in split.fields
        }

    def update(self, split: str, batch: Batch) -> None:
        fields = self.schema.splits[split].fields
        for name, arr in batch.items():
            stored = np.ascontiguousarray(np.asarray(arr).astype(fields[name].dtype, copy=False))
            self._hashes[(split, name)].update(stored)

    def hexdigests(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for (split, name), h in self._hashes.items():
            out.setdefault(split, {})[name] = h.hexdigest()
        return out


def stored_checksums(schema: Schema) -> Mapping[str, Mapping[str, Any]] | None:
    value = schema.attrs.get(CHECKSUM_ATTR)
    return value if isinstance(value, Mapping) else None
