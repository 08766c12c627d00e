"""Hypothesis: any dtype x record shape x record count x batch size round-trips through every codec."""

from __future__ import annotations

import os
import tempfile

import hypothesis.extra.numpy as npst
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dstore
from dstore.registry import default_extension
from dstore.testing import assert_datasets_equal, dtype_cases, read_all

USABLE = [n for n, hint in dstore.available_codecs().items() if hint is None]


@st.composite
def datasets(draw):
    count = draw(st.integers(0, 12))
    fields = {}
    for i in range(draw(st.integers(1, 3))):
        dtype = np.dtype(draw(st.sampled_from(dtype_cases)))
        shape = draw(npst.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
        fields[f"f{i}"] = draw(npst.arrays(dtype, (count, *shape)))
    return {"train": fields}


@pytest.mark.parametrize("codec", USABLE)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=datasets(), batch_bytes=st.integers(1, 4096))
def test_any_dataset_roundtrips(codec, data, batch_bytes):
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src.npz")
        dst = os.path.join(tmp, "dst" + default_extension(codec))
        dstore.save(data, src)
        dstore.convert(src, dst, batch_bytes=batch_bytes)
        assert_datasets_equal(data, read_all(dst))
