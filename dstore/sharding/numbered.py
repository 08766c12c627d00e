"""Shards numbered without a total (``<split>-000000<suffix>``), as WebDataset's
``ShardWriter`` names them: a brace pattern ``{000000..000009}`` covers a split."""

from __future__ import annotations

import re
from typing import ClassVar

from ..model import names
from ..model.schema import KNOWN_SPLITS
from .reader import ShardedDirectoryReader

__all__ = ["NumberedShardReader", "numbered_name", "numbered_split"]


def numbered_name(split: str, index: int, suffix: str) -> str:
    """``<split>-000000<suffix>``: a fixed-width number and no total."""
    return f"{names.escape(split)}-{index:06d}{suffix}"


def numbered_split(filename: str, suffix: str) -> str | None:
    """The known split (``train``, ``test``...) of a file named ``<split>-000000<suffix>``;
    None for any other name."""
    m = re.match(rf"^(?P<split>.+)-\d{{6}}{re.escape(suffix)}$", filename)
    return m.group("split") if m and m.group("split") in KNOWN_SPLITS else None


class NumberedShardReader(ShardedDirectoryReader):
    """A sharded reader of shards numbered without a total (files dstore did not write
    may be named by a brace pattern, as for any sharded reader); they end in
    :attr:`shard_suffix`."""

    shard_suffix: ClassVar[str]

    def split_of(self, filename: str) -> str:
        return numbered_split(filename, self.shard_suffix) or super().split_of(filename)
