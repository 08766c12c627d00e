"""Shards whose records are byte spans found by walking each shard once (an archive's
member index, e.g. WebDataset's tars): any record range is then one seek and one read,
and training workers may cut a shard by its size."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from typing import IO, Any, Protocol

import numpy as np

from .. import fs
from ..abc import runs_of
from ..errors import CodecIOError
from ..model.schema import Batch, SplitSpec
from .reader import ShardedDirectoryReader, ShardFile
from .records import pread_spans, stored_records

__all__ = ["Span", "SpanShardReader"]


class Span(Protocol):
    """A record's bytes in its shard: ``start:end``, and its name in messages."""

    @property
    def key(self) -> str: ...

    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...


class SpanShardReader(ShardedDirectoryReader):
    """A sharded reader whose format finds its records' spans with :meth:`walk_shard`."""

    def __init__(self, path: str, workers: int = 0, follow_links: bool = False) -> None:
        self._spans: dict[str, list[Any]] = {}
        super().__init__(path, workers, follow_links)

    @abstractmethod
    def walk_shard(self, f: IO[bytes], path: str, size: int) -> list[Any]:
        """The records of the shard in ``f`` (``size`` bytes) as :class:`Span`\\ s, in order."""

    def spans(self, path: str) -> list[Any]:
        """The record spans of one shard (walked once, then kept)."""
        if path not in self._spans:
            try:
                with fs.open_binary(path) as f:
                    self._spans[path] = self.walk_shard(f, path, fs.getsize(path))
            except FileNotFoundError:  # a shard the manifest lists (a damaged name, a lost file)
                raise CodecIOError(f"{path}: no such shard (the manifest lists it)") from None
        return self._spans[path]

    def shard_pieces(self, shard: ShardFile, target_bytes: int) -> int:
        return self.pieces_by_size(shard, target_bytes)

    def shard_records(self, shard: ShardFile, lo: int, hi: int) -> Iterator[Any]:
        """Records ``lo:hi`` of ``shard``: each span with its bytes and the shard's path."""
        spans = self.spans(shard.path)
        self.check_count(shard, len(spans))
        with fs.open_binary(shard.path) as f:
            for s in spans[lo:hi]:
                f.seek(s.start)
                buf = f.read(s.end - s.start)
                if len(buf) != s.end - s.start:
                    raise CodecIOError(f"{shard.path}: ends inside record {s.key!r}")
                yield s, buf, shard.path

    #: a window's records of every shard are read, then decoded into one batch
    decodes_across_shards = True

    def shard_raw_records(
        self, shard: ShardFile, positions: np.ndarray, names: Sequence[str] = ()
    ) -> list[Any]:
        """The spans at sorted distinct ``positions`` of ``shard`` with their bytes: a
        local shard's read where its member index puts them (close ones in one read,
        from a file kept open), a remote one's by runs of consecutive positions."""
        if fs.is_url(shard.path):
            return [r for a, b in runs_of(positions) for r in self.shard_records(shard, a, b)]
        spans = self.spans(shard.path)
        self.check_count(shard, len(spans))
        chosen = [spans[p] for p in positions.tolist()]
        fd = self.open_files().fd(shard.path)
        bufs = pread_spans(fd, shard.path, [(s.start, s.end) for s in chosen])
        return [(s, bytes(buf), shard.path) for s, buf in zip(chosen, bufs, strict=True)]

    def decode_raw(
        self, spec: SplitSpec, names: list[str], raw: Iterator[Any], count: int, pool: Executor
    ) -> Batch:
        return self.decode_stored(spec, names, stored_records(raw, count, spec), pool)
