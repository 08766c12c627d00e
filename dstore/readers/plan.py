"""Who reads which records: ranges per consumer, epoch order and the shuffle buffer.

A *consumer* is one reading process: a DataLoader worker of one distributed
rank. Every consumer computes the same plan from (seed, epoch), so together
they read each record exactly once without talking to each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ..errors import UsageError

__all__ = [
    "BLOCK_RANGES",
    "GLOBAL_WINDOW",
    "PERMUTATIONS",
    "PERMUTATION_WINDOW_BYTES",
    "WINDOW_UNITS",
    "GlobalLayout",
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

#: records a globally shuffled reader reads together when each is read alone
GLOBAL_WINDOW = 256
#: decoded bytes such a window holds at most (and at least :data:`FIRST_WINDOW`
#: records): each record is read alone, so a window only groups reads and decodes, and
#: a reading process keeps one or two decoded windows. 256 photo tiles of 256x256x3
#: were 50 MB a window; at 64 (this cap) two workers spent 0.86-0.93 s of system time
#: on page faults an epoch of 4,000 tiles instead of 1.32-1.50 s, peaked at 218 MB
#: RSS instead of 345 MB, and read 9-16% more images/s (TFRecord, ArrayRecord)
PERMUTATION_WINDOW_BYTES = 12 * 1024 * 1024
#: records a permutation's first window holds at most: a DataLoader's first batch
#: waits for its worker's first window (256 photo tiles: 4 s to the first batch under
#: load, against 1.9 s in storage order); a typical batch's worth, then whole windows
FIRST_WINDOW = 64
#: units (chunks, row groups, record ranges) a window of a unit order spans at least:
#: with fewer, consecutive records come from one unit too often (MosaicML's shuffle
#: quality on 4,000 tiles: 10 units of 80 records 4.41, a permutation 4.49)
WINDOW_UNITS = 10
#: decoded bytes a window holds at most (large units get fewer per window): a window is
#: decoded whole before its first record is handed out, in each reading process, whose
#: memory stays within ~300 MB (Parquet's 100-row groups of 256x256x3 tiles: windows of
#: 3 groups, shuffle quality ~3.9 against 4.37 at 10; 10-row groups keep 10)
WINDOW_BYTES = 64 * 1024 * 1024
#: record ranges a window of ``shuffle="block"`` spans
BLOCK_RANGES = 4
#: windows an epoch holds at least when its order goes by units: windows are dealt
#: whole, so a smaller split gets smaller windows (reading processes' shares differ by
#: at most one window), and one too small for windows of two units is read as a
#: permutation (each process reads a unit at most once a window)
MIN_WINDOWS = 4
#: the shuffles that deal a seeded order of the whole split (resumable anywhere)
PERMUTATIONS = ("global", "block")


@dataclass(frozen=True, eq=False)
class GlobalLayout:
    """How an epoch's order of a whole split is made and dealt.

    ``units`` is None when every record is read alone at about its own cost: the
    order is a uniform permutation, dealt round-robin a record at a time, and each
    reading process reads its share in windows of ``window`` records sorted by
    position. Otherwise ``units`` holds where the units a read fetches whole begin
    (and, last, the record count): the order visits the units in a random order,
    shuffles records within consecutive windows of ``window`` records (each spans
    several units), and deals whole windows round-robin, so each unit is read once
    per epoch by one process."""

    count: int
    units: np.ndarray | None = None
    window: int = GLOBAL_WINDOW

    @classmethod
    def of(
        cls, count: int, units: np.ndarray | None, record_bytes: int, spans: int
    ) -> GlobalLayout:
        """A layout over ``units`` whose windows span at least ``spans`` typical units,
        within :data:`WINDOW_BYTES` of records of ``record_bytes`` (and at least one unit)."""
        if units is None or len(units) < 2:
            return cls.permutation(count, record_bytes)
        sizes = np.diff(units)
        unit = max(1, int(np.median(sizes)))
        cap = max(unit, WINDOW_BYTES // max(1, record_bytes) // unit * unit)
        window = min(max(GLOBAL_WINDOW, spans * unit), cap)
        window = min(-(-window // unit), count // MIN_WINDOWS // unit) * unit
        if window < 2 * unit:
            return cls.permutation(count, record_bytes)
        return cls(count, np.asarray(units, np.int64), window)

    @classmethod
    def permutation(cls, count: int, record_bytes: int) -> GlobalLayout:
        """A uniform permutation read in windows of :data:`PERMUTATION_WINDOW_BYTES`."""
        fit = PERMUTATION_WINDOW_BYTES // max(1, record_bytes)
        return cls(count, window=min(GLOBAL_WINDOW, max(FIRST_WINDOW, fit)))

    @property
    def block(self) -> int:
        """Records dealt to a reading process at a time."""
        return 1 if self.units is None else self.window

    def order(self, seed: int, epoch: int) -> np.ndarray:
        """Epoch ``epoch``'s order of all records (depends on (seed, epoch) only)."""
        rng = epoch_rng(seed, epoch, 2)
        if self.units is None:
            return rng.permutation(self.count)
        starts, sizes = self.units[:-1], np.diff(self.units)
        perm = rng.permutation(len(sizes))
        lengths = sizes[perm]
        first = np.repeat(starts[perm] - (np.cumsum(lengths) - lengths), lengths)
        records = first + np.arange(int(lengths.sum()))
        window_of = np.arange(len(records)) // self.window
        return records[np.argsort(window_of + rng.random(len(records)), kind="stable")]

    def dealt(self, n: int, consumer: int, consumers: int) -> np.ndarray:
        """Which of ``n`` records in order reading process ``consumer`` of ``consumers``
        is dealt (a mask): blocks of :attr:`block` records, round-robin."""
        return (np.arange(n) // self.block) % consumers == consumer

    def share(self, remaining: int, consumer: int, consumers: int) -> int:
        """How many of ``remaining`` records reading process ``consumer`` is dealt."""
        blocks, tail = divmod(remaining, self.block)
        mine = len(range(consumer, blocks, consumers)) * self.block
        return mine + (tail if blocks % consumers == consumer else 0)

    def windows(self, mine: np.ndarray, skip: int) -> Iterator[np.ndarray]:
        """``mine[skip:]`` in the windows a reading process reads together: cut at
        multiples of :attr:`window` of its sequence, so that a unit order's windows
        stay whole when resumed mid-window."""
        pos = skip
        while pos < len(mine):
            end = min(len(mine), (pos // self.window + 1) * self.window)
            if pos == skip and self.units is None:
                end = min(end, pos + FIRST_WINDOW)  # the first batch waits for no more
            yield mine[pos:end]
            pos = end


def global_order(count: int, seed: int, epoch: int) -> np.ndarray:
    """Epoch ``epoch``'s permutation of all ``count`` record indices (any machine, any
    process: it depends on (seed, epoch) only)."""
    return GlobalLayout(count).order(seed, epoch)


def consumer_indices(
    count: int,
    consumer: int,
    consumers: int,
    *,
    seed: int,
    epoch: int,
    history: Sequence[Sequence[int]] = (),
    layout: GlobalLayout | None = None,
) -> np.ndarray:
    """The records consumer ``consumer`` of ``consumers`` reads this epoch, in order.

    The epoch's order (:meth:`GlobalLayout.order`; a permutation by default) is dealt
    round-robin (:meth:`GlobalLayout.dealt`), so the consumers together read each
    record once. ``history`` resumes an epoch elastically: for each earlier run, how
    many records each of its consumers had taken of what it was dealt the same way;
    those are left out, run by run, and the rest dealt to this run's consumers."""
    if not 0 <= consumer < consumers:
        raise ValueError(f"consumer {consumer} of {consumers}")
    layout = layout or GlobalLayout(count)
    order = layout.order(seed, epoch)
    for consumed in history:
        taken = np.zeros(len(order), bool)
        for c, n in enumerate(consumed):
            dealt = np.flatnonzero(layout.dealt(len(order), c, len(consumed)))
            taken[dealt[: int(n)]] = True  # what consumer c of that run read
        order = order[~taken]
    return order[layout.dealt(len(order), consumer, consumers)]


def read_order(
    indices: np.ndarray, window: int
) -> Iterator[tuple[np.ndarray, list[tuple[int, int]]]]:
    """``indices`` in windows of ``window``, each with the runs of consecutive record
    positions to read for it (sorted by position, so a window is read in storage
    order, then handed out in the shuffled order)."""
    from ..abc import runs_of

    for lo in range(0, len(indices), max(1, window)):
        part = indices[lo : lo + window]
        yield part, runs_of(np.unique(part))


def check_skip(
    skip: int, count: int, rank: int, world_size: int, layout: GlobalLayout | None
) -> None:
    """Refuse a ``skip=`` (``to_tf_dataset``) beyond the records this rank reads in an
    epoch (of a seeded order dealt by ``layout``, or all of them)."""
    share = layout.share(count, rank, world_size) if layout is not None else count
    if skip > share:
        raise UsageError(
            f"skip={skip} is more than the {share} records rank {rank} of {world_size} reads "
            "in an epoch: it would resume past the epoch's end"
        )
