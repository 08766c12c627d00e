"""The map-style dataset (``to_torch(..., map_style=True)``): ``ds[i]`` reads record ``i``,
for ``DataLoader(shuffle=True)`` and samplers."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils.data as tud

from ..model import Bytes, Image, String, StringList
from .split import SplitSource
from .torch_records import Record, _column

__all__ = ["DstoreMapDataset"]


def _ragged_names(source: SplitSource) -> tuple[str, ...]:
    """Fields whose records are tensors of varying shape (Ragged, raw images of varying size)."""
    return tuple(
        name
        for name, kind in source.kinds().items()
        if not source.spec.fields[name].dense
        and not isinstance(kind, (String, Bytes, StringList))
        and not (isinstance(kind, Image) and kind.encoding != "raw")
    )


class DstoreMapDataset(tud.Dataset):
    """``len`` and ``ds[i]`` over a random-access split. In sequential order (``i`` right
    after the last) it reads from ``i`` to the end of its range and keeps that; in any other order
    (``DataLoader(shuffle=True)``, samplers) it reads record ``i`` alone, since decoding a
    range of tens of records to hand out one made a shuffled epoch tens of times slower."""

    def __init__(self, source: SplitSource) -> None:
        source.require_random_access("map_style=True", "use the iterable dataset, or ")
        self.source = source
        self._starts = [a for a, _ in source.ranges]
        # (first, stop, columns) of the records read last
        self._cached: tuple[int, int, dict[str, Sequence[Any] | torch.Tensor]] | None = None
        self._last = -1  # the index asked last; -1: none yet, so ds[0] reads its range

    def __len__(self) -> int:
        return self.source.count

    def __getitem__(self, index: int) -> Record:
        n = self.source.count
        i = int(index) + n if int(index) < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"record {index} out of range for split {self.source.split!r} of {n}")
        if self._cached is None or not self._cached[0] <= i < self._cached[1]:
            # in order: on to the end of i's range (a worker's next batch may start mid-range)
            a, b = i, i + 1
            if i == self._last + 1:
                b = self.source.ranges[bisect.bisect_right(self._starts, i) - 1][1]
            (batch,) = list(self.source.batches(a, b)) or [{}]
            cols = {n_: _column(batch[n_], kind, False) for n_, kind in self.source.kinds().items()}
            self._cached = (a, b, cols)
        self._last = i
        a, _, cols = self._cached
        return {
            name: (c[i - a].clone() if isinstance(c, torch.Tensor) else c[i - a])
            for name, c in cols.items()
        }

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cached"], state["_last"] = None, -1
        return state
