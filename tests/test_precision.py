"""Lossy feature precision (--dtype bfloat16, round:N, int8/uint8[:channel]) in every format.

Each round trip is compared element by element with values computed here
independently (ml_dtypes' rounding, numcodecs' BitRound, the quantization
formula applied to the scale/offset the file declares), and each file is
opened by its own library (numpy, zarr, h5py, TensorFlow) to see the codes.
"""

from __future__ import annotations

import json
import os
import zipfile

import h5py
import ml_dtypes
import numpy as np
import pytest
import zarr
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numcodecs import BitRound

import dstore
from dstore.api import ArrayReader, check, open_reader
from dstore.cli import main
from dstore.codecs.npz import NpzCodec
from dstore.engine.dtypes import parse_policy
from dstore.errors import DtypePolicyError, UnsupportedDtypeError
from dstore.model.precision import bitround
from dstore.testing import usable_formats

#: name -> extension without its dot, from the registry
FORMATS = {name: ext.lstrip(".") for name, ext in usable_formats().items()}
BF16 = np.dtype(ml_dtypes.bfloat16)


def _data(features) -> dict[str, dict[str, np.ndarray]]:
    """Real photo features (colour histograms) plus a wide-range field with negatives."""
    x, y = features
    rng = np.random.default_rng(1)
    wide = (rng.standard_normal((len(x), 3, 4)) * np.array([1e-3, 1.0, 250.0, 3e4])).astype(
        np.float32
    )
    return {
        "train": {"x": x[:80], "w": wide[:80], "y": y[:80]},
        "test": {"x": x[80:], "w": wide[80:], "y": y[80:]},
    }


def _whole(data, name: str) -> np.ndarray:
    return np.concatenate([data[s][name] for s in data])


def _numcodecs_round(a: np.ndarray, keepbits: int) -> np.ndarray:
    return np.asarray(BitRound(keepbits).encode(a.astype(np.float32))).view(np.float32)


def _bits_equal(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


# --------------------------------------------------------------------- rounding itself


@pytest.mark.parametrize("keepbits", range(24))
def test_bitround_is_numcodecs_bitround(keepbits):
    rng = np.random.default_rng(keepbits)
    finfo = np.finfo(np.float32)
    a = np.concatenate(
        [
            rng.standard_normal(2000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 2000),
            np.array([0.0, -0.0, finfo.tiny, finfo.tiny / 3, finfo.max, -finfo.max, 1, -1.5]),
        ]
    ).astype(np.float32)
    _bits_equal(bitround(a, keepbits), _numcodecs_round(a, keepbits))


def _f32_ulp(v: float) -> float:
    """float32's spacing at ``v``, computed in float64 (np.spacing overflows at float32's max)."""
    return max(float(np.spacing(abs(v))) * 2.0**29, 2.0**-149)


@settings(max_examples=60, deadline=None)
@example([3.4028234663852886e38], "int8")  # found by hypothesis: np.spacing overflowed
@given(
    st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1, max_size=64),
    st.sampled_from(["int8", "uint8"]),
)
def test_quantization_error_is_half_a_step(values, codes):
    """Any finite values: codes in range, the error at most half a step (plus float32's)."""
    x = np.array(values, np.float32)
    reader = ArrayReader({"data": {"v": x}})
    split = reader.schema.splits["data"]
    try:
        policy = parse_policy(codes).prepare(reader, NpzCodec())
    except DtypePolicyError as e:  # only a range at float32's very limit is refused
        assert "dequantize to inf" in str(e) and np.abs(x).max() > 1e37
        return
    stats: dict = {}
    out = policy.apply(split, {"v": x}, 0, stats)["v"]
    assert out.dtype == np.dtype(codes)
    rec = policy.quant["v"]
    scale, offset = np.float32(rec["scale"][0]), np.float32(rec["offset"][0])
    back = out.astype(np.float32) * scale + offset
    err = np.abs(back.astype(np.float64) - x)
    bound = float(scale) / 2 * (1 + 1e-6) + 4 * _f32_ulp(float(np.abs(x).max()))
    bound += 4 * _f32_ulp(abs(float(offset)))
    assert err.max() <= bound
    assert stats["v"].max_abs_error == pytest.approx(err.max())


# --------------------------------------------------------------------- every format


POLICIES = ["bfloat16", "round:3", "round:10", "int8", "uint8", "int8:channel", "uint8:channel"]


def _expected(policy: str, x: np.ndarray, rec: dict | None) -> np.ndarray:
    """What dstore must read back, computed without dstore's code."""
    if policy == "bfloat16":
        return x.astype(BF16)
    if policy.startswith("round:"):
        return _numcodecs_round(x, int(policy.split(":")[1]))
    codes = np.dtype(policy.split(":")[0])
    info = np.iinfo(codes)
    axis_ch = policy.endswith(":channel")
    scale = np.asarray(rec["scale"], np.float32)
    offset = np.asarray(rec["offset"], np.float32)
    if not axis_ch:
        scale, offset = scale[0], offset[0]
    # the declared scale spans the field's range over every split onto the codes
    q = np.clip(np.rint((x.astype(np.float64) - offset) / scale), info.min, info.max)
    return q.astype(codes).astype(np.float32) * scale + offset


def _stored(fmt: str, path: str, split: str, name: str) -> tuple[np.ndarray, dict] | None:
    """The stored array and its precision record, read by the format's own library
    (None for a format this test has no native reader for: its own tests check that)."""
    if fmt == "npz":
        with zipfile.ZipFile(path) as z:
            # the zip comment: "dstore-schema:" + the schema as JSON
            schema = json.loads(z.comment.decode().partition(":")[2])
        with np.load(path) as f:
            arr = f[f"{name}_{split}"]
        return arr, schema["splits"][split]["fields"][name]["attrs"]["precision"]
    if fmt == "zarr":
        arr = zarr.open_group(path, mode="r")[split][name]
        return arr[...], dict(arr.attrs)
    if fmt == "hdf5":
        with h5py.File(path, "r") as f:
            return f[split][name][...], dict(f[split][name].attrs)
    if fmt != "tfrecord":
        return None
    import tensorflow as tf

    with open(os.path.join(path, "dstore.json")) as f:
        manifest = json.load(f)
    field = manifest["schema"]["splits"][split]["fields"][name]
    files = sorted(
        os.path.join(path, n)
        for n in os.listdir(path)
        if n.startswith(f"{split}-") and n.endswith(".tfrecord")  # not the .idx beside each
    )
    shape = field["shape"]
    kind = tf.int64 if field["dtype"] in ("|i1", "|u1") else tf.float32
    desc = {name: tf.io.FixedLenFeature(shape, kind)}
    rows = [
        tf.io.parse_single_example(r, desc)[name].numpy() for r in tf.data.TFRecordDataset(files)
    ]
    return np.stack(rows), field["attrs"]["precision"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_round_trip_every_format(tmp_path, features, fmt, policy):
    data = _data(features)
    src = str(tmp_path / "src.npz")
    dstore.save(data, src)
    out = str(tmp_path / f"out.{FORMATS[fmt]}")
    report = dstore.convert(src, out, dtype=f"x={policy},w={policy}")
    with dstore.open(out) as ds:
        for name in ("x", "w"):
            rec = ds["train"][name].spec.attrs["precision"]
            assert rec["policy"] == policy
            # one scale/offset for the field over all splits: train and test agree
            assert ds["test"][name].spec.attrs["precision"] == rec
            for split in data:
                x = data[split][name]
                want = _expected(policy, x, rec)
                got = np.asarray(ds[split][name])
                _bits_equal(got, want)
                _bits_equal(ds[split][name][2], want[2])  # one record decodes alike
            whole = _whole(data, name).astype(np.float64)
            err = np.abs(np.concatenate([np.asarray(ds[s][name]) for s in data]) - whole)
            assert report.cast[name].max_abs_error == pytest.approx(float(err.max()))
            assert report.cast[name].mean_abs_error == pytest.approx(float(err.mean()))
        _bits_equal(np.asarray(ds["train"]["y"]), data["train"]["y"])  # ints untouched
    native = _stored(fmt, out, "train", "x")
    if native is None:
        return
    stored, attrs = native
    x = data["train"]["x"]
    if policy == "bfloat16":
        # bits as uint16 (no library here has bfloat16); TFRecord: float32, exact
        want_stored = x.astype(BF16)
        if fmt == "tfrecord":
            _bits_equal(stored, want_stored.astype(np.float32))
        else:
            _bits_equal(stored, want_stored.view(np.uint16))
    elif policy.startswith("round:"):
        _bits_equal(stored, _expected(policy, x, None))
    else:
        codes = np.dtype(policy.split(":")[0])
        if fmt == "tfrecord":
            assert stored.min() >= np.iinfo(codes).min and stored.max() <= np.iinfo(codes).max
            stored = stored.astype(codes)
        assert stored.dtype == codes
        if fmt in ("zarr", "hdf5"):  # CF attributes beside the codes (xarray decodes them)
            scale, offset = np.asarray(attrs["scale_factor"]), np.asarray(attrs["add_offset"])
        else:
            scale = np.asarray(attrs["scale"], np.float32)
            offset = np.asarray(attrs["offset"], np.float32)
            if not policy.endswith(":channel"):
                scale, offset = scale[0], offset[0]
        got = stored.astype(np.float32) * scale.astype(np.float32) + offset.astype(np.float32)
        _bits_equal(
            got,
            _expected(policy, x, {"scale": np.atleast_1d(scale), "offset": np.atleast_1d(offset)}),
        )
    assert check(out).ok  # checksums are of the stored codes


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_per_channel_scales_follow_each_channel(tmp_path, fmt):
    """Channels of very different ranges: one scale each, so the small one keeps detail."""
    x = np.stack([np.linspace(0, 1, 50), np.linspace(-1e4, 1e4, 50)], axis=1).astype(np.float32)
    out = str(tmp_path / f"c.{FORMATS[fmt]}")
    dstore.save({"data": {"x": x}}, out, dtype="int8:channel")
    with dstore.open(out) as ds:
        rec = ds["data"]["x"].spec.attrs["precision"]
        got = np.asarray(ds["data"]["x"])
    assert rec["axis"] == -1 and len(rec["scale"]) == 2
    # both ranges hold 0: one code of slack for an exact zero point
    np.testing.assert_allclose(rec["scale"], [1 / 254, 2e4 / 254], rtol=1e-6)
    assert np.abs(got[:, 0] - x[:, 0]).max() <= 0.5 / 254 + 1e-7
    assert got[0, 0] == 0.0


@pytest.mark.parametrize("policy", ["int8", "uint8", "int8:channel", "uint8:channel"])
def test_zeros_stay_exactly_zero(tmp_path, policy):
    """ReLU-like features (mostly 0): zeros read back as 0.0, whatever the range around them."""
    rng = np.random.default_rng(3)
    x = np.maximum(rng.standard_normal((200, 8)) * rng.uniform(0.01, 50, 8), -0.3)
    x = x.astype(np.float32)
    x[rng.random(x.shape) < 0.6] = 0.0
    out = str(tmp_path / "z.npz")
    dstore.save({"data": {"x": x}}, out, dtype=policy)
    with dstore.open(out) as ds:
        got = np.asarray(ds["data"]["x"])
        step = max(ds["data"]["x"].spec.attrs["precision"]["scale"])
    assert (got[x == 0] == 0).all()
    assert np.abs(got.astype(np.float64) - x).max() <= step / 2 * (1 + 1e-6)


def test_ragged_float_field_int8_and_round(tmp_path):
    values = [np.arange(n * 2, dtype=np.float32).reshape(n, 2) / 7 - 1 for n in (3, 0, 5, 1)]
    for fmt in FORMATS:
        for policy in ("int8", "round:4", "bfloat16"):
            out = str(tmp_path / f"r{policy.replace(':', '')}.{FORMATS[fmt]}")
            dstore.save({"data": {"b": values}}, out, dtype=policy)
            with dstore.open(out) as ds:
                rec = ds["data"]["b"].spec.attrs["precision"]
                for i, v in enumerate(values):
                    got = ds["data"]["b"][i]
                    _bits_equal(got, _expected(policy, v, rec))


def test_bfloat16_source_stays_bfloat16(tmp_path):
    """A bfloat16 array saved with keep, then converted on with keep: still bfloat16."""
    x = np.linspace(-3, 3, 40, dtype=np.float32).reshape(10, 4).astype(BF16)
    first = str(tmp_path / "a.zarr")
    dstore.save({"data": {"x": x}}, first)
    second = str(tmp_path / "b.h5")
    dstore.convert(first, second)
    with dstore.open(second) as ds:
        _bits_equal(np.asarray(ds["data"]["x"]), x)
    assert dstore.verify(first, second).ok


def test_converting_a_quantized_file_on_gives_its_floats(tmp_path, features):
    data = _data(features)
    q = str(tmp_path / "q.zarr")
    dstore.save(data, q, dtype="x=int8")
    plain = str(tmp_path / "plain.h5")
    dstore.convert(q, plain)
    with dstore.open(q) as a, dstore.open(plain) as b:
        _bits_equal(np.asarray(b["train"]["x"]), np.asarray(a["train"]["x"]))
        spec = b["train"]["x"].spec
        # float32 now: neither the int8 record nor the CF attributes may stay behind
        assert "precision" not in spec.attrs and "scale_factor" not in spec.attrs.get("user", {})
    with h5py.File(plain) as f:
        assert f["train/x"].dtype == np.float32 and "scale_factor" not in f["train/x"].attrs


# --------------------------------------------------------------------- verify


def test_verify_reports_error_against_declared_tolerance(tmp_path, features, capsys):
    data = _data(features)
    src = str(tmp_path / "src.npz")
    dstore.save(data, src)
    for policy in ("int8", "round:6", "bfloat16", "uint8:channel"):
        out = str(tmp_path / f"o{policy.replace(':', '')}.zarr")
        dstore.convert(src, out, dtype=policy)
        assert main(["verify", src, out]) == 0
        text = capsys.readouterr().out
        assert f"within the declared {policy}" in text and "max abs error" in text
        assert "all equal (lossy fields within their declared error)" in text
    # values moved by more than the tolerance: reported with the error, exit 1
    moved = {s: {**d, "x": d["x"] + np.float32(0.05)} for s, d in data.items()}
    src2 = str(tmp_path / "moved.npz")
    dstore.save(moved, src2)
    assert main(["verify", src2, str(tmp_path / "oint8.zarr")]) == 1
    text = capsys.readouterr().out
    assert "MISMATCH  train/x: error exceeds the declared int8" in text


# --------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "spec, words",
    [
        ("round:40", "0..23"),
        ("round:-1", "0..23"),
        ("round:", "0..23"),
        ("int9", "is not one of"),
        ("int8:row", "is not one of"),
        ("y=int8", "'y' is int64"),
        ("y=round:8", "applies to floating fields"),
        ("y=bfloat16", "applies to floating fields"),
        ("y=int8:channel", "applies to floating fields"),
        ("nosuch=int8", "which no split has"),
    ],
)
def test_bad_specs_one_line_exit_2_nothing_written(tmp_path, capsys, features, spec, words):
    src = str(tmp_path / "src.npz")
    dstore.save(_data(features), src)
    before = sorted(os.listdir(tmp_path))
    assert main(["convert", src, str(tmp_path / "out.zarr"), "--dtype", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert sorted(os.listdir(tmp_path)) == before


def test_nan_has_no_int8_code(tmp_path, capsys):
    x = np.ones((20, 3), np.float32)
    x[13, 1] = np.nan
    src = str(tmp_path / "n.npz")
    np.savez(src, x=x)
    assert main(["convert", src, str(tmp_path / "o.h5"), "--dtype", "int8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "field 'x'" in err and "first at record 13" in err and len(err.splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["n.npz"]


def test_per_channel_needs_channels(tmp_path, capsys):
    src = str(tmp_path / "s.npz")
    np.savez(src, x=np.arange(5, dtype=np.float32))
    assert main(["convert", src, str(tmp_path / "o.npz"), "--dtype", "int8:channel"]) == 2
    assert "needs a last axis of channels" in capsys.readouterr().err


@pytest.mark.parametrize("policy, limit", [("bfloat16", "3.38953e+38"), ("round:0", "1.70141e+38")])
def test_overflow_rules_stay(tmp_path, capsys, policy, limit):
    big = np.finfo(np.float32).max
    x = np.array([[1.0], [big], [-big]], np.float32)
    src = str(tmp_path / "b.npz")
    np.savez(src, x=x)
    out = str(tmp_path / "o.npz")
    assert main(["convert", src, out, "--dtype", policy]) == 2
    err = capsys.readouterr().err
    assert "2 value(s) overflow" in err and "first at record 1" in err and limit in err
    assert not os.path.exists(out)
    assert main(["convert", src, out, "--dtype", policy, "--on-overflow", "clip"]) == 0
    with dstore.open(out) as ds:
        got = np.asarray(ds["data"]["x"]).astype(np.float64)
    assert np.isfinite(got).all() and got[1, 0] == -got[2, 0] == pytest.approx(float(limit), 1e-2)


def test_format_without_bfloat16_refuses_by_name(tmp_path):
    """A codec that does not declare a bfloat16 storage (third-party ones by default)."""

    class PlainNpz(NpzCodec):
        name = "plainnpz"
        bfloat16_as = None

    src = str(tmp_path / "s.npz")
    np.savez(src, x=np.ones((4, 2), np.float32))
    with open_reader(src) as reader, pytest.raises(UnsupportedDtypeError) as e:
        parse_policy("bfloat16").prepare(reader, PlainNpz())
    assert "plainnpz: field 'x': this format cannot carry bfloat16" in str(e.value)


@pytest.mark.tf
@pytest.mark.parametrize("policy", ["int8", "uint8:channel", "bfloat16", "round:5"])
def test_to_tf_dataset_gives_the_values_dstore_reads(tmp_path, features, policy):
    """TFRecord read by TensorFlow itself: int8 codes are dequantized in the tf.data map."""
    import tensorflow as tf

    data = _data(features)
    out = str(tmp_path / "q.tfrecords")
    dstore.save(data, out, dtype=f"x={policy},w={policy}")
    with dstore.open(out) as ds:
        want = {n: np.asarray(ds["test"][n]) for n in ("x", "w")}
    got = next(iter(dstore.to_tf_dataset(out, split="test", batch_size=1000, ordered=True)))
    for name in ("x", "w"):
        value = got[name].numpy()
        if policy == "bfloat16":
            assert got[name].dtype == tf.bfloat16
        _bits_equal(value.astype(want[name].dtype), want[name])


@pytest.mark.tf
@pytest.mark.parametrize("policy", ["int8", "uint8:channel"])
def test_info_tensorflow_snippet_dequantizes(tmp_path, features, policy):
    """The snippet `dstore info` prints, pasted as is, gives the floats dstore reads."""
    import tensorflow as tf

    from dstore.codecs.tfrecord import TFRecordReader

    data = _data(features)
    out = str(tmp_path / "s.tfrecords")
    dstore.save(data, out, dtype=f"x={policy}")
    lines = TFRecordReader(out).feature_description("train")
    namespace = {"tf": tf}
    exec("\n".join(lines), namespace)  # noqa: S102 - our own snippet, as a user pastes it
    with dstore.open(out) as ds:
        want = np.asarray(ds["train"]["x"])
    got = np.stack([r["x"].numpy() for r in namespace["dataset"]])
    _bits_equal(got, want)


def test_clipped_big_endian_cast_keeps_its_byte_order(tmp_path):
    x = np.array([[1.0], [1e6], [-1e6]], ">f4")
    src = str(tmp_path / "be.npz")
    np.savez(src, x=x)
    out = str(tmp_path / "o.h5")
    dstore.convert(src, out, dtype="float16", on_overflow="clip")
    with h5py.File(out) as f:
        assert f["data/x"].dtype == np.dtype(">f2")
        np.testing.assert_array_equal(f["data/x"][:, 0], [1.0, 65504.0, -65504.0])
