"""Hypothesis: any dtype x record shape x record count x batch size round-trips through every codec."""

from __future__ import annotations

import math
import os
import tempfile

import hypothesis.extra.numpy as npst
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
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


def _json_number_rule(text: str) -> tuple[str, object]:
    """What dstore makes of a one-record JSON number field, by its documented rule."""
    if all(c in "-0123456789" for c in text):
        n = int(text)
        if -(2**63) <= n < 2**63:
            return "int64", n
        return (
            ("SchemaError", "does not fit in int64")
            if 0 < n < 2**64
            else (
                "CodecIOError",
                "does not fit in 64 bits",
            )
        )
    x = float(text)
    return ("float64", x) if math.isfinite(x) else ("CodecIOError", "is beyond float64's range")


@settings(max_examples=300, deadline=None)
@given(text=_NUMBER_TEXTS)
@example(text=str(2**63))  # past int64, within uint64: failed when drawn (SchemaError's kind)
def test_json_numbers_follow_one_rule_whichever_parser_runs(text):
    """Issue #26: 1e400 became inf, and 2**64 a float64 under orjson but an exact int under
    the standard library. The reader (orjson, which misreads huge integers, when
    installed) and the standard library's checked parser both follow one rule."""
    from dstore.codecs.json.parse import JsonRangeError, _stdlib_loads

    kind, want = _json_number_rule(text)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "n.json")
        with open(path, "w") as f:
            f.write(f'[{{"v": {text}}}]')
        try:
            got = read_all(path)["data"]["v"]
        except dstore.DstoreError as e:
            assert type(e).__name__ == kind and str(want) in str(e), e
        else:
            assert (got.dtype.name, got.tolist()) == (kind, [want])
    try:
        parsed = _stdlib_loads(f'[{{"v": {text}}}]'.encode())[0]["v"]
    except JsonRangeError as e:
        assert kind == "CodecIOError" and str(e).endswith(str(want)), e
    else:
        # the parser keeps 2**63..2**64-1 as exact ints (uint64's range): the reader's
        # int64 field refuses them, by name (the SchemaError above)
        assert kind != "CodecIOError"
        assert parsed == (int(text) if kind == "SchemaError" else want)
