"""The field-kind model: kinds round-trip through JSON, columns behave like lists of records."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dstore.errors import SchemaError, UnsupportedDtypeError
from dstore.model import (
    Bytes,
    Image,
    Ragged,
    String,
    Tensor,
    VarColumn,
    concat_columns,
    empty_column,
    infer_column,
    kind_from_json,
    record,
    to_column,
)

KINDS = [
    Tensor(np.dtype("uint8"), (256, 256, 3)),
    Tensor(np.dtype(">f8"), ()),
    Tensor(np.dtype("complex64"), (2, 0)),
    String(),
    Bytes(),
    Ragged(np.dtype("float32"), (4,)),
    Ragged(np.dtype("int64"), ()),
    Image(),
    Image(np.dtype("uint16"), 1, 64, 32, "png"),
    Image(np.dtype("uint8"), None, None, None, "jpeg"),
    Image(np.dtype("uint8"), 0, 28, 28, "raw"),
]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.describe())
def test_kind_json_roundtrip(kind: object) -> None:
    data = kind.to_json()  # type: ignore[attr-defined]
    assert kind_from_json(json.loads(json.dumps(data))) == kind


def test_entries_without_kind_are_tensors() -> None:
    """Schemas written before kinds existed keep reading."""
    assert kind_from_json({"dtype": "|u1", "shape": [3]}) == Tensor(np.dtype("uint8"), (3,))


@pytest.mark.parametrize(
    "entry",
    [
        {"kind": "nope"},
        {"kind": "tensor"},
        {"kind": "ragged", "dtype": "|O"},
        {"kind": "image", "encoding": "xyz"},
        {"kind": "image", "dtype": "<f4"},
        {"kind": "tensor", "dtype": "<f4", "shape": [-1]},
        [1, 2],
    ],
)
def test_bad_schema_entries_are_schema_errors(entry: object) -> None:
    with pytest.raises(SchemaError):
        kind_from_json(entry, "split 'train', field 'x'")  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", ["longdouble", "clongdouble", "O", "U3", [("a", "i4")]])
def test_unportable_dtypes_refused(dtype: object) -> None:
    if (
        np.dtype(dtype).itemsize <= 8 and np.dtype(dtype).kind == "f"
    ):  # platforms where longdouble is double
        pytest.skip("longdouble is float64 here")
    with pytest.raises(UnsupportedDtypeError):
        Tensor(np.dtype(dtype), ())


ragged_rows = st.lists(
    st.integers(0, 5).flatmap(
        lambda n: st.lists(st.floats(allow_nan=False, width=32), min_size=2 * n, max_size=2 * n)
    ),
    max_size=12,
)


@given(ragged_rows, st.data())
@settings(max_examples=60, deadline=None)
def test_var_column_behaves_like_a_list(rows: list[list[float]], data: st.DataObject) -> None:
    arrays = [np.array(r, np.float32).reshape(-1, 2) for r in rows]
    col = VarColumn.from_rows(arrays, np.float32, (2,))
    col.check("f")
    assert len(col) == len(arrays)
    for i, a in enumerate(arrays):
        np.testing.assert_array_equal(col.row(i), a)
    n = len(arrays)
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    part = col.slice(start, stop)
    part.check("slice")
    assert [p.tolist() for p in (part.row(i) for i in range(len(part)))] == [
        a.tolist() for a in arrays[start:stop]
    ]
    picks = data.draw(st.lists(st.integers(0, max(0, n - 1)), max_size=8)) if n else []
    taken = col.take(picks)
    taken.check("take")
    assert [taken.row(i).tolist() for i in range(len(taken))] == [arrays[i].tolist() for i in picks]
    cut = data.draw(st.integers(0, n))
    joined = VarColumn.concat([col.slice(0, cut), col.slice(cut, n)])
    assert np.array_equal(joined.offsets, col.offsets) and np.array_equal(joined.values, col.values)


@given(st.lists(st.text(max_size=8), max_size=10))
@settings(max_examples=60, deadline=None)
def test_string_columns_roundtrip(texts: list[str]) -> None:
    col = to_column(String(), texts, "names")
    assert isinstance(col, VarColumn)
    col.check_utf8("names")
    assert col.to_str_list() == texts
    assert [record(String(), col, i) for i in range(len(col))] == texts


def test_invalid_utf8_names_the_record() -> None:
    bad = VarColumn.from_bytes([b"ok", b"\xff\xfe", b"fine"])
    with pytest.raises(SchemaError, match="record 1"):
        bad.check_utf8("split 'train', field 'names'")
    # a two-byte character cut between records 0 and 1: record 0 is the broken one
    split_char = VarColumn.from_bytes(["é".encode()[:1], "é".encode()[1:]])
    with pytest.raises(SchemaError, match="record 0"):
        split_char.check_utf8("names")


@pytest.mark.parametrize(
    ("offsets", "message"), [([0, 3, 2, 4], "decrease"), ([0, 2, 5], "end at 5"), ([[0, 1]], "1-d")]
)
def test_offsets_that_do_not_match_the_values(offsets: list[int], message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        VarColumn(np.arange(4), np.array(offsets)).check("field 'boxes'")


def test_infer_kinds() -> None:
    assert infer_column(np.zeros((3, 4), np.float16), "x")[0] == Tensor(np.dtype("float16"), (4,))
    kind, col = infer_column(np.array(["a", "bé", ""]), "names")
    assert kind == String() and col.to_str_list() == ["a", "bé", ""]  # type: ignore[union-attr]
    kind, col = infer_column(np.array([b"x\x00y", b""]), "blobs")
    assert kind == Bytes() and col.to_bytes_list() == [b"x\x00y", b""]  # type: ignore[union-attr]
    kind, col = infer_column([np.zeros((2, 4)), np.ones((0, 4)), np.ones((1, 4))], "boxes")
    assert kind == Ragged(np.dtype("float64"), (4,)) and isinstance(col, VarColumn)
    assert col.lengths.tolist() == [2, 0, 1]
    kind, col = infer_column([[1, 2], [3, 4]], "same")
    assert kind == Tensor(np.dtype("int64"), (2,)) and np.asarray(col).shape == (2, 2)


@pytest.mark.parametrize(
    "bad", [[np.zeros((2, 3)), np.zeros((2, 4))], ["a", 1], [np.array(["x"], dtype=object)], 5, []]
)
def test_infer_refuses_what_has_no_kind(bad: object) -> None:
    with pytest.raises(SchemaError):
        infer_column(bad, "split 'train', field 'f'")


def test_variable_size_raw_images_keep_their_shapes() -> None:
    kind = Image(channels=3)
    imgs = [np.full((4, 5, 3), 1, np.uint8), np.full((2, 7, 3), 2, np.uint8)]
    col = to_column(kind, imgs, "img")
    assert isinstance(col, VarColumn)
    col.check("img")
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(record(kind, col, i), img)
    both = concat_columns(kind, [col, col])
    assert isinstance(both, VarColumn) and len(both) == 4
    np.testing.assert_array_equal(record(kind, both, 3), imgs[1])


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.describe())
def test_empty_columns(kind: object) -> None:
    col = empty_column(kind)  # type: ignore[arg-type]
    assert len(col) == 0
    if isinstance(col, VarColumn):
        col.check("empty")
