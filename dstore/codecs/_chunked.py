"""Shared by the chunked array containers (zarr, HDF5): chunk sizing and aligned writes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..schema import FieldSpec

__all__ = ["AlignedAppender", "chunk_rows"]


def chunk_rows(spec: FieldSpec, count: int, chunk_bytes: int) -> int:
    """Records per chunk so that a chunk holds about ``chunk_bytes``."""
    return max(1, min(max(count, 1), chunk_bytes // max(1, spec.record_bytes)))


class AlignedAppender:
    """Buffers appended rows so every store call covers whole chunks.

    Writing a batch that ends mid-chunk would make the library read, modify
    and rewrite that chunk on the next batch; buffering the tail avoids it.
    """

    def __init__(self, rows_per_chunk: int, store: Callable[[int, np.ndarray], None]) -> None:
        self.rows = rows_per_chunk
        self.store = store
        self.pos = 0  # rows handed to ``store`` so far
        self._tail: list[np.ndarray] = []
        self._tail_rows = 0

    def append(self, arr: np.ndarray) -> None:
        if self._tail:
            self._tail.append(arr)
            # astype: np.concatenate would turn big-endian data native-endian
            arr = np.concatenate(self._tail).astype(arr.dtype, copy=False)
            self._tail, self._tail_rows = [], 0
        whole = (len(arr) // self.rows) * self.rows
        if whole:
            self.store(self.pos, arr[:whole])
            self.pos += whole
        if whole < len(arr):
            self._tail = [arr[whole:]]
            self._tail_rows = len(arr) - whole

    def flush(self) -> None:
        if self._tail:
            arr = np.concatenate(self._tail).astype(self._tail[0].dtype, copy=False)
            self.store(self.pos, arr)
            self.pos += len(arr)
            self._tail, self._tail_rows = [], 0
