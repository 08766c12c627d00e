"""One streamed pass over a cell's output beside the original: error, exactness, and
what the probe and the loader's shuffle check need -- never all records at once.

The original and the cell's read-back are read batch by batch, split by split,
realigned to common record boundaries (two readers cut batches differently), and
compared field by field (:class:`Comparison`). The same pass hashes the probe's
records (so a cell whose probe records read back as the original's, byte for
byte, reuses its score: the probe is deterministic) and, for ``--read``, keeps a
short fingerprint of each record, by which the order a loader delivers records
in is recovered (:mod:`.shuffle`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import api
from ..model import Column, VarColumn, column_len, slice_column
from ..model.schema import Batch

__all__ = [
    "Comparison",
    "ScanResult",
    "aligned",
    "concat_batches",
    "fingerprints",
    "gather",
    "scan",
]

#: Values per record a fingerprint takes (evenly spread over each dense field).
_FINGERPRINT_VALUES = 48


def _rows(batch: Batch) -> int:
    return column_len(next(iter(batch.values()))) if batch else 0


def _take_rows(buf: list[Batch], n: int) -> Batch:
    """The first ``n`` records of the batches in ``buf`` (which keeps the rest)."""
    out: dict[str, list[Column]] = {}
    taken = 0
    while taken < n:
        head = buf[0]
        k = min(n - taken, _rows(head))
        for name, col in head.items():
            out.setdefault(name, []).append(slice_column(col, 0, k))
        if k == _rows(head):
            buf.pop(0)
        else:
            buf[0] = {name: slice_column(col, k, _rows(head)) for name, col in head.items()}
        taken += k
    return {name: _concat(parts) for name, parts in out.items()}


def _concat(parts: list[Column]) -> Column:
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], VarColumn):
        return VarColumn.concat(parts)  # type: ignore[arg-type]
    return np.concatenate(parts)  # type: ignore[arg-type]


def _fill(stream: Iterator[Batch], buf: list[Batch]) -> int:
    """Pull from ``stream`` into ``buf`` up to its next non-empty batch: its records, or
    0 at the stream's end."""
    for batch in stream:
        if rows := _rows(batch):
            buf.append(batch)
            return rows
    return 0


def aligned(a: Iterator[Batch], b: Iterator[Batch]) -> Iterator[tuple[Batch, Batch]]:
    """Pairs of batches of the same records from two streams cut differently."""
    buf_a: list[Batch] = []
    buf_b: list[Batch] = []
    have_a = have_b = 0
    while True:
        have_a = have_a or _fill(a, buf_a)
        have_b = have_b or _fill(b, buf_b)
        n = min(have_a, have_b)
        if not n:
            if have_a or have_b:
                raise ValueError(f"record counts differ ({have_a} vs {have_b} left over)")
            return
        yield _take_rows(buf_a, n), _take_rows(buf_b, n)
        have_a -= n
        have_b -= n


@dataclass
class Comparison:
    """How a cell's read-back differs from the original, over every field.

    ``exact``: every value equal (a widened dtype holding the same values is exact);
    ``bit_exact``: the same dtypes and bytes too. ``max_abs``/``max_rel``: over the
    numeric fields (pixels included); a NaN where the original has a number (or the
    other way round) is an infinite error. ``differs``: a non-numeric difference.
    """

    max_abs: float = 0.0
    max_rel: float = 0.0
    exact: bool = True
    bit_exact: bool = True
    differs: str = ""

    def add(self, where: str, a: Column, b: Column) -> None:
        if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
            if not _same_column(a, b):
                self._differ(f"{where} differs")
            return
        if a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes():
            return
        self.bit_exact = False
        if a.shape != b.shape:
            self._differ(f"{where} changed shape")
            return
        if not _numeric(a) or not _numeric(b):
            if not np.array_equal(a, b):
                self._differ(f"{where} differs")
            return
        self._numbers(a, b)

    def _differ(self, what: str) -> None:
        self.exact = self.bit_exact = False
        self.differs = self.differs or what

    def _numbers(self, a: np.ndarray, b: np.ndarray) -> None:
        """Compare in slices of about 8 MiB of float64, so a batch of tiles never becomes
        one float64 copy (16 MB of uint8 pixels would be 128 MB)."""
        wide = np.complex128 if "c" in a.dtype.kind + b.dtype.kind else np.float64
        step = max(1, (8 << 20) // max(1, a[0].size * 16)) if len(a) else 1
        for i in range(0, len(a), step):
            self._slice(a[i : i + step].astype(wide), b[i : i + step].astype(wide))

    def _slice(self, a64: np.ndarray, b64: np.ndarray) -> None:
        if np.array_equal(a64, b64, equal_nan=True):
            return  # the same values (in another dtype, perhaps)
        self.exact = False
        nan_a, nan_b = np.isnan(a64), np.isnan(b64)
        if (nan_a != nan_b).any():
            self.max_abs = self.max_rel = float("inf")
            return
        ok = ~nan_a & np.isfinite(a64) & np.isfinite(b64)
        if ((~ok & ~nan_a) & (a64 != b64)).any():  # an infinity that moved
            self.max_abs = self.max_rel = float("inf")
            return
        err = np.abs(a64[ok] - b64[ok])
        if err.size:
            self.max_abs = max(self.max_abs, float(err.max()))
            denom = np.abs(a64[ok])
            nz = denom > 0
            if nz.any():
                self.max_rel = max(self.max_rel, float((err[nz] / denom[nz]).max()))


def _numeric(a: np.ndarray) -> bool:
    # "V" without fields: ml_dtypes' bfloat16, which numpy casts as a float
    return a.dtype.kind in "biufc" or (a.dtype.kind == "V" and not a.dtype.names)


def _same_column(a: object, b: object) -> bool:
    """Equality of two non-dense columns (VarColumn of strings or ragged values, lists)."""
    if type(a) is not type(b):
        return False
    if dataclasses.is_dataclass(a):
        return all(
            _same_column(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    try:
        return bool(a == b)
    except ValueError:  # lists of arrays: no single truth value
        return False


def fingerprints(batch: Mapping[str, Any]) -> list[bytes]:
    """A short key per record of ``batch``: each dense numeric field's sum and a few of
    its values at seeded positions, as float64 (so a loader's tensors of another integer
    width give the same key)."""
    parts = []
    for name in sorted(batch):
        col = np.asarray(batch[name]) if not isinstance(batch[name], VarColumn) else None
        if col is None or col.dtype.kind not in "biuf" or col.ndim == 0:
            continue
        flat = col.reshape(len(col), -1)
        width = flat.shape[1]
        idx = np.random.default_rng(width).choice(width, min(width, _FINGERPRINT_VALUES), False)
        parts += [
            flat.sum(axis=1, dtype=np.float64)[:, None],
            flat[:, np.sort(idx)].astype(np.float64),
        ]
    if not parts:
        return []
    rows = np.ascontiguousarray(np.concatenate(parts, axis=1))
    return [r.tobytes() for r in rows]


@dataclass
class ScanResult:
    comparison: Comparison = field(default_factory=Comparison)
    probe_hash: str = ""  # sha256 of the probe's records as read back
    #: per split of the fingerprinted part: each record's fingerprint, in storage order
    keys: dict[str, list[bytes]] = field(default_factory=dict)


def _hash_probe(h: Any, batch: Batch, roles: np.ndarray, fields: Sequence[str]) -> None:
    picked = np.flatnonzero(roles)
    if not len(picked):
        return
    h.update(roles[picked].tobytes())
    for name in fields or sorted(batch):  # none named (a user's evaluate): every field
        col = batch[name]
        if isinstance(col, VarColumn):
            var = col.take(picked)
            h.update(np.ascontiguousarray(var.values).tobytes() + var.offsets.tobytes())
        else:
            arr = np.ascontiguousarray(np.asarray(col)[picked])
            h.update(f"{name}{arr.dtype.str}{arr.shape}".encode() + arr.tobytes())


def scan(
    cell_files: Sequence[str],
    fmt: str,
    roles: Sequence[Mapping[str, np.ndarray]],
    probe_fields: Sequence[str],
    *,
    original_files: Sequence[str] | None = None,
    keys_part: int | None = None,
) -> ScanResult:
    """Read each part of a cell (and, given, of the original beside it) once, in order."""
    result = ScanResult()
    h = hashlib.sha256()
    for i, path in enumerate(cell_files):
        with api.open(path, format=fmt) as cell:
            orig = api.open(original_files[i], format="npz") if original_files else None
            try:
                for split in orig if orig is not None else cell:
                    if split not in cell:
                        result.comparison._differ(f"split {split!r} is missing")
                        continue
                    got = cell[split].iter_batches()
                    pairs = (
                        aligned(orig[split].iter_batches(), got)
                        if orig is not None
                        else ((b, b) for b in got)
                    )
                    pos = 0
                    for a, b in pairs:
                        n = _rows(b)
                        if orig is not None:
                            for name in a:
                                result.comparison.add(f"field {name!r}", a[name], b.get(name))  # type: ignore[arg-type]
                        _hash_probe(h, b, roles[i][split][pos : pos + n], probe_fields)
                        if i == keys_part:
                            result.keys.setdefault(split, []).extend(fingerprints(b))
                        pos += n
            finally:
                if orig is not None:
                    orig.close()
    result.probe_hash = h.hexdigest()
    return result


def gather(
    files: Sequence[str], fmt: str, roles: Sequence[Mapping[str, np.ndarray]], sink: Any
) -> None:
    """Hand each probe record's batch to ``sink(role, split, batch)``, in the scan's order."""
    for i, path in enumerate(files):
        with api.open(path, format=fmt) as ds:
            for split in ds:
                pos = 0
                for b in ds[split].iter_batches():
                    n = _rows(b)
                    r = roles[i][split][pos : pos + n]
                    pos += n
                    for role in (1, 2):
                        picked = np.flatnonzero(r == role)
                        if len(picked):
                            sink(role, split, {k: _pick(v, picked) for k, v in b.items()})


def _pick(col: Column, idx: np.ndarray) -> Column:
    return col.take(idx) if isinstance(col, VarColumn) else np.asarray(col)[idx]


def concat_batches(batches: list[Batch]) -> Batch:
    """One batch of several (the records a user's ``evaluate`` gets)."""
    if not batches:
        return {}
    return {name: _concat([b[name] for b in batches]) for name in batches[0]}
