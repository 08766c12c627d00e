"""Dtype policies: identity, per-field casts, overflow refused or clipped, error reported."""

from __future__ import annotations

import numpy as np
import pytest

from dstore.engine.dtypes import DtypePolicy, parse_policy
from dstore.errors import DtypePolicyError
from dstore.model.schema import FieldSpec, SplitSpec


def _split(**arrays):
    return SplitSpec(
        "train", 5, {k: FieldSpec.tensor(k, v.dtype, v.shape[1:]) for k, v in arrays.items()}
    )


def test_keep_is_identity():
    batch = {"x": np.arange(5.0)}
    assert DtypePolicy().apply(_split(**batch), batch, 0, {}) is batch


def test_only_floats_change_and_per_field():
    batch = {
        "f": np.linspace(0, 1, 5),
        "g": np.array([0.1, 1 / 3, 0.7, 2.2, 9.9]),
        "i": np.arange(5),
        "c": np.ones(5, np.complex128),
    }
    policy = parse_policy(["float32", "g=float16"])
    out = policy.apply(_split(**batch), batch, 0, stats := {})
    assert out["f"].dtype == np.float32 and out["g"].dtype == np.float16
    assert out["i"].dtype == batch["i"].dtype and out["c"].dtype == np.complex128
    assert stats["g"].max_abs_error > 0
    assert 0 < stats["g"].max_rel_error <= 0.5 * np.finfo(np.float16).eps


def test_overflow_raises_with_field_count_and_record():
    x = np.array([1.0, 7e4, 2.0, -1e9, np.inf])
    with pytest.raises(DtypePolicyError) as e:
        parse_policy("float16").apply(_split(x=x), {"x": x}, 100, {}, "src.npz")
    msg = str(e.value)
    assert (
        "src.npz" in msg and "'x'" in msg and "2 value(s)" in msg and "first at record 101" in msg
    )


def test_overflow_clip():
    x = np.array([1.0, 7e4, -np.inf, np.nan, -1e9])
    out = parse_policy("float16", on_overflow="clip").apply(_split(x=x), {"x": x}, 0, stats := {})
    fmax = np.finfo(np.float16).max
    np.testing.assert_array_equal(
        out["x"], np.array([1.0, fmax, -np.inf, np.nan, -fmax], np.float16)
    )
    assert stats["x"].clipped == 2


def test_bad_policy_names():
    with pytest.raises(DtypePolicyError, match="float8"):
        parse_policy("float8")
    with pytest.raises(DtypePolicyError, match="on_overflow"):
        DtypePolicy(on_overflow="wrap")
