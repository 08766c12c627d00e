"""Issue #34's malformed metadata, over every registered format: every JSON text an
output holds (manifests, zarr metadata, the npz schema comment, HDF5 and Parquet
key-value metadata) nested 32,000 deep or larger than is parsed at once, and every
manifest value of a closed set (compression, field encodings) set to another value
(of another format too): one line naming the file, or exactly the same data. Never
RecursionError, KeyError, TypeError or AttributeError."""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import dstore
from dstore.demo import photo_tiles
from dstore.registry import codecs_with, get_codec_class
from dstore.testing import assert_datasets_equal, kind_cases, read_all, usable_formats

ALL = usable_formats(text=True)
SHARDED = [f for f in codecs_with(lambda c: c.sharded) if f in ALL]
#: as deep as a zip comment holds (64 KiB); 30 times Python's recursion limit
DEEP = b"[" * 32_000 + b"]" * 32_000


def _data() -> dict:
    x, y = photo_tiles(6, 16, seed=5)
    return {"train": {"x": x, "label": y.argmax(1).astype(np.int64)}}


def _outcome(path: str, want: dict, out: str) -> str:
    """ "same" (the data as written), "error" (one line), or what went wrong."""
    try:
        got = read_all(path)
        dstore.convert(path, out, overwrite=True)
    except dstore.DstoreError as e:
        assert str(e) and "\n" not in str(e), repr(str(e))
        return "error"
    assert_datasets_equal(want, got)
    return "same"


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _json_places(path: str) -> Iterator[tuple[str, Callable[[bytes], None]]]:
    """Every JSON text of an output, found by content (not by format): (where, setter)."""
    files = (
        [os.path.join(d, f) for d, _, fs in os.walk(path) for f in sorted(fs)]
        if os.path.isdir(path)
        else [path]
    )
    for p in files:
        with open(p, "rb") as f:
            data = f.read()
        if _is_json(data):
            yield p, lambda text, p=p: _write(p, text)
        elif zipfile.is_zipfile(p):
            comment = zipfile.ZipFile(p).comment
            prefix = comment[: comment.find(b"{")] if b"{" in comment else b""
            if prefix and _is_json(comment[len(prefix) :]):
                yield (
                    f"{p} comment",
                    lambda text, p=p, prefix=prefix: _set_comment(p, prefix + text),
                )
        elif data[:4] == b"PAR1":
            yield from _parquet_places(p)
        elif data[:8] == b"\x89HDF\r\n\x1a\n":
            yield from _hdf5_places(p)


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _set_comment(path: str, comment: bytes) -> None:
    with zipfile.ZipFile(path, "a") as z:
        z.comment = comment


def _parquet_places(path: str) -> Iterator[tuple[str, Callable[[bytes], None]]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    for key, value in (table.schema.metadata or {}).items():
        if _is_json(value):

            def put(text: bytes, key: bytes = key) -> None:
                meta = {**table.schema.metadata, key: text}
                pq.write_table(table.replace_schema_metadata(meta), path)

            yield f"{path} metadata {key!r}", put


def _hdf5_places(path: str) -> Iterator[tuple[str, Callable[[bytes], None]]]:
    import h5py

    with h5py.File(path, "r") as f:
        found = []
        f.visititems(lambda name, obj: found.append(name))
        for name in ["/", *found]:
            for key, value in f[name].attrs.items():
                if isinstance(value, str) and _is_json(value.encode()):
                    found_at = (name, key)

                    def put(text: bytes, at: tuple[str, str] = found_at) -> None:
                        with h5py.File(path, "a") as g:
                            g[at[0]].attrs[at[1]] = text.decode()

                    yield f"{path} attribute {name}:{key}", put


@pytest.mark.parametrize("fmt", ALL)
def test_json_nested_32000_deep_anywhere_is_one_line(tmp_path, fmt):
    """Failed before: RecursionError from dstore.json (every sharded format), the npz
    schema comment and Parquet's huggingface metadata; now one line, or the same data
    where the text is only a description (Parquet's metadata: a note)."""
    valid = str(tmp_path / f"v{ALL[fmt]}")
    dstore.save(_data(), valid, format=fmt)
    want = read_all(valid)
    places = [where for where, _ in _json_places(valid)]
    if not places:
        pytest.skip(f"{fmt} keeps no JSON text apart from its data")
    for i, where in enumerate(places):
        work = str(tmp_path / f"w{i}{ALL[fmt]}")
        _copy(valid, work)
        setter = dict(_json_places(work))[where.replace(valid, work)]
        setter(DEEP)
        outcome = _outcome(work, want, str(tmp_path / f"o{i}.npz"))
        assert outcome in ("same", "error"), (where, outcome)


def _copy(src: str, dst: str) -> None:
    import shutil

    (shutil.copytree if os.path.isdir(src) else shutil.copyfile)(src, dst)


# ------------------------------------------------- manifest values of a closed set


def _kinds_data() -> tuple[dict, dict]:
    """One split per field kind (dstore.testing.kind_cases), and one of image tiles with
    labels and feature rows: data and kinds for dstore.save."""
    x, y = photo_tiles(4, 16, seed=2)
    data = {"tiles": {"x": x, "label": y.argmax(1), "rows": x[:, 0, :, 0].astype(np.float32)}}
    kinds = {}
    for case, (kind, records) in kind_cases().items():
        split = case.replace("-", "_")
        data[split] = {"f": records}
        kinds[(split, "f")] = kind
    return data, kinds


@pytest.fixture(scope="module")
def sharded_outputs(tmp_path_factory) -> dict[str, str]:
    """Every sharded format's output of every kind it holds."""
    root = tmp_path_factory.mktemp("sharded")
    data, kinds = _kinds_data()
    out = {}
    for fmt in SHARDED:
        held = get_codec_class(fmt).kinds
        splits = {
            s: d for s, d in data.items() if s == "tiles" or isinstance(kinds[(s, "f")], held)
        }
        path = str(root / f"k{ALL[fmt]}")
        dstore.save(
            splits, path, format=fmt, kinds={k: v for k, v in kinds.items() if k[0] in splits}
        )
        out[fmt] = path
    return out


def _manifest(path: str) -> dict:
    with open(os.path.join(path, "dstore.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("fmt", SHARDED)
def test_every_closed_manifest_value_swapped_is_one_line_or_the_same_data(
    sharded_outputs, fmt, tmp_path
):
    """compression, format_version and each field's encoding set to every value any
    sharded format writes (and one no format writes). Failed before: KeyError from a compression of
    bz2 (TFRecord), AttributeError from a Parquet int column called an image."""
    path = sharded_outputs[fmt]
    want = read_all(path)
    seen = {
        e["encoding"]
        for p in sharded_outputs.values()
        for fields in _manifest(p)["fields"].values()
        for e in fields.values()
    }
    manifest = _manifest(path)
    edits = [("compression", c) for c in ("gzip", "zlib", "bz2", 1, None)]
    edits += [("format_version", v) for v in (2, "1", None, 0)]
    edits += [
        (f"fields/{split}/{name}", enc)
        for split, fields in manifest["fields"].items()
        for name in fields
        for enc in sorted(seen | {"bogus"})
    ]
    outcomes: dict[str, int] = {}
    work = str(tmp_path / f"w{ALL[fmt]}")
    _copy(path, work)
    for key, value in edits:
        edited = json.loads(json.dumps(manifest))
        if key in ("compression", "format_version"):
            edited[key] = value
        else:
            _, split, name = key.split("/")
            edited["fields"][split][name]["encoding"] = value
        _write(os.path.join(work, "dstore.json"), json.dumps(edited).encode())
        try:
            got = read_all(work)
        except dstore.DstoreError as e:
            assert str(e) and "\n" not in str(e), (key, value, str(e))
            outcome = "error"
        else:
            try:
                assert_datasets_equal(want, got)
                outcome = "same"
            except AssertionError:
                outcome = f"SILENT {key}={value}"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert set(outcomes) <= {"error", "same"}, outcomes


def test_an_image_struct_whose_bytes_are_not_binary_is_refused_by_name(tmp_path):
    """Failed before: TypeError ('int' object is not subscriptable) from info and convert."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    image = pa.StructArray.from_arrays(
        [pa.array([1, 2, 3]), pa.array(["a.png", "b.png", "c.png"])], names=["bytes", "path"]
    )
    features = {"info": {"features": {"image": {"_type": "Image"}}}}
    path = str(tmp_path / "images.parquet")
    table = pa.table({"image": image, "label": pa.array([0, 1, 0])})
    pq.write_table(table.replace_schema_metadata({"huggingface": json.dumps(features)}), path)
    with pytest.raises(dstore.SchemaError) as raised:
        dstore.convert(path, str(tmp_path / "out.npz"))
    assert str(raised.value) == (
        f"{path}: column 'image' is an Image struct whose 'bytes' are int64, not binary, "
        "which dstore cannot map; drop such columns with -o drop_unmapped=true"
    )
    with dstore.open(path, drop_unmapped=True) as ds:
        assert list(ds["data"]) == ["label"] and ds["data"]["label"][:].tolist() == [0, 1, 0]
