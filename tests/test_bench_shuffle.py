"""How shuffled a loader's records come (MosaicML's entropy measure, our own code): storage
order scores 0, a random permutation the most, and the delivered order is recovered from
the records' values, not assumed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dstore.bench.scan import fingerprints
from dstore.bench.shuffle import (
    delivered_order,
    order_entropy,
    relative_quality,
    shuffle_quality,
    units_of,
)
from dstore.demo import photo_tiles


def test_storage_order_scores_nothing_and_a_permutation_the_most():
    n = 5000
    units = units_of([(a, min(a + 100, n)) for a in range(0, n, 100)], n)
    ordered, backwards = np.arange(n), np.arange(n)[::-1]
    assert order_entropy(ordered) == 0.0 and order_entropy(backwards) == 0.0
    # storage order: every step +1, and a new unit only at each unit's end
    assert shuffle_quality(ordered, units) < 0.1 and relative_quality(ordered, units) < 0.01
    random = np.random.default_rng(1).permutation(n)
    assert relative_quality(random, units, seed=0) == pytest.approx(1.0, abs=0.02)
    # shards shuffled, records in order within each: most steps are still +1
    blocks = np.concatenate(
        [np.arange(a, a + 100) for a in np.random.default_rng(2).permutation(range(0, n, 100))]
    )
    assert 0 < relative_quality(blocks, units) < 0.3
    # a window shuffle (records shuffled within 256 at a time) is in between
    window = np.concatenate(
        [
            np.random.default_rng(3).permutation(np.arange(a, min(a + 256, n)))
            for a in range(0, n, 256)
        ]
    )
    assert relative_quality(blocks, units) < relative_quality(window, units) < 0.95
    assert math.isnan(relative_quality(np.arange(2), units_of([(0, 2)], 2)))


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
