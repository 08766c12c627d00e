"""A reader wrapper: each split's records in a seeded random permutation (a shuffle at
conversion time, ``dstore convert --shuffle-seed S``; the offline half of Corgi²).

Record ``i`` of split ``s`` is the source's record ``permutation(S, s, count)[i]``.
The permutation is defined here, once, from the seed and the split's name only, with
numpy's bit generators, whose streams numpy keeps stable across versions (NEP 19)::

    keys = PCG64(SeedSequence([S, crc32(split.encode())])).random_raw(count)
    permutation = argsort(keys, kind="stable")

so it does not depend on threads, processes, batch sizes or the numpy version, and
anyone can recompute it from the seed that the output records (:data:`SHUFFLE_ATTR`).

The wrapper reads what it yields with the inner reader's ``read_records``: it needs a
source that reads single records (:attr:`~dstore.abc.Reader.random_access`); the API
makes a random-access copy of one that only streams (:mod:`dstore.api.shuffled`).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..abc import Reader, WrappingReader
from ..abc.reader import RANGE_BYTES, checked_indexes, even_ranges
from ..engine.job import check_seed
from ..model.schema import Batch, Schema, SplitSpec

__all__ = ["SHUFFLE_ATTR", "PermutedReader", "open_permuted", "permutation"]

#: the dataset attribute naming the seed of the shuffle at conversion its records went
#: through: each split is :func:`permutation` of the records of the dataset converted
SHUFFLE_ATTR = "dstore.shuffle_seed"


def permutation(seed: int, split: str, count: int) -> np.ndarray:
    """The order a shuffle at conversion with ``seed`` writes split ``split`` of
    ``count`` records in: output record ``i`` is source record ``permutation[i]``."""
    entropy = [check_seed(seed), zlib.crc32(split.encode("utf-8", "surrogatepass"))]
    keys = np.random.PCG64(np.random.SeedSequence(entropy)).random_raw(count)
    return np.argsort(np.asarray(keys, dtype=np.uint64), kind="stable").astype(np.int64)


class PermutedReader(WrappingReader):
    """``inner``'s records, each split in :func:`permutation` ``(seed, split, count)``.

    The schema is ``inner``'s with :data:`SHUFFLE_ATTR` set, without the stored
    checksums (they hash the values in ``inner``'s order) or version history (it
    describes ``inner``, not this new dataset)."""

    def __init__(self, inner: Reader, seed: int) -> None:
        super().__init__(inner)
        self.seed = check_seed(seed)
        self.notes = inner.notes
        attrs = {**inner.schema.attrs, SHUFFLE_ATTR: self.seed}
        self.schema = Schema(dict(inner.schema.splits), attrs)
        self._orders: dict[str, np.ndarray] = {}

    def order(self, split: str) -> np.ndarray:
        """The source positions of ``split``'s records, in the order this reader gives them."""
        if split not in self._orders:
            self._orders[split] = permutation(self.seed, split, self.split(split).count)
        return self._orders[split]

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        order = self.order(spec.name)
        for a, b in even_ranges(start, stop, rows):
            yield self.inner.read_records(spec.name, order[a:b], names)

    def read_records(
        self, split: str, indexes: Sequence[int] | np.ndarray, fields: Sequence[str] | None = None
    ) -> Batch:
        idx = checked_indexes(indexes, self.split(split).count, f"split {split!r}")
        return self.inner.read_records(split, self.order(split)[idx], fields)

    # a range of this order is records scattered over the whole source: none is cheaper
    # to read than another, so the ranges are even blocks and no unit is fetched whole
    def record_ranges(self, split: str, target_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
        return Reader.record_ranges(self, split, target_bytes)

    def record_units(self, split: str) -> np.ndarray | None:
        return None

    def describe(self) -> list[str]:
        return self.inner.describe()


def open_permuted(path: str, *, format: str | None, shuffle_seed: int, **options: Any) -> Reader:
    """The source at ``path`` opened and permuted: how a worker process (or a Dask
    worker) reopens a shuffled source (:class:`~dstore.engine.job.SourceRef`'s opener)."""
    from .opening import open_reader

    return PermutedReader(open_reader(path, format=format, **options), shuffle_seed)
