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


_NUMBER_TEXTS = st.one_of(
    st.integers().map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.from_regex(r"-?[1-9][0-9]{0,2}(\.[0-9]{1,3})?[eE][+-]?[0-9]{1,4}", fullmatch=True),
)


@settings(max_examples=300, deadline=None)
@given(text=_NUMBER_TEXTS)
def test_json_numbers_follow_one_rule_whichever_parser_runs(text):
    """orjson and the standard library (issue #26: 1e400 became inf in one, 2**64 a
    float64 in the other) give the same number of the same type, or both refuse it."""
    pytest.importorskip("orjson")
    from dstore.codecs.json import JsonRangeError, _stdlib_loads, loads

    doc = f'[{{"v": {text}}}]'.encode()
    outcomes = []
    for parse in (loads, _stdlib_loads):
        try:
            value = parse(doc)[0]["v"]
        except JsonRangeError as e:
            outcomes.append(("refused", str(e)))
        else:
            outcomes.append((type(value).__name__, value))
    assert outcomes[0] == outcomes[1], (text, outcomes)
    if outcomes[0][0] == "refused":
        assert outcomes[0][1].startswith("record 0, field 'v': the number ")
