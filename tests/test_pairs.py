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


def _pairs() -> list[object]:
    """Every ordered pair; those through JSON are slow (5-9 s each: the tiles as JSON text),
    so they run in the full suite only. Every format's own round trip, and every pair of
    the binary formats, stay in `pytest -m "not slow"` (tests/test_roundtrip.py too)."""
    return [
        pytest.param(a, b, marks=[pytest.mark.slow] if {a, b} & {"json", "jsonl"} else [])
        for a, b in itertools.permutations(_usable(), 2)
    ]


@pytest.mark.parametrize(("a", "b"), _pairs())
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
