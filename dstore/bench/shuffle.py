"""How well a loader shuffles: MosaicML's shuffle quality (streaming's simulator,
``simulation/core/shuffle_quality.py``), reimplemented.

An order of records (the positions they are stored at, in the order training gets
them) is scored by the harmonic mean of two entropies, in bits: that of the absolute
distances between consecutive records, and that of the distances between the shards
they come from. The shards here are :data:`BLOCKS` equal blocks of consecutive
records of the split, whatever the format stores (one TFRecord shard, 400 zarr
chunks): the same order then scores the same in every format, and a uniform random
permutation scores about 4.2 (500 records) to 4.8 (100,000): 4.49 on 4,000, as
``benchmarks/bench_shuffle.py`` reports with its 500-record shards. Storage order
scores 0 (every step +1); read by two DataLoader workers side by side, about 0.1.
What the reads cost is the loader's records/s, measured beside it.

The order is measured, not assumed: each delivered record is told by a short
fingerprint of its values (:func:`dstore.bench.scan.fingerprints`) matched to
the stored records' fingerprints.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Sequence

import numpy as np

__all__ = [
    "BLOCKS",
    "delivered_order",
    "order_entropy",
    "permutation_quality",
    "shuffle_quality",
]

#: the shards of MosaicML's measure: equal blocks of consecutive records of a split
#: (8: a permutation of 4,000 records scores as with bench_shuffle.py's 500-record shards)
BLOCKS = 8


def order_entropy(order: np.ndarray) -> float:
    """Entropy (bits) of the absolute differences between consecutive entries."""
    order = np.asarray(order, np.int64)
    if len(order) < 2:
        return 0.0
    counts = np.bincount(np.abs(np.diff(order)))
    p = counts[counts > 0] / (len(order) - 1)
    return float(-(p * np.log2(p)).sum()) + 0.0  # + 0.0: one step size gives 0, not -0


def shuffle_quality(order: np.ndarray, blocks: int = BLOCKS) -> float:
    """MosaicML's shuffle quality of ``order`` (a permutation of ``range(len(order))``):
    the harmonic mean of the entropies of its record steps and of its steps between
    ``blocks`` equal blocks of consecutive records (NaN for fewer than three records)."""
    order = np.asarray(order, np.int64)
    n = len(order)
    if n < 3:
        return math.nan
    records = order_entropy(order)
    shards = order_entropy(order * blocks // n)
    total = records + shards
    return 2 * records * shards / total if total else 0.0


def permutation_quality(count: int, seed: int = 0, blocks: int = BLOCKS) -> float:
    """:func:`shuffle_quality` of a seeded uniform random permutation of ``count`` records:
    what a loader's order is compared with."""
    return shuffle_quality(np.random.default_rng(seed).permutation(count), blocks)


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
