"""How shuffled a loader's records come (MosaicML's shuffle quality, our own code): storage
order scores 0, a uniform permutation about 4.5 whatever the format, and the delivered
order is recovered from the records' values, not assumed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dstore.bench.scan import fingerprints
from dstore.bench.shuffle import (
    delivered_order,
    order_entropy,
    permutation_quality,
    shuffle_quality,
)
from dstore.demo import photo_tiles


def _mosaicml(order: np.ndarray, shard_records: int) -> float:
    """streaming's simulation/core/shuffle_quality.py, written out from its definition:
    the harmonic mean of the entropies of |sample step| and |shard step|."""

    def entropy(seq: np.ndarray) -> float:
        _, counts = np.unique(np.abs(np.diff(seq)), return_counts=True)
        p = counts / counts.sum()
        return float(-(p * np.log2(p)).sum())

    a, b = entropy(order), entropy(order // shard_records)
    return 2 * a * b / (a + b)


def test_storage_order_scores_nothing_and_a_permutation_about_four_and_a_half():
    n = 4000
    ordered, backwards = np.arange(n), np.arange(n)[::-1]
    assert order_entropy(ordered) == 0.0 and order_entropy(backwards) == 0.0
    assert shuffle_quality(ordered) == 0.0
    random = np.random.default_rng(1).permutation(n)
    # MosaicML's figure with shards of 500 of 4,000 records (bench_shuffle.py's): 4.49
    assert shuffle_quality(random) == pytest.approx(_mosaicml(random, 500), rel=1e-9)
    assert shuffle_quality(random) == pytest.approx(4.49, abs=0.02)
    assert permutation_quality(n) == pytest.approx(4.49, abs=0.02)
    # the scale barely moves with the split's size: 8 equal blocks whatever the count
    assert 4.1 < permutation_quality(500) < permutation_quality(100_000) < 4.9
    # two DataLoader workers reading halves side by side, batches of 64: still ordered
    halves = np.arange(n).reshape(2, -1)
    two = np.concatenate([halves[w, i : i + 64] for i in range(0, n // 2, 64) for w in (0, 1)])
    assert 0 < shuffle_quality(two) < 0.2
    # shards shuffled, records in order within each: most steps are still +1
    blocks = np.concatenate(
        [np.arange(a, a + 100) for a in np.random.default_rng(2).permutation(range(0, n, 100))]
    )
    assert 0 < shuffle_quality(blocks) < 0.5
    # a window shuffle (records shuffled within 256 at a time) is in between: it never
    # leaves its block of 500 for long, and each step stays short
    window = np.concatenate(
        [
            np.random.default_rng(3).permutation(np.arange(a, min(a + 256, n)))
            for a in range(0, n, 256)
        ]
    )
    assert shuffle_quality(blocks) < shuffle_quality(window) < 0.5 * shuffle_quality(random)
    assert math.isnan(shuffle_quality(np.arange(2)))


def test_entropy_counts_the_steps_between_neighbours():
    # steps 1, 1, 2, 2 (absolute): two outcomes, equally likely: one bit
    assert order_entropy(np.array([0, 1, 2, 4, 2])) == pytest.approx(1.0)


def test_the_delivered_order_is_recovered_from_the_values():
    x, y = photo_tiles(40, 32, seed=5)
    x[7] = x[3]  # two equal records: matched in storage order
    y[7] = y[3]
    stored = fingerprints({"x": x, "y": y})
    perm = np.random.default_rng(0).permutation(40)
    # the loader's tensors may widen the dtype: the fingerprint reads values, not bytes
    delivered = fingerprints({"x": x[perm].astype(np.int32), "y": y[perm].astype(np.int64)})
    order = delivered_order(delivered, stored)
    assert order is not None
    fixed = perm.copy()
    first, second = np.flatnonzero((perm == 3) | (perm == 7))
    fixed[first], fixed[second] = 3, 7  # the equal pair: the first delivered is taken as 3
    assert np.array_equal(order, fixed)
    assert delivered_order(delivered[:-1], stored) is None  # a record missing
    other = fingerprints({"x": x[:1] ^ 1, "y": y[:1]})
    assert delivered_order(other + delivered[1:], stored) is None  # a record not stored
