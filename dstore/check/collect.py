"""What ``dstore check`` keeps of each record: hashes, not values.

A :class:`Collector` takes batches as they are read (or written, by ``convert
--check``) and keeps per record a 128-bit SHA-256 prefix of the checked
fields' decoded values, a 64-bit key of its labels, a 64-bit pHash per image
field and a 128-d float16 projection per vector field: under 300 bytes a
record, whatever the records hold. The tables are allocated once, for the
record counts of the schema, and each batch's hashes are written into its
rows: no copy of them is ever made. Batches may come from several threads at
once (each hashes outside the lock).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SchemaError, UsageError
from ..model import Column, Image, VarColumn
from ..model.schema import Schema, SplitSpec
from .fields import CheckFields
from .perceptual import phash
from .vectors import PROJECTION_DIMS, project

__all__ = ["Collector", "Records", "training_split"]


def training_split(splits: Sequence[str]) -> str:
    """The split others are compared with: ``train`` (or ``training``), else the first."""
    return next((s for s in splits if s in ("train", "training")), splits[0])


@dataclass
class Records:
    """Every record of every split, the training split first, then the others in order."""

    splits: list[str]
    split_id: np.ndarray  # (N,) int64
    index: np.ndarray  # (N,) int64, the position within its split
    digest: np.ndarray  # (N, 2) uint64: the checked fields' values
    label: np.ndarray  # (N,) uint64: the label fields' values
    has_label: np.ndarray  # (N,) bool: its split has label fields
    images: dict[str, tuple[np.ndarray, np.ndarray]]  # field -> pHashes, present
    vectors: dict[str, tuple[np.ndarray, np.ndarray]]  # field -> projections, present


def _prefix(name: str, col: Column) -> bytes:
    """What precedes a field's values in a record's hash: its name and dtype (each
    record's shape follows, :func:`_record_views`), so that equal bytes under another
    name, dtype or shape never match, while how they were stored (PNG or raw, fixed
    or varying size, which format) does not enter."""
    if isinstance(col, VarColumn):
        inner = col.values.values if isinstance(col.values, VarColumn) else col.values
        return repr((name, inner.dtype.str, col.nested)).encode() + b"\0"
    return repr((name, col.dtype.str, False)).encode() + b"\0"


def _record_views(col: Column, n: int) -> tuple[list[bytes], list[Any]]:
    """Record ``i``'s shape (or its strings' lengths) and values (a zero-copy view where
    the values allow), for each ``i``."""
    if not isinstance(col, VarColumn):
        flat = np.ascontiguousarray(col).reshape(n, -1)
        heads = [np.array(col.shape[1:], np.int64).tobytes()] * n
        rows: list[Any] = list(flat.view(np.uint8)) if flat.size else [b""] * n
        return heads, rows
    heads = []
    views: list[Any] = []
    offsets = col.offsets
    if isinstance(col.values, VarColumn):  # a list of strings per record
        inner = col.values
        data = np.ascontiguousarray(inner.values).view(np.uint8)
        for i in range(n):
            lo, hi = int(offsets[i]), int(offsets[i + 1])
            a, b = int(inner.offsets[lo]), int(inner.offsets[hi])
            heads.append(inner.lengths[lo:hi].astype(np.int64).tobytes())
            views.append(data[a:b].tobytes())
        return heads, views
    values = np.ascontiguousarray(col.values)
    data = values.reshape(len(values), -1).view(np.uint8) if values.size else values
    inner_shape = values.shape[1:]
    for i in range(n):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        shape = col.shapes[i] if col.shapes is not None else (hi - lo, *inner_shape)
        heads.append(np.asarray(shape, np.int64).tobytes())
        views.append(data[lo:hi].tobytes())
    return heads, views


def _digests(batch: Mapping[str, Column], names: Sequence[str], n: int) -> np.ndarray:
    """``(n, 2)`` uint64: the first 128 bits of SHA-256 of each record's ``names`` fields."""
    present = [name for name in names if name in batch]
    columns = [(_prefix(name, batch[name]), *_record_views(batch[name], n)) for name in present]
    out = np.empty((n, 16), np.uint8)
    for i in range(n):
        h = hashlib.sha256()
        for prefix, heads, views in columns:
            h.update(prefix)
            h.update(heads[i])
            h.update(views[i])  # large buffers are hashed with the GIL released
        out[i] = np.frombuffer(h.digest()[:16], np.uint8)
    return out.view(np.uint64)


def _decoded(
    batch: Mapping[str, Column], spec: SplitSpec, where: str, start: int
) -> dict[str, Column]:
    """``batch`` with its encoded images (PNG, JPEG: ``convert --check`` of images kept
    encoded) decoded: hashes are of values, not of how they were stored."""
    out = dict(batch)
    for name, col in batch.items():
        kind = spec.fields[name].kind
        if isinstance(kind, Image) and kind.encoding != "raw" and isinstance(col, VarColumn):
            from ..api import decode_column_images

            out[name] = decode_column_images(col, kind, f"{where}: field {name!r}", start)
    return out


def _image_hashes(col: Column, n: int) -> np.ndarray:
    """The pHash of each image of ``col``."""
    if not isinstance(col, VarColumn):
        return phash(col)
    out = np.zeros(n, np.uint64)
    for i in range(n):
        img = col.row(i)
        if img.size:
            out[i] = phash(img[None])[0]
    return out


class Collector:
    """Hashes of every record of ``schema``'s splits, batch by batch (thread-safe)."""

    def __init__(self, schema: Schema, fields: CheckFields, where: str = "") -> None:
        self.schema = schema
        self.fields = fields
        self.where = where
        names = list(schema.splits)
        train = training_split(names) if names else ""
        splits = [train, *(s for s in names if s != train)] if names else []
        if len(splits) > 64:
            raise UsageError(f"{where}: {len(splits)} splits; dstore check takes 64 at most")
        counts = [schema.splits[s].count for s in splits]
        self.offset = dict(zip(splits, np.cumsum([0, *counts[:-1]]).tolist(), strict=True))
        total = sum(counts)
        labelled = [any(n in schema.splits[s].fields for n in fields.labels) for s in splits]
        self.records = Records(
            splits=splits,
            split_id=np.repeat(np.arange(len(splits)), counts),
            index=np.concatenate([np.arange(c) for c in counts])
            if total
            else np.zeros(0, np.int64),
            digest=np.zeros((total, 2), np.uint64),
            label=np.zeros(total, np.uint64),
            has_label=np.repeat(np.array(labelled, bool), counts),
            images={n: (np.zeros(total, np.uint64), np.zeros(total, bool)) for n in fields.images},
            vectors={
                n: (np.zeros((total, PROJECTION_DIMS), np.float16), np.zeros(total, bool))
                for n in fields.vectors
            },
        )
        self._added = np.zeros(total, np.uint8)  # times each record was added
        self._lock = threading.Lock()

    def add(self, split: str, start: int, batch: Mapping[str, Column]) -> None:
        """Hash records ``start:start + len(batch)`` of ``split``."""
        spec = self.schema.splits[split]
        n = len(next(iter(batch.values()))) if batch else 0
        if n == 0:
            return
        if start + n > spec.count:
            raise SchemaError(
                f"{self.where}: split {split!r}: records {start}:{start + n} were read, "
                f"its schema says {spec.count}"
            )
        f = self.fields
        batch = _decoded(batch, spec, f"{self.where}: split {split!r}", start)
        labels = [name for name in f.labels if name in batch]
        digest = _digests(batch, f.exact, n)
        label = _digests(batch, labels, n)[:, 0] if labels else None
        images, vectors = {}, {}
        for name in f.images:
            if name in batch:
                images[name] = _image_hashes(batch[name], n)
        for name in f.vectors:
            if name in batch:
                vectors[name] = project(np.asarray(batch[name]))
        lo = self.offset[split] + start
        rows = slice(lo, lo + n)
        rec = self.records
        with self._lock:
            rec.digest[rows] = digest
            if label is not None:
                rec.label[rows] = label
            for table, mine in ((rec.images, images), (rec.vectors, vectors)):
                for name, values in mine.items():
                    table[name][0][rows] = values
                    table[name][1][rows] = True
            self._added[rows] += 1

    def result(self) -> Records:
        """The hashes of every record; each must have been added once."""
        wrong = np.flatnonzero(self._added != 1)
        if len(wrong):
            rec = self.records
            split = rec.splits[int(rec.split_id[wrong[0]])]
            times = int(self._added[wrong[0]])
            raise SchemaError(
                f"{self.where}: split {split!r}, record {int(rec.index[wrong[0]])} was read "
                f"{times} times, not once ({len(wrong)} record(s) so)"
            )
        return self.records
