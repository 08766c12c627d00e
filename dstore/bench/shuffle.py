"""How well a loader shuffles: the measure MosaicML's streaming simulator reports.

An order of records (the positions they are stored at, in the order training gets
them) is scored by the entropy, in bits, of the distances between consecutive
records, plus the same entropy over the storage units (shards, chunks, record
ranges) they come from: storage order scores about 0 (every step is +1, and stays
in its unit but at the unit's end), a uniform random permutation the most. :func:`relative_quality` divides by
a seeded random permutation's score of the same records and units, so 1.0 reads
"as shuffled as a random permutation" whatever the split's size.

The order is measured, not assumed: each delivered record is told by a short
fingerprint of its values (:func:`dstore.bench.scan.fingerprints`) matched to
the stored records' fingerprints.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Sequence

import numpy as np

__all__ = ["delivered_order", "order_entropy", "relative_quality", "shuffle_quality", "units_of"]


def order_entropy(order: np.ndarray) -> float:
    """Entropy (bits) of the absolute differences between consecutive entries."""
    order = np.asarray(order, np.int64)
    if len(order) < 2:
        return 0.0
    counts = np.bincount(np.abs(np.diff(order)))
    p = counts[counts > 0] / (len(order) - 1)
    return float(-(p * np.log2(p)).sum())


def shuffle_quality(order: np.ndarray, units: np.ndarray) -> float:
    """Entropy of the record steps plus that of the storage-unit steps (bits)."""
    order = np.asarray(order, np.int64)
    return order_entropy(order) + order_entropy(np.asarray(units)[order])


def relative_quality(order: np.ndarray, units: np.ndarray, seed: int = 0) -> float:
    """:func:`shuffle_quality` of ``order`` over that of a seeded random permutation of
    the same records (NaN for fewer than three records)."""
    if len(order) < 3:
        return math.nan
    reference = shuffle_quality(np.random.default_rng(seed).permutation(len(units)), units)
    return shuffle_quality(order, units) / reference if reference else math.nan


def units_of(ranges: Sequence[tuple[int, int]], count: int) -> np.ndarray:
    """The storage unit of each of ``count`` records, from the reader's record ranges."""
    units = np.zeros(count, np.int64)
    for i, (a, b) in enumerate(ranges):
        units[a:b] = i
    return units


def delivered_order(delivered: Sequence[bytes], stored: Sequence[bytes]) -> np.ndarray | None:
    """The stored positions of the delivered records, matched by fingerprint (equal
    records are taken in storage order); None when a delivered record matches none or
    not every record came."""
    where: dict[bytes, deque[int]] = defaultdict(deque)
    for i, key in enumerate(stored):
        where[key].append(i)
    out = []
    for key in delivered:
        queue = where.get(key)
        if not queue:
            return None
        out.append(queue.popleft())
    if len(out) != len(stored):
        return None
    return np.asarray(out, np.int64)
