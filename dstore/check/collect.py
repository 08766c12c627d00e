"""What ``dstore check`` keeps of each record: hashes, not values.

A :class:`Collector` takes batches as they are read (or written, by ``convert
--check``) and keeps per record a 128-bit SHA-256 prefix of the checked
fields' decoded values, a 64-bit key of its labels, a 64-bit pHash per image
field and a 128-d float16 projection per vector field: under 300 bytes a
record, whatever the records hold. Batches may come from several threads at
once (each hashes outside the lock) or be collected by other processes and
merged (:meth:`Collector.merge`).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import SchemaError
from ..model import Column, Image, VarColumn
from ..model.schema import Schema, SplitSpec
from .fields import CheckFields
from .perceptual import phash
from .vectors import project

__all__ = ["Collector", "SplitHashes"]


@dataclass
class SplitHashes:
    """The hashes of a range of records of one split (or, merged, of all of them)."""

    start: np.ndarray  # record positions, one per record
    digest: np.ndarray  # (n, 2) uint64: the checked fields' values
    label: np.ndarray  # (n,) uint64: the label fields' values (0: no label field)
    images: dict[str, np.ndarray] = field(default_factory=dict)  # field -> (n,) uint64
    vectors: dict[str, np.ndarray] = field(default_factory=dict)  # field -> (n, k) float16

    @classmethod
    def join(cls, parts: Sequence[SplitHashes]) -> SplitHashes:
        """``parts`` as one, in record order."""
        order = np.argsort(np.concatenate([p.start for p in parts]), kind="stable")

        def cat(arrays: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(arrays)[order]

        return cls(
            start=cat([p.start for p in parts]),
            digest=cat([p.digest for p in parts]),
            label=cat([p.label for p in parts]),
            images={f: cat([p.images[f] for p in parts]) for f in parts[0].images},
            vectors={f: cat([p.vectors[f] for p in parts]) for f in parts[0].vectors},
        )


def _prefix(name: str, kind: Any) -> bytes:
    """What precedes a field's value in a record's hash: its name and kind, so that
    equal bytes under another name, dtype or shape never match."""
    return repr((name, kind)).encode() + b"\0"


def _record_views(col: Column, n: int) -> list[Any]:
    """Record ``i``'s bytes (a zero-copy view where the values allow) for each ``i``:
    the values, then for a varying record its shape or its strings' lengths."""
    if not isinstance(col, VarColumn):
        flat = np.ascontiguousarray(col).reshape(n, -1)
        return list(flat.view(np.uint8)) if flat.size else [b""] * n
    views: list[Any] = []
    offsets = col.offsets
    if isinstance(col.values, VarColumn):  # a list of strings per record
        inner = col.values
        data = np.ascontiguousarray(inner.values).view(np.uint8)
        for i in range(n):
            lo, hi = int(offsets[i]), int(offsets[i + 1])
            a, b = int(inner.offsets[lo]), int(inner.offsets[hi])
            views.append(inner.lengths[lo:hi].tobytes() + data[a:b].tobytes())
        return views
    values = np.ascontiguousarray(col.values)
    data = values.reshape(len(values), -1).view(np.uint8) if values.size else values
    for i in range(n):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        shape = col.shapes[i].tobytes() if col.shapes is not None else str(hi - lo).encode()
        views.append(shape + data[lo:hi].tobytes())
    return views


def _digests(
    split: SplitSpec, batch: Mapping[str, Column], names: Sequence[str], n: int
) -> np.ndarray:
    """``(n, 2)`` uint64: the first 128 bits of SHA-256 of each record's ``names`` fields."""
    present = [name for name in names if name in batch]
    columns = [
        (_prefix(name, split.fields[name].kind), _record_views(batch[name], n)) for name in present
    ]
    out = np.empty((n, 16), np.uint8)
    for i in range(n):
        h = hashlib.sha256()
        for prefix, views in columns:
            h.update(prefix)
            h.update(views[i])  # large buffers are hashed with the GIL released
        out[i] = np.frombuffer(h.digest()[:16], np.uint8)
    return out.view(np.uint64)


def _image_hashes(
    col: Column, n: int, spec_kind: Any, decode: Any, where: str, start: int
) -> np.ndarray:
    """The pHash of each image of ``col`` (decoded first when it holds encoded images)."""
    if isinstance(spec_kind, Image) and spec_kind.encoding != "raw" and isinstance(col, VarColumn):
        col = decode(col, spec_kind, where, start)
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
        self._parts: dict[str, list[SplitHashes]] = {s: [] for s in schema.splits}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]  # a collector travels to worker processes and back without it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def empty(self) -> Collector:
        """A collector of the same check holding nothing (for another process to fill)."""
        return Collector(self.schema, self.fields, self.where)

    def add(self, split: str, start: int, batch: Mapping[str, Column]) -> None:
        """Hash records ``start:start + len(batch)`` of ``split``."""
        spec = self.schema.splits[split]
        n = len(next(iter(batch.values()))) if batch else 0
        if n == 0:
            return
        f = self.fields
        labels = [name for name in f.labels if name in batch]
        part = SplitHashes(
            start=np.arange(start, start + n, dtype=np.int64),
            digest=_digests(spec, batch, f.exact, n),
            label=_digests(spec, batch, labels, n)[:, 0] if labels else np.zeros(n, np.uint64),
        )
        for name in f.images:
            if name in batch:
                where = f"{self.where}: split {split!r}, field {name!r}"
                kind = spec.fields[name].kind
                part.images[name] = _image_hashes(batch[name], n, kind, _decoder(), where, start)
        for name in f.vectors:
            if name in batch:
                part.vectors[name] = project(np.asarray(batch[name]))
        with self._lock:
            self._parts[split].append(part)

    def merge(self, other: Collector) -> None:
        """Take the records ``other`` (a copy of :meth:`empty`, filled elsewhere) hashed."""
        with self._lock:
            for split, parts in other._parts.items():
                self._parts[split].extend(parts)

    def take(self, split: str) -> SplitHashes | None:
        """The hashes of ``split`` in record order (None: it has no records), released
        here; every record must have been added once."""
        with self._lock:
            parts, self._parts[split] = self._parts[split], []
        joined = SplitHashes.join(parts) if parts else None
        del parts
        count = self.schema.splits[split].count
        positions = joined.start if joined is not None else np.zeros(0, np.int64)
        if len(positions) != count or not np.array_equal(positions, np.arange(count)):
            raise SchemaError(
                f"{self.where}: split {split!r}: {len(positions)} records hashed, "
                f"its schema says {count}"
            )
        return joined


def _decoder() -> Any:
    """``decode_column_images``: encoded images (PNG, JPEG) as pixels."""
    from ..api import decode_column_images

    return decode_column_images
