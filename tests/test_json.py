"""The JSON / JSON Lines codec on files written by the standard library's json module.

The shared suite (tests/test_roundtrip.py) covers dstore -> JSON -> dstore for every
dtype and kind; here: the generic reading rule on foreign documents, what a foreign
reader sees in dstore's output, and bad input.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dstore
from dstore.errors import CodecIOError, SchemaError
from dstore.model import Ragged, String, Tensor
from dstore.testing import cli_command


def pyspacer_doc(n: int, dim: int = 1280, seed: int = 0) -> dict[str, Any]:
    """pyspacer's feature file: per-point row, col and a feature vector."""
    rng = np.random.default_rng(seed)
    return {
        "point_features": [
            {"row": int(r), "col": int(c), "data": rng.standard_normal(dim).tolist()}
            for r, c in rng.integers(0, 4000, (n, 2))
        ],
        "valid_rowcol": True,
        "feature_dim": dim,
        "npoints": n,
    }


def write_json(path: Any, doc: Any) -> str:
    with open(path, "w") as f:
        json.dump(doc, f)
    return str(path)


def test_pyspacer_document(tmp_path: Any) -> None:
    doc = pyspacer_doc(30, 64)
    path = write_json(tmp_path / "img.json", doc)
    with dstore.open(path) as ds:
        assert list(ds) == ["data"]
        split = ds["data"]
        assert split.count == 30
        assert split["data"].kind == Tensor(np.dtype(np.float64), (64,))
        assert split["row"].kind == Tensor(np.dtype(np.int64), ())
        want = np.array([p["data"] for p in doc["point_features"]])
        np.testing.assert_array_equal(split["data"][:], want)
        np.testing.assert_array_equal(split["col"][:], [p["col"] for p in doc["point_features"]])
        root = ds.schema.attrs["dstore.attrs"]["root"]
        assert {k: v["json"] for k, v in root.items()} == {
            "valid_rowcol": True,
            "feature_dim": 64,
            "npoints": 30,
        }


def test_pyspacer_back_to_json_reads_as_the_original(tmp_path: Any) -> None:
    """JSON -> npz -> JSON: the stdlib reads the same members and values back."""
    doc = pyspacer_doc(7, 16, seed=3)
    src = write_json(tmp_path / "img.json", doc)
    dstore.convert(src, tmp_path / "f.npz")
    dstore.convert(tmp_path / "f.npz", tmp_path / "back.json")
    with open(tmp_path / "back.json") as f:
        back = json.load(f)
    schema = back.pop("dstore:schema")
    assert back == doc
    assert "splits" in schema


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 12),
    ints=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=12, max_size=12),
    floats=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=12, max_size=12),
    texts=st.lists(st.text(max_size=8), min_size=12, max_size=12),
    lengths=st.lists(st.integers(0, 5), min_size=12, max_size=12),
    width=st.integers(0, 4),
    lines=st.booleans(),
)
def test_generic_rule_many_documents(
    tmp_path: Any,
    n: int,
    ints: list[int],
    floats: list[float],
    texts: list[str],
    lengths: list[int],
    width: int,
    lines: bool,
) -> None:
    """Numbers, equal-length lists, varying lists and strings, each to its kind and values,
    from a JSON document or JSON Lines written by the standard library."""
    records = [
        {
            "i": ints[k],
            "f": floats[k],
            "s": texts[k],
            "vec": [float(k + j) for j in range(width)],
            "rag": list(range(lengths[k])),
        }
        for k in range(n)
    ]
    varying = len({len(r["rag"]) for r in records}) > 1
    path = tmp_path / f"doc-{n}.{'jsonl' if lines else 'json'}"
    with open(path, "w") as f:
        if lines:
            f.write("".join(json.dumps(r) + "\n" for r in records))
        else:
            json.dump({"name": "x", "items": records}, f)
    with dstore.open(path) as ds:
        split = ds["data"]
        assert split.count == n
        assert split["i"].kind == Tensor(np.dtype(np.int64), ())
        np.testing.assert_array_equal(split["i"][:], ints[:n])
        assert split["f"].kind == Tensor(np.dtype(np.float64), ())
        np.testing.assert_array_equal(split["f"][:], floats[:n])
        assert split["s"].kind == String()
        assert split["s"][:] == texts[:n]
        assert split["vec"].kind == Tensor(np.dtype(np.float64), (width,))
        want_rag = [np.arange(lengths[k]) for k in range(n)]
        if varying:
            assert split["rag"].kind == Ragged(np.dtype(np.int64), ())
            for got, want in zip(split["rag"][:], want_rag, strict=True):
                np.testing.assert_array_equal(got, want)
        else:
            assert isinstance(split["rag"].kind, Tensor)
            np.testing.assert_array_equal(split["rag"][:], np.array(want_rag).reshape(n, -1))
        if not lines:
            assert ds.schema.attrs["dstore.attrs"]["root"] == {"name": {"json": "x"}}


def test_several_lists_of_records_are_splits(tmp_path: Any) -> None:
    doc = {"train": [{"x": 1}, {"x": 2}], "test": [{"x": 3}], "version": 2}
    with dstore.open(write_json(tmp_path / "d.json", doc)) as ds:
        assert {s: ds[s].count for s in ds} == {"train": 2, "test": 1}
        np.testing.assert_array_equal(ds["test"]["x"][:], [3])


def test_top_level_list_and_nan_tokens(tmp_path: Any) -> None:
    """A bare list of records; NaN/Infinity as Python's json writes them."""
    doc = [{"v": float("nan")}, {"v": float("inf")}, {"v": -1.5}]
    with dstore.open(write_json(tmp_path / "d.json", doc)) as ds:
        got = ds["data"]["v"][:]
    assert np.isnan(got[0]) and got[1] == np.inf and got[2] == -1.5


def test_int_and_float_mix_is_float(tmp_path: Any) -> None:
    with dstore.open(write_json(tmp_path / "d.json", [{"v": 1}, {"v": 2.5}])) as ds:
        assert ds["data"]["v"].kind == Tensor(np.dtype(np.float64), ())


@pytest.mark.parametrize(
    ("records", "bad", "what"),
    [
        ([{"v": 1}, {"v": 2}, {"v": "three"}], 2, "a string, but record 0 is a number"),
        ([{"v": "a"}, {"v": 5}], 1, "a number, but record 0 is a string"),
        ([{"v": [1, 2]}, {"v": 3}], 1, "a number, but record 0 is a list"),
        ([{"v": True}, {"v": 1}], 1, "a number, but record 0 is a boolean"),
        ([{"v": 1}, {"w": 1}], 1, "has no field 'v'"),
        ([{"v": 1}, {"v": 1, "w": 2}], 1, "has an extra field 'w'"),
        ([{"v": [1, 2]}, {"v": [1, "x"]}], 1, "something else than numbers"),
    ],
)
def test_records_that_disagree_are_refused(
    tmp_path: Any, records: list[Any], bad: int, what: str
) -> None:
    src = write_json(tmp_path / "bad.json", {"items": records})
    dst = tmp_path / "out.npz"
    with pytest.raises(SchemaError) as e:
        dstore.convert(src, dst)
    msg = str(e.value)
    assert src in msg and f"record {bad}" in msg and what in msg, msg
    assert not dst.exists()


@pytest.mark.parametrize("cut", [1, 10, 100, 1000, -1])
def test_truncated_file_is_refused(tmp_path: Any, cut: int) -> None:
    text = json.dumps(pyspacer_doc(3, 40)).encode()
    path = tmp_path / "cut.json"
    path.write_bytes(text[:cut])
    with pytest.raises(CodecIOError, match=r"cut\.json: not valid JSON .*truncated"):
        dstore.convert(path, tmp_path / "o.npz")
    assert sorted(os.listdir(tmp_path)) == ["cut.json"]


def test_truncated_json_lines_names_the_line(tmp_path: Any) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": ')
    with pytest.raises(CodecIOError, match=r"cut\.jsonl, line 3: not valid JSON"):
        dstore.open(path)


def test_cli_one_line_exit_2_nothing_written(tmp_path: Any) -> None:
    src = write_json(tmp_path / "bad.json", [{"v": 1}, {"v": "x"}])
    run = subprocess.run(
        cli_command("convert", src, str(tmp_path / "o.npz")),
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "record 1" in run.stderr and "bad.json" in run.stderr
    assert sorted(os.listdir(tmp_path)) == ["bad.json"]


def test_dstore_output_is_plain_json_lines(tmp_path: Any) -> None:
    """Every line of a .jsonl output parses alone and is a record: dstore's schema is one
    more member of the last (pandas reads exactly the records, and a column of it)."""
    pd = pytest.importorskip("pandas")
    dstore.save(
        {"x": np.arange(4, dtype=np.int16), "s": ["a", "b", "c", "d"]}, tmp_path / "o.jsonl"
    )
    lines = (tmp_path / "o.jsonl").read_text().splitlines()
    objs = [json.loads(line) for line in lines]
    assert len(objs) == 4 and list(objs[3]) == ["x", "s", "dstore:schema"]
    assert [{k: o[k] for k in ("x", "s")} for o in objs] == [
        {"x": i, "s": c} for i, c in enumerate("abcd")
    ]
    frame = pd.read_json(tmp_path / "o.jsonl", lines=True)
    assert frame["x"].tolist() == [0, 1, 2, 3] and frame["s"].tolist() == list("abcd")
    with dstore.open(tmp_path / "o.jsonl") as ds:
        assert ds["data"]["x"].dtype == np.int16  # the schema keeps what JSON cannot say


def test_overwrite_replaces_only_dstore_json(tmp_path: Any) -> None:
    """--overwrite replaces a JSON file dstore wrote; a foreign JSON file is never removed."""
    out = tmp_path / "o.json"
    dstore.save({"x": np.arange(3)}, out)
    dstore.save({"x": np.arange(5)}, out, overwrite=True)
    with dstore.open(out) as ds:
        assert ds["data"].count == 5
    foreign = write_json(tmp_path / "f.json", [{"x": 1}])
    with pytest.raises(dstore.OutputExistsError, match="not a dataset in json format"):
        dstore.save({"x": np.arange(3)}, foreign, overwrite=True)
    with open(foreign) as f:
        assert json.load(f) == [{"x": 1}]


@pytest.mark.parametrize("ext", [".json", ".jsonl"])
@pytest.mark.parametrize("dtype", ["float16", "float32", ">f8", "complex64", ">c16"])
def test_nan_payloads_and_complex_bit_exact(tmp_path: Any, ext: str, dtype: str) -> None:
    """JSON's NaN has no payload or sign: such NaNs are written as "nan:0x<bits>" and
    come back bit for bit; the file stays JSON the standard library parses."""
    dt = np.dtype(dtype)
    part = (
        np.dtype(dt.byteorder.replace("|", "=") + f"f{dt.itemsize // 2}") if dt.kind == "c" else dt
    )
    bits = np.dtype(f"{part.byteorder.replace('|', '=')}u{part.itemsize}")
    odd = np.array([np.nan, -np.nan, np.inf, -0.0, 1.5, 0.0], part)
    raw = odd.view(bits).copy()
    raw[5] = raw[0] | 1  # a NaN payload
    odd = raw.view(part)
    x = odd.view(dt) if dt.kind == "c" else odd
    ragged = [x[:0], *(x[i:] for i in range(1, len(x)))]
    path = tmp_path / f"n{ext}"
    dstore.save({"x": x, "r": ragged}, path)
    with open(path) as f:
        text = f.read()
    if ext == ".json":
        json.loads(text)
    else:
        [json.loads(line) for line in text.splitlines()]
    with dstore.open(path) as ds:
        got = ds["data"]["x"][:]
        assert got.dtype == dt and got.tobytes() == x.tobytes()
        rows = ds["data"]["r"][:]
        # dstore.save gives a ragged list the native byte order (numpy's result_type)
        assert [r.tobytes() for r in rows] == [
            r.astype(g.dtype).tobytes() for r, g in zip(ragged, rows, strict=True)
        ]


def test_a_json_document_under_a_jsonl_name_says_what_it_is(tmp_path: Any, tiles) -> None:
    """``--to json`` under a ``.jsonl`` name writes one JSON document: reading the file by
    its name (JSON Lines) says so and how to read it, and reading it as JSON gives the data."""
    x, y = tiles
    src = str(tmp_path / "d.npz")
    np.savez(src, x_train=x[:6], y_train=y[:6])
    out = str(tmp_path / "d.jsonl")
    dstore.convert(src, out, to="json")
    with pytest.raises(CodecIOError) as e:
        dstore.open(out)
    assert "\n" not in str(e.value) and "d.jsonl, line 1" in str(e.value)
    assert "format 'json'" in str(e.value)
    with dstore.open(out, format="json") as ds:
        np.testing.assert_array_equal(ds["train"]["x"][:], x[:6])
