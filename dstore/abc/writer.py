"""The writing half of the format interface: :class:`Writer` (pushed batches) and, for
formats cut into independent files, :class:`Shard` and :class:`ShardWriter` (a planned
record range each, written by any process).

Why two write protocols: a :class:`Writer` is *pushed* one batch at a time by the
engine, while a :class:`ShardWriter` *pulls* the records of one planned shard, which
is what lets a shard be rewritten alone on resume or on a Dask worker (see
:mod:`dstore.abc.codec`).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..model.schema import Batch, Schema

__all__ = ["Shard", "ShardWriter", "Writer"]


class Writer(ABC):
    """Writes one dataset at a path chosen by the caller."""

    def __init__(self, path: str, schema: Schema) -> None:
        self.path = path
        self.schema = schema

    @abstractmethod
    def write(self, split: str, batch: Batch) -> None:
        """Append a batch of records to ``split`` (splits arrive in schema order)."""

    @abstractmethod
    def close(self) -> None:
        """Flush everything and finalise metadata; after this the output is complete."""

    def abort(self) -> None:  # noqa: B027 - optional hook: writers without handles keep it
        """Release handles after a failure; the caller deletes the output."""

    def write_regions(self, submit: Callable[..., None]) -> None:
        """Hand the writing of whole chunks to ``submit(function, *args)`` -- e.g. one
        Dask task each -- instead of writing them here (codecs with ``region_writes``)."""
        raise NotImplementedError(f"{type(self).__name__}: writes in one process")


@dataclasses.dataclass(frozen=True)
class Shard:
    """One independently writable output file: records ``start:stop`` of ``split``."""

    split: str
    index: int
    start: int
    stop: int
    file: str  # name relative to the output root

    @property
    def records(self) -> int:
        return self.stop - self.start


class ShardWriter(ABC):
    """Writes shards of a planned output; picklable, so a Dask worker can run it."""

    #: threads a shard's encoding uses (the format's ``workers`` option; 0: one per core)
    workers: int = 0
    #: per split, how many records the dataset holds before the first one written now
    #: (an append): a format that numbers records in its files (WebDataset's sample
    #: keys) counts from there, so the numbers go on from the dataset's last record
    record_offsets: Mapping[str, int] = {}

    def gil_bound(self, split: str) -> bool:
        """True when encoding ``split``'s records holds the GIL most of the time (fpng's
        binding does), so that its shards write faster each in a worker process of its
        own than on threads sharing one interpreter."""
        return False

    @abstractmethod
    def write_shard(
        self,
        root: str,
        shard: Shard,
        batches: Iterator[Batch],
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        """Write one shard from its records; return its manifest entry
        (``file``, ``records``, ``bytes``, ``sha256``). ``root`` is a local
        folder or an fsspec URL. ``progress(n)`` is called as records are written."""

    @abstractmethod
    def commit(
        self, root: str, shards: list[dict[str, Any]], run: Mapping[str, Any] | None = None
    ) -> None:
        """Write the manifest for all shards (in plan order): the output is then complete.
        ``run`` (the source's fingerprint and a digest of all that fixed the bytes) is
        stored with it, so a later ``--resume`` can recognise this command's output."""

    def fingerprint(self) -> dict[str, str]:
        """Libraries (with versions) whose output the shard bytes depend on, beyond dstore's."""
        return {}
