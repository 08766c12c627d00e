"""TensorProto bytes written by real TensorFlow (``tf.io.serialize_tensor``) decode by hand."""

from __future__ import annotations

import numpy as np
import pytest

from dstore.codecs.example.tensorproto import (
    StringTensor,
    looks_like_tensor_proto,
    parse_tensor_proto,
)
from dstore.errors import CodecIOError

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tf

DTYPES = ["float32", "float64", "int32", "uint8", "int16", "int8", "complex64", "int64", "bool",
          "uint16", "complex128", "float16", "uint32", "uint64"]  # fmt: skip
SHAPES = [(), (0,), (3,), (2, 3, 4), (1, 0, 2)]


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(len(shape))
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("complex"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_serialize_tensor_roundtrip(dtype: str, shape: tuple[int, ...]) -> None:
    value = _values(dtype, shape)
    data = tf.io.serialize_tensor(tf.constant(value)).numpy()
    got = parse_tensor_proto(data, "rec")
    assert isinstance(got, np.ndarray)
    assert got.dtype == np.dtype(dtype) and got.shape == shape
    assert got.tobytes() == np.ascontiguousarray(value).tobytes()


def test_label_maker_image_tensor() -> None:
    """label-maker writes tiles with serialize_tensor: uint8 (256, 256, 3)."""
    from dstore.demo import photo_tiles

    tiles, _ = photo_tiles(2, 256)
    for tile in tiles:
        got = parse_tensor_proto(tf.io.serialize_tensor(tile).numpy(), "rec")
        np.testing.assert_array_equal(got, tile)
        assert looks_like_tensor_proto(tf.io.serialize_tensor(tile).numpy())
    assert not looks_like_tensor_proto(b"\x89PNG\r\n\x1a\n")


def test_string_tensors() -> None:
    value = np.array([[b"a", b""], [b"\x00\xff", "é".encode()]], dtype=object)
    got = parse_tensor_proto(tf.io.serialize_tensor(tf.constant(value)).numpy(), "rec")
    assert isinstance(got, StringTensor)
    assert got.shape == (2, 2) and got.values == [b"a", b"", b"\x00\xff", "é".encode()]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool", "float16", "complex64",
                                   "uint32", "uint64", "int8", "uint16"])  # fmt: skip
def test_typed_value_fields_and_repetition(dtype: str) -> None:
    """make_tensor_proto of a scalar broadcast to a shape stores one typed value."""
    one = _values(dtype, (1,))[0]
    proto = tf.make_tensor_proto(one, shape=[2, 3], dtype=tf.as_dtype(dtype))
    got = parse_tensor_proto(proto.SerializeToString(), "rec")
    np.testing.assert_array_equal(got, tf.make_ndarray(proto))
    assert got.dtype == np.dtype(dtype)


@pytest.mark.parametrize(
    "data",
    [b"\x08\x0e\x12\x04\x12\x02\x08\x01\x22\x02\x00\x00",  # bfloat16
     b"\x08\x01\x12\x04\x12\x02\x08\x03\x22\x04\x00\x00\x80\x3f",  # 3 floats in 4 bytes
     b"\x08\x01\x12\x0b\x12\x09\x08\xff\xff\xff\xff\xff\xff\xff\xff\x7f",  # huge dimension
     b"\x08\x01\x12\x03",  # truncated
     b"\x08\x63"],  # unknown dtype
)  # fmt: skip
def test_damaged_or_unsupported_tensors_are_one_clear_error(data: bytes) -> None:
    with pytest.raises(CodecIOError, match=r"^f.tfrecord: record 3: "):
        parse_tensor_proto(data, "f.tfrecord: record 3")
