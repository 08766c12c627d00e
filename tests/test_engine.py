"""dstore.engine.cast: the one read -> check -> cast -> count loop both write paths share."""

from __future__ import annotations

import os

import numpy as np
import pytest

import dstore
from dstore.api import ArrayReader, write_dataset
from dstore.engine.dtypes import DtypePolicy
from dstore.errors import SchemaError
from dstore.model.schema import Schema, SplitSpec
from dstore.sources import codec_for
from dstore.testing import parts_options, usable_formats


class _ShortReader(ArrayReader):
    """Its schema claims ``claimed`` records of split train; it yields ``have``."""

    def __init__(self, have: int, claimed: int) -> None:
        super().__init__({"train": {"x": np.arange(have * 3, dtype=np.int32).reshape(have, 3)}})
        spec = self.schema.splits["train"]
        self.schema = Schema({"train": SplitSpec("train", claimed, spec.fields)})

    def _iter(self, spec, names, start, stop, rows):
        return super()._iter(spec, names, start, min(stop, self._have_stop()), rows)

    def _have_stop(self) -> int:
        return len(self._data["train"]["x"])


@pytest.mark.parametrize("ext", list(usable_formats(text=True).values()))
@pytest.mark.parametrize(("have", "claimed"), [(0, 1), (5, 6), (40, 41), (7, 100)])
def test_a_reader_that_ends_early_fails_every_write_path_alike(tmp_path, ext, have, claimed):
    """Single-writer formats and sharded TFRecord go through the same count check,
    and leave nothing behind."""
    dst = str(tmp_path / f"out{ext}")
    try:
        name = next(n for n, e in usable_formats(text=True).items() if e == ext)
        codec = codec_for(dst, None, parts_options(name, shard_mb=0.0001, chunk_mb=0.0001) or None)
    except dstore.MissingDependencyError as e:
        pytest.skip(str(e))
    with pytest.raises(
        SchemaError, match=rf"split 'train' yielded records 0:{have}, its schema says 0:"
    ):
        write_dataset(_ShortReader(have, claimed), dst, codec, policy=DtypePolicy(), batch_bytes=64)
    assert os.listdir(tmp_path) == []
