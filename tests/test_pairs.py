"""Any-to-any: every ordered pair of formats, and back to the source, bit-exact."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import dstore
from dstore.registry import codec_names, default_extension
from dstore.testing import assert_datasets_equal, read_all


def _usable() -> list[str]:
    return [n for n, hint in dstore.available_codecs().items() if hint is None]


@pytest.mark.parametrize(("a", "b"), list(itertools.permutations(_usable(), 2)))
def test_pair_and_back(tmp_path, tiles, features, a, b):
    x, y = tiles
    feats, _labels = features
    data = {
        "train": {
            "x": x[:30],
            "y": y[:30],
            "f": feats[:30].astype(np.float64),
            "h": feats[:30].astype(np.float16),
        },
        "test": {
            "x": x[30:],
            "y": y[30:],
            "f": feats[30:60].astype(np.float64),
            "h": feats[30:60].astype(np.float16),
        },
    }
    src = str(tmp_path / f"src{default_extension(a)}")
    mid = str(tmp_path / f"mid{default_extension(b)}")
    back = str(tmp_path / f"back{default_extension(a)}")
    dstore.save(data, src)
    dstore.convert(src, mid)
    dstore.convert(mid, back)
    assert_datasets_equal(data, read_all(mid))
    assert_datasets_equal(data, read_all(back))
    assert dstore.verify(src, back).ok


def test_codec_names_cover_builtins():
    assert {"npz", "zarr", "hdf5", "tfrecord"} <= set(codec_names())
