"""PyTorch datasets over any dstore format (extra ``torch``): the only module importing torch.

``to_torch(path, split)`` gives a ``torch.utils.data.IterableDataset`` of
records ``{field: tensor}``. Each reading process (a DataLoader worker of one
distributed rank) reads whole record ranges -- TFRecord shards or pieces of
them, runs of zarr/HDF5 chunks, npz row blocks -- and every process derives the
same plan from ``(seed, epoch)``, so each record arrives exactly once per epoch.
Shuffling is the range order plus a bounded buffer of records, or a seeded order
of the whole split per epoch (:class:`~dstore.readers.plan.GlobalLayout`, random-
access storage only): with ``shuffle="global"`` a uniform permutation where each
record is read alone (a record index, ArrayRecord, a tar's member index), the
chunks or row groups in a random order shuffled in windows of several where a
read fetches a whole chunk; with ``shuffle="block"`` the record ranges in a random
order shuffled in windows of a few. The order is dealt to the reading processes,
each reading a window's records in one call (``Reader.read_records``: only what
holds them) and handing them out in the order.
``map_style=True`` gives a ``Dataset`` with ``len`` and indexing for the
random-access formats.

Resuming mid-epoch: ``state_dict()`` / ``load_state_dict()`` follow the
protocol ``torchdata.stateful_dataloader.StatefulDataLoader`` uses (it calls
them on each worker's copy), and work alone in one process too. A state is a
small JSON object (its dataset's fingerprint, seed, epoch, how many records this
reading process has taken; :mod:`dstore.readers.state`), checked field by field
when loaded; a restored reader skips those records without reading them. With
``shuffle="global"`` or ``"block"``, :func:`merge_states` joins the states of every reading
process of a run into one that resumes on any number of ranks and workers:
every remaining record exactly once, dealt anew (so the order after the
resume differs from the uninterrupted one).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.utils.data as tud

from ..errors import ReaderStateError
from .plan import (
    PERMUTATIONS,
    WINDOW_BYTES,
    consumer_indices,
    consumer_ranges,
    drop_first,
    epoch_rng,
    shuffle_buffer,
)
from .split import SplitSource
from .state import STATE_VERSION, ReaderPlan, check_state, dataset_states, merge_states
from .torch_map import DstoreMapDataset, _ragged_names
from .torch_records import Record, _merge, _records, collate, pad_collate, records_at

__all__ = [
    "DstoreIterableDataset",
    "DstoreMapDataset",
    "collate",
    "data_loader",
    "dataset_states",
    "merge_states",
    "pad_collate",
    "to_torch",
]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters
#: glibc's mmap threshold in a worker whose records are copies held in a shuffle buffer
HELD_MMAP_THRESHOLD = 128 * 1024
#: ... and in one whose records are views into batches and windows freed in order: a
#: window's decoded records (:data:`~dstore.readers.plan.WINDOW_BYTES` at most in a
#: unit order) come from the heap, reused window after window
VIEWS_MMAP_THRESHOLD = WINDOW_BYTES


@functools.cache  # once per process and kind (a forked worker inherits the done call)
def _fix_malloc_threshold(held: bool) -> None:
    """In a DataLoader worker (a process that exists for this dataset), pin glibc's
    mmap threshold (glibc raises it each time a large block is freed, up to 32 MiB).

    ``held`` (a shuffle buffer of copied records): at its default 128 KiB, else
    record ranges and per-record tensors come from the heap, fragment it, and a
    worker's RSS creeps up by a hundred MB or more; fixed, every such buffer is
    returned to the system when freed (measured: growth 116 -> 34 MB reading 118 MB
    of tiles with a 64-record buffer). Otherwise (records are views into a batch or
    a window, each freed before the next but one is read) at
    :data:`VIEWS_MMAP_THRESHOLD`, the heap trimmed past as much: the buffers of each
    decoded image (inflated rows, a pass of the unfiltering) and the windows they
    are decoded into are reused from the heap. At 128 KiB each was mapped and
    faulted in afresh: 50 page faults a 256x256x3 tile, as much system time as a
    third of its decoding (measured in one process reading as a worker does, 4,000
    photo tiles, ``shuffle="global"``: 1.4-1.6 s of system time an epoch, 0.4-0.6 s
    with the heap reused)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        if held:
            libc.mallopt(_M_MMAP_THRESHOLD, HELD_MMAP_THRESHOLD)
        else:
            libc.mallopt(_M_MMAP_THRESHOLD, VIEWS_MMAP_THRESHOLD)
            libc.mallopt(_M_TRIM_THRESHOLD, VIEWS_MMAP_THRESHOLD)
    except (OSError, AttributeError):  # not glibc: nothing to fix
        pass


def _dist() -> tuple[int, int] | None:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class DstoreIterableDataset(tud.IterableDataset):
    """Records of one split, each exactly once per epoch across workers and ranks."""

    def __init__(
        self,
        source: SplitSource,
        *,
        shuffle: int | str = 0,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self._global = shuffle in PERMUTATIONS
        if not self._global and (isinstance(shuffle, str) or shuffle < 0):
            raise ValueError(
                f"shuffle is a buffer size in records (>= 0), 'global' or 'block'; got {shuffle!r}"
            )
        if self._global:
            source.require_random_access(f"shuffle={shuffle!r}")
        #: how a seeded order of the whole split is made and dealt (shuffle global/block)
        self._layout = source.layout(str(shuffle)) if self._global else None
        self._place: tuple[int, int] | None
        if rank is not None and world_size is not None:
            if not (world_size >= 1 and 0 <= rank < world_size):
                raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
            self._place = (rank, world_size)
        elif rank is not None or world_size is not None:
            raise ValueError("give rank= and world_size= together")
        else:
            self._place = _dist()
        self.source = source
        self.shuffle: int | str = shuffle
        self.seed = seed
        self.epoch = 0
        #: a loaded state, applied by the next iteration
        self._resume: dict[str, Any] | None = None
        #: records of this epoch's sequence taken before this iteration started, and since
        self._start = 0
        self._yielded = 0
        self._history: list[list[int]] = []

    @property
    def count(self) -> int:
        """Records in the split (all ranks together)."""
        return self.source.count

    @property
    def skipped(self) -> int:
        """Records left out by ``on_error="skip"`` in this process."""
        return self.source.skipped

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` (the same order for the same seed and epoch).

        Call it before creating the epoch's iterator; DataLoader workers get a
        copy of the dataset each epoch unless ``persistent_workers=True``."""
        self.epoch = int(epoch)
        self._resume, self._start, self._yielded, self._history = None, 0, 0, []

    def state_dict(self) -> dict[str, Any]:
        """Where this reading process is in the epoch: JSON, a few numbers."""
        me, consumers = self.consumer()
        return {
            "version": STATE_VERSION,
            "dataset": self.source.identity,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "epoch": self.epoch,
            "history": [list(h) for h in self._history],
            "consumer": me,
            "consumers": consumers,
            "taken": self._start + self._yielded,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` (same ranks and workers) or from
        :func:`merge_states` (any ranks and workers; ``shuffle="global"`` or ``"block"``).

        The state is checked field by field against this reader (its dataset,
        seed, shuffle, and counts a process could have taken): a wrong one is one
        :class:`~dstore.errors.ReaderStateError` line (a ``ValueError``)."""
        named = state.get("dataset") if isinstance(state, dict) else None
        pinned = named.get("version") if isinstance(named, dict) else None
        if type(pinned) is int and pinned != self.source.version:
            self.source = self.source.at_version(pinned)  # the version the run started on
        src = self.source
        plan = ReaderPlan(
            src.identity, self.seed, self.shuffle, src.ranges, not src.random_access, self._layout
        )
        checked = check_state(state, plan)
        self.epoch = checked["epoch"]
        self._resume = checked

    def collate_fn(self, pad: bool = False) -> Any:
        """:func:`collate` for this dataset: its ragged fields always come as lists
        (or, with ``pad=True``, padded with a ``<field>_mask``)."""
        return functools.partial(collate, pad=pad, ragged=_ragged_names(self.source))

    def consumer(self) -> tuple[int, int]:
        """(index, count) of this reading process among all ranks' workers."""
        rank, world = self._place or _dist() or (0, 1)
        info = tud.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return rank * workers + worker, world * workers

    def __iter__(self) -> Iterator[Record]:
        if tud.get_worker_info() is not None:
            _fix_malloc_threshold(held=not self._global and int(self.shuffle) > 1)
        me, consumers = self.consumer()
        skip = self._apply_resume(me, consumers)
        self._start, self._yielded = skip, 0
        records = (
            self._global_records(me, consumers, skip)
            if self._global
            else self._range_records(me, consumers, skip)
        )
        for record in records:
            self._yielded += 1
            yield record

    def _apply_resume(self, me: int, consumers: int) -> int:
        """Records of this consumer's sequence to leave out (taken before a restore)."""
        state, self._resume = self._resume, None
        if state is None:
            self._history = []
            return 0
        self._history = [list(h) for h in state["history"]]
        if "consumer" not in state:  # merged: the consumed records are in the history now
            self._history.append([int(n) for n in state["consumed"]])
            return 0
        if (state["consumer"], state["consumers"]) != (me, consumers):
            raise ReaderStateError(
                f"this state is of reading process {state['consumer']} of {state['consumers']}, "
                f"this is {me} of {consumers}: join every process's state with "
                "dstore.readers.torch.merge_states to resume on another number of them"
            )
        return int(state["taken"])

    def _global_records(self, me: int, consumers: int, skip: int) -> Iterator[Record]:
        """This consumer's share of the epoch's order, a window at a time: the window's
        records read together (each unit they lie in once), handed out in the order."""
        src, layout = self.source, self._layout
        assert layout is not None  # set for every seeded order
        mine = consumer_indices(
            src.count,
            me,
            consumers,
            seed=self.seed,
            epoch=self.epoch,
            history=self._history,
            layout=layout,
        )
        for part in layout.windows(mine, skip):
            yield from records_at(src, part)

    def _range_records(self, me: int, consumers: int, skip: int) -> Iterator[Record]:
        src = self.source
        streaming = not src.random_access
        mine = consumer_ranges(
            src.ranges,
            me,
            consumers,
            shuffle=int(self.shuffle) > 0,
            seed=self.seed,
            epoch=self.epoch,
            streaming=streaming,
        )
        mine = drop_first(mine, skip)  # taken before a restore: never read again
        if streaming:
            rows = max((b - a for a, b in src.ranges), default=1)
            batches = (bt for a, b in _merge(mine) for bt in src.batches(a, b, rows))
        else:
            batches = (bt for a, b in mine for bt in src.batches(a, b))
        buffer = int(self.shuffle)
        records = _records(batches, src.kinds(), copy=buffer > 1)
        if buffer > 1:
            records = shuffle_buffer(records, buffer, epoch_rng(self.seed, self.epoch, 1, me))
        yield from records


def data_loader(dataset: Any, **kwargs: Any) -> tud.DataLoader:
    """``torch.utils.data.DataLoader(dataset, **kwargs)``, its workers started with
    'spawn' when the dataset's format cannot be used in forked workers
    (``Codec.fork_safe``), as a user must start them for it -- unless this process
    has not imported the library whose threads do not survive a fork
    (``Codec.fork_unsafe_module``): forked workers then start in a fraction of the time."""
    from ..registry import get_codec_class

    source = getattr(dataset, "source", None)
    fmt = getattr(source, "format", None)
    if kwargs.get("num_workers") and fmt is not None:
        codec = get_codec_class(fmt)
        module = codec.fork_unsafe_module
        if not codec.fork_safe and (module is None or module in sys.modules):
            kwargs.setdefault("multiprocessing_context", "spawn")
    return tud.DataLoader(dataset, **kwargs)


def to_torch(
    path: str | os.PathLike[str],
    split: str = "train",
    fields: Sequence[str] | None = None,
    shuffle: int | str = 0,
    seed: int = 0,
    decode: bool = True,
    *,
    map_style: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
    on_error: str = "raise",
    range_mb: float | None = None,
    format: str | None = None,
    follow_links: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | float | str | None = None,
    version: int | None = None,
) -> DstoreIterableDataset | DstoreMapDataset:
    """A PyTorch dataset of ``{field: tensor}`` records of ``split``; see the module doc.

    ``shuffle`` is the shuffle buffer in records (0: storage order; the range
    order is shuffled too when > 0), ``"global"``: a seeded order of the whole split
    each epoch (a uniform permutation where each record is read alone; over chunks
    or row groups, each read once, shuffled in windows of several), or ``"block"``:
    the record ranges in a seeded order, shuffled in windows of a few ranges (reads
    of whole ranges; less random). Both need random-access storage; ``seed`` and
    ``set_epoch`` make each epoch's order reproducible. ``state_dict``/``load_state_dict`` resume mid-epoch. ``rank``/``world_size`` default to
    ``torch.distributed`` when it is initialised. ``on_error="skip"`` leaves
    out records that do not read, counting them (``dataset.skipped``, and a
    ``dstore`` log line each). ``range_mb`` is the decoded size of the record
    ranges handed to workers (default 8; smaller shuffles and balances finer,
    larger reads in fewer calls). ``decode=False`` is reserved for encoded image
    fields as bytes; every field decodes today. ``follow_links=True`` reads what HDF5
    external links and virtual datasets or zarr symlinks out of the store lead to
    (refused by default, :class:`~dstore.errors.UnsafeInputError`).

    ``cache_dir`` (a sharded format read from a URL such as ``s3://``): each
    shard is downloaded whole once into a folder of the cache's own in it,
    checked against the manifest's size and sha256, and later epochs read the
    copies; ``cache_limit`` (None, a whole number of bytes, or text such as
    ``"20GB"``) bounds it, least recently used copies deleted first (see
    :mod:`dstore.sharding.cache`).

    ``version=N`` reads the dataset as it was at version N (default: the latest when
    called); either way the version is pinned: workers started later, and a state
    saved now and loaded after an append, read the same records.
    """
    if not decode:
        raise NotImplementedError(
            "decode=False (encoded images as bytes) comes with the Image field kind; "
            "every field is decoded today"
        )
    if range_mb is not None and range_mb <= 0:
        raise ValueError(f"range_mb must be > 0; got {range_mb}")
    source = SplitSource(
        path,
        split,
        fields,
        format=format,
        on_error=on_error,
        range_bytes=None if range_mb is None else max(1, int(range_mb * 1024 * 1024)),
        follow_links=follow_links,
        cache_dir=cache_dir,
        cache_limit=cache_limit,
        version=version,
    )
    if map_style:
        if shuffle or rank is not None:
            raise ValueError(
                "map_style=True: shuffle and shard with the DataLoader's sampler "
                "(e.g. DistributedSampler), not shuffle=/rank="
            )
        return DstoreMapDataset(source)
    return DstoreIterableDataset(
        source, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size
    )
