"""The map-style dataset (``to_torch(..., map_style=True)``): ``ds[i]`` reads record ``i``,
for ``DataLoader(shuffle=True)`` and samplers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch.utils.data as tud

from ..model import Bytes, Image, String, StringList
from .split import SplitSource
from .torch_records import Record, records_at

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
    """``len`` and ``ds[i]`` over a random-access split: each index reads its record (a
    chunk or row group where a read fetches one whole), never a range around it.

    A ``DataLoader`` with a batch size asks for a batch's indexes in one call
    (``__getitems__``): their records are read together, each unit once, nearby ones
    in one read where the format joins them."""

    def __init__(self, source: SplitSource) -> None:
        source.require_random_access("map_style=True", "use the iterable dataset, or ")
        self.source = source

    def __len__(self) -> int:
        return self.source.count

    def _positions(self, indexes: Sequence[int]) -> np.ndarray:
        n = self.source.count
        idx = np.asarray([int(i) for i in indexes], np.int64)
        idx = np.where(idx < 0, idx + n, idx)
        bad = np.flatnonzero((idx < 0) | (idx >= n))
        if len(bad):
            shown = list(indexes)[int(bad[0])]
            raise IndexError(f"record {shown} out of range for split {self.source.split!r} of {n}")
        return idx

    def __getitem__(self, index: int) -> Record:
        return self.__getitems__([index])[0]

    def __getitems__(self, indexes: Sequence[int]) -> list[Record]:
        """The records at ``indexes`` (what torch's fetcher asks for a batch), read together."""
        return list(records_at(self.source, self._positions(indexes)))
