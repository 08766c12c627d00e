"""Who reads which records: ranges per consumer, epoch order and the shuffle buffer.

A *consumer* is one reading process: a DataLoader worker of one distributed
rank. Every consumer computes the same plan from (seed, epoch), so together
they read each record exactly once without talking to each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np

from ..errors import UsageError

__all__ = [
    "GLOBAL_WINDOW",
    "check_skip",
    "consumer_indices",
    "consumer_ranges",
    "drop_first",
    "epoch_rng",
    "global_order",
    "read_order",
    "shuffle_buffer",
]

T = TypeVar("T")

#: records a globally shuffled reader reads together, sorted by position
GLOBAL_WINDOW = 256


def epoch_rng(seed: int, epoch: int, *stream: int) -> np.random.Generator:
    """A generator that depends only on its arguments (the same in every process)."""
    return np.random.default_rng([seed, epoch, *stream])


def consumer_ranges(
    ranges: Sequence[tuple[int, int]],
    consumer: int,
    consumers: int,
    *,
    shuffle: bool,
    seed: int,
    epoch: int,
    streaming: bool,
) -> list[tuple[int, int]]:
    """The record ranges consumer ``consumer`` of ``consumers`` reads, in reading order.

    Random-access storage: the ranges (in an order shuffled per epoch when
    ``shuffle``) are dealt round-robin, so every consumer gets a spread of
    the split. Streaming storage (a deflated npz) can only be entered by
    decompressing everything before the entry point, so each consumer gets
    one contiguous block of ranges, read forwards; the cost is that consumer
    ``k`` decompresses and discards the blocks before its own.
    """
    if not 0 <= consumer < consumers:
        raise ValueError(f"consumer {consumer} of {consumers}")
    if streaming:
        lo = len(ranges) * consumer // consumers
        hi = len(ranges) * (consumer + 1) // consumers
        return list(ranges[lo:hi])
    order = list(ranges)
    if shuffle:
        perm = epoch_rng(seed, epoch).permutation(len(order))
        order = [order[i] for i in perm]
    return order[consumer::consumers]


def drop_first(ranges: Sequence[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """``ranges`` without their first ``n`` records (taken before a resume: never read)."""
    out = []
    for a, b in ranges:
        if n >= b - a:
            n -= b - a
            continue
        out.append((a + n, b))
        n = 0
    return out


def shuffle_buffer(items: Iterable[T], size: int, rng: np.random.Generator) -> Iterator[T]:
    """Items in a random order drawn from a buffer of at most ``size`` (memory stays bounded)."""
    if size <= 1:
        yield from items
        return
    buf: list[T] = []
    for item in items:
        if len(buf) < size:
            buf.append(item)
            continue
        i = int(rng.integers(size))
        buf[i], out = item, buf[i]
        yield out
    order = rng.permutation(len(buf))
    for i in order:
        yield buf[i]


# ------------------------------------------------------------------ global shuffle


def global_order(count: int, seed: int, epoch: int) -> np.ndarray:
    """Epoch ``epoch``'s permutation of all ``count`` record indices (any machine, any
    process: it depends on (seed, epoch) only)."""
    return epoch_rng(seed, epoch, 2).permutation(count)


def consumer_indices(
    count: int,
    consumer: int,
    consumers: int,
    *,
    seed: int,
    epoch: int,
    history: Sequence[Sequence[int]] = (),
) -> np.ndarray:
    """The records consumer ``consumer`` of ``consumers`` reads this epoch, in order.

    The epoch's permutation is dealt round-robin: consumer ``c`` reads
    ``order[c::consumers]``, so the consumers together read each record once.
    ``history`` resumes an epoch elastically: for each earlier run, how many
    records each of its consumers had taken of what it was dealt the same way;
    those are left out, run by run, and the rest dealt to this run's consumers."""
    if not 0 <= consumer < consumers:
        raise ValueError(f"consumer {consumer} of {consumers}")
    order = global_order(count, seed, epoch)
    for consumed in history:
        taken = np.zeros(len(order), bool)
        for c, n in enumerate(consumed):
            taken[c :: len(consumed)][: int(n)] = True  # what consumer c of that run read
        order = order[~taken]
    return order[consumer::consumers]


def read_order(
    indices: np.ndarray, window: int
) -> Iterator[tuple[np.ndarray, list[tuple[int, int]]]]:
    """``indices`` in windows of ``window``, each with the runs of consecutive record
    positions to read for it (sorted by position, so a window is read in storage
    order, then handed out in the shuffled order)."""
    for lo in range(0, len(indices), max(1, window)):
        part = indices[lo : lo + window]
        pos = np.sort(part)
        runs: list[tuple[int, int]] = []
        for p in pos.tolist():
            if runs and runs[-1][1] == p:
                runs[-1] = (runs[-1][0], p + 1)
            else:
                runs.append((p, p + 1))
        yield part, runs


def check_skip(skip: int, count: int, rank: int, world_size: int, is_global: bool) -> None:
    """Refuse a ``skip=`` (``to_tf_dataset``) beyond the records this rank reads in an epoch."""
    share = len(range(rank, count, world_size)) if is_global else count
    if skip > share:
        raise UsageError(
            f"skip={skip} is more than the {share} records rank {rank} of {world_size} reads "
            "in an epoch: it would resume past the epoch's end"
        )
