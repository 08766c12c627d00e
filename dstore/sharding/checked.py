"""Shards and record indexes checked against what describes them, before they are read.

:class:`CheckedShards` is the part of :class:`~dstore.sharding.reader.ShardedDirectoryReader`
that never trusts a manifest entry or an index without the data:

- a local shard is read only at the size its manifest entry lists, and a shard
  read whole (``convert``, ``verify``, a training epoch of whole shards) only once
  its sha256 matched; a file checked once is not hashed again while its identity
  and times stay the same (a rewrite or a replacement changes them);
- a record index is used only once the shard's frame headers, walked from its
  first byte, are exactly the frames it lists (:func:`~dstore.sharding.index.check_frames`).

Shards at a URL are checked by their records alone (CRCs, counts): hashing them
would read each one twice over the network; a local cache checks its copies.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import fs
from ..errors import CodecIOError, DstoreError
from .index import check_frames, read_index
from .manifest import check_listed_file, check_shard_file

if TYPE_CHECKING:
    from .reader import ShardFile

__all__ = ["CheckedShards"]


def _compare(shard: ShardFile, size: int, sha: str) -> None:
    if size != shard.size or sha != shard.sha256:
        check_shard_file(shard.path, {"bytes": shard.size, "sha256": shard.sha256})


def _identity(path: str) -> tuple[int, ...]:
    """What changes when a local file is rewritten or replaced (its ctime cannot be set)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _digest(path: str) -> tuple[tuple[int, ...], int, str]:
    """The file's identity before it was hashed, then its size and sha256."""
    ident = _identity(path)
    return (ident, *fs.sha256_file(path))


class CheckedShards:
    """Size, sha256 and record-index checks of a sharded reader's shards (a mixin)."""

    shards: dict[str, list[ShardFile]]
    manifest: dict[str, Any] | None
    root: str
    codec_name: ClassVar[str]
    #: where each file the manifest lists lies, when not in :attr:`root` (a versions folder)
    located: dict[str, str]
    _checked_files: dict[str, tuple[int, ...]]
    _offsets: dict[str, np.ndarray]
    #: shards being hashed ahead, on :attr:`_hasher`'s thread, by path
    _hashing: dict[str, Future[tuple[tuple[int, ...], int, str]]]
    _hasher: ThreadPoolExecutor | None
    #: the process that started :attr:`_hasher`
    _hasher_pid: int

    def walk_frames(self, shard: ShardFile) -> Sequence[int]:
        """Where each record's frame of the plain ``shard`` starts, then where the file
        ends, from its own frame headers (a format whose shards get record indexes
        implements it)."""
        raise CodecIOError(f"{shard.path}: {self.codec_name} shards have no record index")

    def check_shard(self, shard: ShardFile, whole: bool) -> None:
        """Refuse a local shard whose size differs from its manifest entry, and one
        read ``whole`` whose sha256 does; files dstore did not write (no entry) and
        URLs pass as they are."""
        if shard.sha256 is None or fs.is_url(shard.path):
            return
        try:
            ident = _identity(shard.path)
        except OSError as e:
            raise CodecIOError(f"{shard.path}: cannot stat: {e.strerror or e}") from None
        if self._checked_files.get(shard.path) == ident:
            return
        if ident[2] != shard.size:
            raise CodecIOError(
                f"{shard.path}: {ident[2]} bytes, the manifest lists {shard.size} (not this "
                "dataset's shard, or damaged)"
            )
        if not whole:
            return
        ahead = self._hashing.pop(shard.path, None) if self._hasher_pid == os.getpid() else None
        if ahead is not None:
            before, size, sha = ahead.result()
            if before == ident:  # hashed while the shard before it was read, unchanged since
                _compare(shard, size, sha)
                self._checked_files[shard.path] = ident
                return
        check_shard_file(shard.path, {"bytes": shard.size, "sha256": shard.sha256})
        self._checked_files[shard.path] = ident

    def sized_paths(self, split: str) -> list[str]:
        """The paths of ``split``'s shards, each local one's size checked against its
        manifest entry (for a reader that reads the files itself: tf.data)."""
        for shard in self.shards[split]:
            self.check_shard(shard, whole=False)
        return [s.path for s in self.shards[split]]

    def hash_ahead(self, shard: ShardFile) -> None:
        """Start hashing the local ``shard`` (to be read whole next) on a thread of its
        own, while the shard before it is decoded: :meth:`check_shard` then waits for
        that instead of hashing (hashlib lets the GIL go)."""
        if shard.sha256 is None or fs.is_url(shard.path):
            return
        if self._hasher is None or self._hasher_pid != os.getpid():
            # a process forked from one that hashed ahead has none of its threads: a
            # future started there would never finish here
            self._hasher = ThreadPoolExecutor(1, thread_name_prefix="dstore-sha256")
            self._hasher_pid, self._hashing = os.getpid(), {}
        if shard.path not in self._hashing:
            self._hashing[shard.path] = self._hasher.submit(_digest, shard.path)

    def close_checks(self) -> None:
        """Stop hashing ahead (a reader closed before it read those shards)."""
        if self._hasher is not None and self._hasher_pid == os.getpid():
            for ahead in self._hashing.values():
                ahead.cancel()
            self._hasher.shutdown(wait=True)
        self._hasher, self._hashing = None, {}

    def frame_offsets(self, shard: ShardFile) -> np.ndarray | None:
        """Where each record of ``shard`` starts (and, last, where the shard ends), from
        its record index, checked against the shard's frames; None without an index."""
        if shard.index is None or shard.compression is not None:
            return None
        offsets = self._offsets.get(shard.path)
        if offsets is None:
            offsets = read_index(shard.index, shard.path, shard.records)
            self.check_index_frames(shard, offsets)
            self._offsets[shard.path] = offsets
        return offsets

    def check_index_frames(self, shard: ShardFile, offsets: np.ndarray) -> None:
        """Refuse ``shard``'s index unless ``offsets`` (what it lists) are the frames the
        shard's headers give, walked from its first byte."""
        assert shard.index is not None
        check_frames(shard.index, shard.path, offsets, np.asarray(self.walk_frames(shard)))

    def _check_index(self, shard: ShardFile) -> tuple[bool, str]:
        try:
            self._offsets.pop(shard.path, None)
            self.frame_offsets(shard)
        except DstoreError as e:
            return False, str(e)
        name = os.path.basename(shard.index or "")
        return True, f"{name}: every entry is one whole frame of {os.path.basename(shard.path)}"

    def _check_listed(
        self, shard: ShardFile, entry: Mapping[str, Any], split: str
    ) -> tuple[bool, str]:
        """A shard against its manifest ``entry``: ``(ok, what was found)``; a local one
        through :meth:`check_shard`, so that reading it whole next hashes it no more."""
        if fs.is_url(shard.path):
            return check_listed_file(self.root, entry, split, self.located)
        try:
            self.check_shard(shard, whole=True)
        except CodecIOError:
            # reported here, once; its records are then decoded as they are, so that the
            # check can name the first one that fails
            with contextlib.suppress(OSError):
                self._checked_files[shard.path] = _identity(shard.path)
            return check_listed_file(self.root, entry, split, self.located)
        return True, f"{entry['file']}: {shard.size} bytes, sha256 matches ({split})"

    def check_integrity(self) -> list[tuple[bool, str]]:
        """Every shard the manifest lists: present, of its size, with its sha256; every
        record index (the manifest's or a sidecar) walked against its shard's frames."""
        results: list[tuple[bool, str]] = []
        if self.manifest is None:
            results.append(
                (True, f"no dstore manifest: {self.codec_name} records decoded and checked only")
            )
        else:
            for split, info in self.manifest["splits"].items():
                for shard, entry in zip(self.shards[split], info["shards"], strict=True):
                    results.append(self._check_listed(shard, entry, split))
                    if "index" in entry:
                        results.append(
                            check_listed_file(self.root, entry["index"], split, self.located)
                        )
        for shards in self.shards.values():
            results.extend(
                self._check_index(s) for s in shards if s.index is not None and not s.compression
            )
        return results
