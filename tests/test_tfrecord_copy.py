"""TFRecord -> TFRecord: records already in the form dstore writes are copied, not re-encoded.

The reader decodes a record in canonical form (``decode_canonical``) in one
walk and hands the serialized Example to the writer, which frames it again
instead of encoding the values; any other record is decoded and encoded as
before. The output bytes are the same either way, which these tests pin.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dstore
from dstore.codecs.example import encoder as encoder_mod
from dstore.codecs.example.canonical import decode_canonical, is_canonical_example
from dstore.codecs.example.signature import scan_example, signature_of
from dstore.codecs.example.wire import (
    BYTES,
    FLOAT,
    INT64,
    _len_field,
    decode_example,
    encode_example,
    encode_feature,
)
from dstore.codecs.tfrecord import io as rio

CLASSES = [b"cat", b"dog", b"bird"]


def _records(path: str) -> list[bytes]:
    out = []
    with rio.RecordFile(path) as rf:
        while (rec := rf.next_record()) is not None:
            out.append(rec)
    return out


def _only_shard(folder: str) -> str:
    """The one shard of a small dstore TFRecord output."""
    (shard,) = [f for f in os.listdir(folder) if f.endswith(".tfrecord")]
    return os.path.join(folder, shard)


def _od_example(rng: np.random.Generator, i: int) -> dict[str, bytes]:
    k = int(rng.integers(0, 6))
    box = np.sort(rng.random((2, k)), axis=0).astype(np.float32)
    cls = rng.integers(0, len(CLASSES), k)
    return {
        "image/encoded": encode_feature(BYTES, b"\xff\xd8\xff\xe0" + rng.bytes(40 + i)),
        "image/filename": encode_feature(BYTES, b"tile_%d.jpg" % i),
        "image/height": encode_feature(INT64, np.array([256 + i])),
        "image/object/bbox/xmin": encode_feature(FLOAT, box[0]),
        "image/object/bbox/xmax": encode_feature(FLOAT, box[1]),
        "image/object/class/label": encode_feature(INT64, cls - 2),  # negatives: 10-byte varints
        "image/object/class/text": encode_feature(BYTES, [CLASSES[c] for c in cls]),
    }


def _write(path: str, examples: list[bytes]) -> None:
    with open(path, "wb") as f:
        f.writelines(rio.frame(ex) for ex in examples)


def _dir_bytes(path: str) -> dict[str, bytes]:
    """Every file under ``path`` (record indexes in .dstore-index/ too), by relative name."""
    out = {}
    for root, _, names in sorted(os.walk(path)):
        for name in sorted(names):
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), path)] = f.read()
    return out


def _features(ex: bytes) -> list[tuple[bytes, int]]:
    return [(name.encode(), kind) for name, (kind, _, _) in scan_example(ex).items()]


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name][0] == b[name][0]
        if a[name][0] == BYTES:
            assert [bytes(v) for v in a[name][1]] == [bytes(v) for v in b[name][1]]
        else:
            assert a[name][1].dtype == b[name][1].dtype
            assert a[name][1].tobytes() == b[name][1].tobytes()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=30),
    st.lists(st.floats(width=32, allow_nan=True), max_size=10),
    st.lists(st.binary(max_size=200), max_size=5),
)
def test_canonical_decode_matches_decode_example(ints, floats, strings):
    ex = encode_example(
        {
            "i": encode_feature(INT64, np.array(ints, np.int64)),
            "f": encode_feature(FLOAT, np.array(floats, np.float32)),
            "s": encode_feature(BYTES, strings),
        }
    )
    got = decode_canonical(ex, _features(ex))
    assert got is not None
    _same(got, decode_example(ex))
    assert signature_of(got) == scan_example(ex)


def _feature_raw(kind: int, inner: bytes) -> bytes:
    return _len_field(0x08 * kind + 2, inner)


@pytest.mark.parametrize(
    "why,feature",
    [
        ("unpacked float", _feature_raw(FLOAT, b"\x0d" + np.float32(1.5).tobytes())),
        ("unpacked int64", _feature_raw(INT64, b"\x08\x05")),
        ("non-minimal varint", _feature_raw(INT64, _len_field(0x0A, b"\x85\x00"))),
        ("over-long negative", _feature_raw(INT64, _len_field(0x0A, b"\xff" * 9 + b"\x7f"))),
        ("two packed runs", _feature_raw(INT64, _len_field(0x0A, b"\x01") * 2)),
        ("empty packed run", _feature_raw(INT64, _len_field(0x0A, b""))),
        ("non-minimal length", bytes((0x1A, 0x83, 0x00)) + _len_field(0x0A, b"\x01")),
        ("two lists", encode_feature(INT64, np.array([1])) + encode_feature(INT64, np.array([2]))),
    ],
)
def test_non_canonical_records_are_decoded_the_general_way(why, feature):
    ex = encode_example({"a": encode_feature(BYTES, b"x"), "n": feature})
    canon = [(b"a", BYTES), (b"n", INT64 if "float" not in why else FLOAT)]
    assert decode_canonical(ex, canon) is None, why
    assert not is_canonical_example(ex, canon)
    decode_example(ex)  # still a valid Example


def test_entry_order_and_feature_order_matter():
    a, n = encode_feature(BYTES, b"x"), encode_feature(INT64, np.array([7]))
    ex = encode_example({"a": a, "n": n})
    assert is_canonical_example(ex, [(b"a", BYTES), (b"n", INT64)])
    assert not is_canonical_example(ex, [(b"n", INT64), (b"a", BYTES)])
    assert not is_canonical_example(ex, [(b"a", BYTES)])  # a feature more than expected
    assert not is_canonical_example(ex, [(b"a", BYTES), (b"n", INT64), (b"z", INT64)])
    # a map entry with its value before its key: valid protobuf, not dstore's form
    swapped = _len_field(0x12, a) + _len_field(0x0A, b"a")
    entry = _len_field(0x0A, swapped) + _len_field(
        0x0A, _len_field(0x0A, b"n") + _len_field(0x12, n)
    )
    ex2 = _len_field(0x0A, entry)
    assert decode_example(ex2).keys() == {"a", "n"}
    assert not is_canonical_example(ex2, [(b"a", BYTES), (b"n", INT64)])


def test_pass_through_copies_every_record_byte_for_byte(tmp_path):
    rng = np.random.default_rng(0)
    examples = [encode_example(_od_example(rng, i)) for i in range(60)]
    src = str(tmp_path / "od.tfrecord")
    _write(src, examples)
    out = str(tmp_path / "out.tfrecords")
    dstore.convert(src, out)
    assert _records(_only_shard(out)) == examples
    assert dstore.verify(src, out).ok

    # the same bytes as encoding every record (the copy disabled)
    slow = str(tmp_path / "slow.tfrecords")
    original = encoder_mod.batch_signature
    try:
        encoder_mod.batch_signature = lambda *a: None  # type: ignore[assignment]
        dstore.convert(src, slow)
    finally:
        encoder_mod.batch_signature = original
    assert _dir_bytes(out) == _dir_bytes(slow)


def test_records_not_in_canonical_form_are_re_encoded(tmp_path):
    rng = np.random.default_rng(1)
    feats = [_od_example(rng, i) for i in range(20)]
    examples = [encode_example(f) for f in feats]
    # record 5: its height as an unpacked int64 (valid, not dstore's form)
    odd = dict(feats[5], **{"image/height": _feature_raw(INT64, b"\x08\x05")})
    examples[5] = encode_example(odd)
    # record 9: its features in another order
    examples[9] = encode_example(dict(reversed(list(feats[9].items()))))
    src = str(tmp_path / "mixed.tfrecord")
    _write(src, examples)
    out = str(tmp_path / "out.tfrecords")
    dstore.convert(src, out)
    got = _records(_only_shard(out))
    for i, (a, b) in enumerate(zip(got, examples, strict=True)):
        if i in (5, 9):
            assert a != b  # re-encoded, in dstore's form
            assert is_canonical_example(a, _features(examples[0]))
            _same(decode_example(a), decode_example(b))
        else:
            assert a == b
    assert dstore.verify(src, out).ok


def test_a_dtype_policy_or_a_rename_takes_the_encoding_path(tmp_path):
    rng = np.random.default_rng(2)
    examples = [encode_example(_od_example(rng, i)) for i in range(10)]
    src = str(tmp_path / "od.tfrecord")
    _write(src, examples)
    renamed = str(tmp_path / "renamed.tfrecords")
    dstore.convert(src, renamed, options={"rename": "image/filename=image/name"})
    got = _records(_only_shard(renamed))
    assert all(b"image/name" in r and b"image/filename" not in r for r in got)
    halves = str(tmp_path / "f16.tfrecords")
    dstore.convert(src, halves, dtype="float16")
    assert _records(_only_shard(halves)) != examples


def test_tensorflow_reads_the_copied_records(tmp_path):
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(3)
    src = str(tmp_path / "od.tfrecord")
    with tf.io.TFRecordWriter(src) as w:
        for _ in range(30):
            k = int(rng.integers(0, 5))
            feats = {
                "image/encoded": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[b"\xff\xd8\xff" + rng.bytes(30)])
                ),
                "image/object/bbox/xmin": tf.train.Feature(
                    float_list=tf.train.FloatList(value=rng.random(k).astype(np.float32))
                ),
                "image/object/class/label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=rng.integers(-3, 300, k))
                ),
                "image/object/class/text": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[CLASSES[j % 3] for j in range(k)])
                ),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    out = str(tmp_path / "out.tfrecords")
    dstore.convert(src, out)
    shard = _only_shard(out)
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/class/label": tf.io.VarLenFeature(tf.int64),
        "image/object/class/text": tf.io.VarLenFeature(tf.string),
    }

    def parsed(path: str) -> list[dict]:
        rows = []
        for r in tf.data.TFRecordDataset(path):
            ex = tf.io.parse_single_example(r, spec)
            rows.append(
                {
                    k: np.atleast_1d(
                        v.values.numpy() if isinstance(v, tf.SparseTensor) else v.numpy()
                    ).tolist()
                    for k, v in ex.items()
                }
            )
        return rows

    assert parsed(shard) == parsed(src)
    assert _records(shard) == _records(src)
    assert dstore.verify(src, out).ok
