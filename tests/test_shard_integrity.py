"""Issue #34, items 3, 4 and 10: what describes a sharded folder (its manifest, a record
index) is checked against the shards before a record is delivered, and a shard read
whole is checked against its sha256. Every registered sharded format takes part (the
registry drives the parametrisation); the index cases are TFRecord's, the one format
whose shards carry record indexes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil

import numpy as np
import pytest

import dstore
import dstore.api
from dstore.cli import main
from dstore.errors import CodecIOError, DstoreError
from dstore.model.schema import schema_digest
from dstore.registry import codecs_with, default_extension

pytest.importorskip("imagecodecs")

SHARDED = codecs_with(lambda c: c.sharded)


def _data(tiles, shift: int = 0) -> dict:
    x, onehot = tiles
    y = onehot.argmax(axis=1).astype(np.int64)
    return {"train": {"x": x, "y": y, "k": np.arange(len(x), dtype=np.int64) + shift}}


def _write(tmp_path, fmt: str, data: dict, name: str = "d", **options) -> str:
    path = str(tmp_path / f"{name}{default_extension(fmt)}")
    dstore.save(data, path, shard_mb="0.05", **options)
    return path


def _manifest(path: str) -> dict:
    with open(os.path.join(path, "dstore.json")) as f:
        return json.load(f)


def _rewrite(path: str, m: dict) -> None:
    """The manifest ``m`` written back as a thorough forger would: the schema's digest
    recomputed, so only the shards can tell."""
    schema = {k: v for k, v in m["schema"].items() if k != "digest"}
    m["schema"]["digest"] = schema_digest(schema)
    with open(os.path.join(path, "dstore.json"), "w") as f:
        json.dump(m, f, indent=1)


def _shards(path: str) -> list[dict]:
    return _manifest(path)["splits"]["train"]["shards"]


def _refused_everywhere(path: str, match: str, tmp_path) -> None:
    """Opening, reading, converting and checking ``path`` all fail naming ``match``;
    no conversion output is left."""
    with pytest.raises(CodecIOError, match=match), dstore.open(path) as ds:
        ds["train"].read()
    with pytest.raises(CodecIOError, match=match):
        dstore.convert(path, str(tmp_path / "out.npz"))
    assert not os.path.exists(tmp_path / "out.npz")
    try:
        report = dstore.api.check(path)
    except CodecIOError as e:
        assert re.search(match, str(e)), e
    else:
        assert not report.ok, report.lines()


# ----------------------------------------------------------- item 10: the manifest


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_manifest_listing_one_shard_twice_is_refused(tmp_path, tiles, fmt):
    """The issue's case: the first shard listed again at the end, the counts raised to
    match, read 130 records of 100 written and passed verify."""
    data = _data(tiles)
    path = _write(tmp_path, fmt, data)
    m = _manifest(path)
    first = m["splits"]["train"]["shards"][0]
    m["splits"]["train"]["shards"].append(dict(first))
    m["splits"]["train"]["count"] += first["records"]
    m["schema"]["splits"]["train"]["count"] += first["records"]
    _rewrite(path, m)
    _refused_everywhere(path, f"{first['file']}.*listed twice", tmp_path)
    assert main(["info", path]) == 2


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_manifest_naming_one_file_twice_under_two_names_is_refused(tmp_path, tiles, fmt):
    """A second name for a shard (a link inside the folder, a hard link) is the same
    records read twice: refused as the same file, whatever the names."""
    path = _write(tmp_path, fmt, _data(tiles))
    m = _manifest(path)
    first = m["splits"]["train"]["shards"][0]
    twin = "copy-" + first["file"]
    os.link(os.path.join(path, first["file"]), os.path.join(path, twin))
    m["splits"]["train"]["shards"].append({**first, "file": twin})
    m["splits"]["train"]["shards"][-1].pop("index", None)
    m["splits"]["train"]["count"] += first["records"]
    m["schema"]["splits"]["train"]["count"] += first["records"]
    _rewrite(path, m)
    _refused_everywhere(path, "same file", tmp_path)


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_manifest_listing_a_missing_shard_is_refused_when_opened(tmp_path, tiles, fmt):
    path = _write(tmp_path, fmt, _data(tiles))
    gone = _shards(path)[2]["file"]
    os.remove(os.path.join(path, gone))
    with pytest.raises(CodecIOError, match=f"{gone}: missing"):
        dstore.api.open_reader(path)
    assert main(["info", path]) == 2


@pytest.mark.parametrize(
    "damage",
    ["index is a shard", "index is the manifest", "bytes not a number", "sha256 not hex"],
)
def test_other_inconsistent_manifests_are_refused(tmp_path, tiles, damage):
    path = _write(tmp_path, "tfrecord", _data(tiles))
    m = _manifest(path)
    shards = m["splits"]["train"]["shards"]
    if damage == "index is a shard":
        shards[0]["index"]["file"] = shards[1]["file"]
    elif damage == "index is the manifest":
        shards[0]["index"]["file"] = "dstore.json"
    elif damage == "bytes not a number":
        shards[0]["bytes"] = "many"
    else:
        shards[0]["sha256"] = "not a digest"
    _rewrite(path, m)
    with pytest.raises(CodecIOError, match=r"dstore\.json"):
        dstore.api.open_reader(path)


# ------------------------------------------------------ item 3: a lying record index


def _embedded_frame_dataset(tmp_path) -> tuple[str, bytes]:
    """A TFRecord folder whose record 0 carries, inside its ``b`` bytes, a whole valid
    frame of an Example ``{k: 999, b: b"evil"}`` with this dataset's fields."""
    evil = str(tmp_path / "evil.tfrecords")
    dstore.save({"data": {"k": np.array([999]), "b": np.array([b"evil"], object)}}, evil)
    (shard,) = [n for n in os.listdir(evil) if n.endswith(".tfrecord")]
    with open(os.path.join(evil, shard), "rb") as f:
        frame = f.read()
    path = str(tmp_path / "lie.tfrecords")
    b = np.array([b"AAAA" + frame + b"ZZ", b"one", b"two"], object)
    dstore.save({"data": {"k": np.arange(3), "b": b}}, path)
    return path, frame


def _lying_index(shard: str, frame: bytes) -> bytes:
    """Index lines sending record 1 to the frame hidden in record 0 (contiguous, ending
    at the end of the file, one line per record: every check of the index alone passes)."""
    with open(shard, "rb") as f:
        raw = f.read()
    at = raw.index(frame)
    entries = [(0, at), (at, len(frame)), (at + len(frame), len(raw) - at - len(frame))]
    return "".join(f"{o} {n}\n" for o, n in entries).encode()


def _index_file(path: str) -> str:
    (entry,) = _manifest(path)["splits"]["data"]["shards"]
    return os.path.join(path, entry["index"]["file"])


def test_an_index_pointing_inside_a_record_never_delivers_the_hidden_frame(tmp_path):
    path, frame = _embedded_frame_dataset(tmp_path)
    m = _manifest(path)
    (entry,) = m["splits"]["data"]["shards"]
    lie = _lying_index(os.path.join(path, entry["file"]), frame)
    with open(_index_file(path), "wb") as f:
        f.write(lie)
    entry["index"].update(bytes=len(lie), sha256=hashlib.sha256(lie).hexdigest())
    _rewrite_data(path, m)
    with dstore.open(path) as ds, pytest.raises(CodecIOError, match=r"\.idx.*record 1"):
        ds["data"]["k"][1]
    report = dstore.api.check(path)
    assert not report.ok
    assert any("record 1" in ln and ".idx" in ln for ln in report.lines()), report.lines()


def test_a_foreign_sidecar_pointing_inside_a_record_is_refused(tmp_path):
    """The same lie in a ``.idx`` beside files dstore did not write (no manifest)."""
    path, frame = _embedded_frame_dataset(tmp_path)
    folder = tmp_path / "foreign"
    folder.mkdir()
    (name,) = [n for n in os.listdir(path) if n.endswith(".tfrecord")]
    shutil.copy(os.path.join(path, name), folder / name)
    (folder / (name + ".idx")).write_bytes(_lying_index(str(folder / name), frame))
    with (
        dstore.open(str(folder), format="tfrecord") as ds,
        pytest.raises(CodecIOError, match=r"\.idx.*record 1"),
    ):
        ds["data"]["k"][1]
    assert not dstore.api.check(str(folder), format="tfrecord").ok


def test_torch_map_style_never_returns_the_hidden_frame(tmp_path):
    pytest.importorskip("torch")
    path, frame = _embedded_frame_dataset(tmp_path)
    (entry,) = _manifest(path)["splits"]["data"]["shards"]
    m = _manifest(path)
    lie = _lying_index(os.path.join(path, entry["file"]), frame)
    with open(_index_file(path), "wb") as f:
        f.write(lie)
    m["splits"]["data"]["shards"][0]["index"].update(
        bytes=len(lie), sha256=hashlib.sha256(lie).hexdigest()
    )
    _rewrite_data(path, m)
    # one record per range: record 1 is read alone, entered by its index entry
    ds = dstore.to_torch(path, "data", map_style=True, range_mb=1e-5)
    with pytest.raises(DstoreError, match=r"\.idx"):
        ds[1]  # was {k: 999, b: b"evil"}


def _rewrite_data(path: str, m: dict) -> None:
    with open(os.path.join(path, "dstore.json"), "w") as f:
        json.dump(m, f, indent=1)


def test_an_honest_index_still_gives_every_record(tmp_path):
    path, _ = _embedded_frame_dataset(tmp_path)
    with dstore.open(path) as ds:
        assert [int(ds["data"]["k"][i]) for i in (2, 1, 0)] == [2, 1, 0]
    assert dstore.api.check(path).ok


# -------------------------------------------- item 4: shards checked when read whole


def _swap_shard(src: str, other: str, n: int = 1) -> str:
    """Shard ``n`` of ``src`` replaced by shard ``n`` of ``other`` (same records count)."""
    mine, theirs = _shards(src)[n], _shards(other)[n]
    assert mine["records"] == theirs["records"]
    shutil.copy(os.path.join(other, theirs["file"]), os.path.join(src, mine["file"]))
    if "index" in mine:  # its index swapped too: only the shard's bytes can tell
        shutil.copy(
            os.path.join(other, theirs["index"]["file"]), os.path.join(src, mine["index"]["file"])
        )
    return mine["file"]


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_shard_swapped_in_from_another_dataset_is_refused_when_read_whole(tmp_path, tiles, fmt):
    src = _write(tmp_path, fmt, _data(tiles))
    other = _write(tmp_path, fmt, _data(tiles, shift=1000), name="other")
    name = _swap_shard(src, other)
    match = f"{name}: .*the manifest lists"
    with pytest.raises(CodecIOError, match=match):
        dstore.convert(src, str(tmp_path / "out.npz"))
    assert not os.path.exists(tmp_path / "out.npz")
    with pytest.raises(CodecIOError, match=match):
        dstore.verify(src, other)
    report = dstore.api.check(src)
    assert not report.ok and any(name in ln for ln in report.lines() if "MISMATCH" in ln)
    with dstore.open(src) as ds, pytest.raises(CodecIOError, match=match):
        ds["train"]["k"][:]


@pytest.mark.parametrize("fmt", SHARDED)
def test_to_torch_refuses_a_swapped_shard(tmp_path, tiles, fmt):
    pytest.importorskip("torch")
    src = _write(tmp_path, fmt, _data(tiles))
    other = _write(tmp_path, fmt, _data(tiles, shift=1000), name="other")
    name = _swap_shard(src, other)
    with pytest.raises(CodecIOError, match=name):
        list(dstore.to_torch(src, "train"))


@pytest.mark.tf
def test_to_tf_dataset_refuses_a_swapped_shard_of_another_size(tmp_path, tiles):
    """tf.data reads TFRecord shards itself (CRC32C only): their sizes are checked when
    the pipeline is built."""
    pytest.importorskip("tensorflow")
    src = _write(tmp_path, "tfrecord", _data(tiles))
    other = _write(tmp_path, "tfrecord", _data(tiles, shift=1000), name="other")
    name = _swap_shard(src, other)
    listed = next(s["bytes"] for s in _shards(src) if s["file"] == name)
    assert os.path.getsize(os.path.join(src, name)) != listed
    with pytest.raises(CodecIOError, match=f"{name}: .*the manifest lists"):
        dstore.to_tf_dataset(src, "train")


def _member(tar: str, suffix: str) -> tuple[int, int]:
    """Offset and size of the first member of ``tar`` whose name ends in ``suffix``."""
    import tarfile

    with tarfile.open(tar) as t:
        m = next(m for m in t.getmembers() if m.name.endswith(suffix))
        return m.offset_data, m.size


def test_one_changed_byte_of_a_webdataset_label_is_refused(tmp_path, tiles):
    if "webdataset" not in SHARDED:
        pytest.skip("webdataset is not registered here")
    data = _data(tiles)
    src = _write(tmp_path, "webdataset", data)
    shard = os.path.join(src, _shards(src)[0]["file"])
    at, _ = _member(shard, ".y.cls")
    with open(shard, "r+b") as f:
        f.seek(at)
        digit = f.read(1)
        f.seek(at)
        f.write(b"7" if digit != b"7" else b"3")  # still a valid label, another one
    for run in (
        lambda: dstore.convert(src, str(tmp_path / "o.npz")),
        lambda: list(dstore.to_torch(src, "train")),
    ):
        with pytest.raises(CodecIOError, match="sha256"):
            run()


def _flip_value(path: str, values: np.ndarray) -> None:
    """One bit flipped in the stored bytes of ``values[1]`` (int64, stored plain or as
    a dictionary page: either holds them in order)."""
    with open(path, "r+b") as f:
        raw = f.read()
        at = raw.index(values.astype("<i8").tobytes()) + 8
        f.seek(at)
        f.write(bytes([raw[at] ^ 0x10]))


def test_parquet_pages_carry_checksums_and_a_flipped_bit_is_refused(tmp_path, tiles):
    import pyarrow.parquet as pq

    data = _data(tiles)
    src = _write(tmp_path, "parquet", data, compression="none")
    shard = os.path.join(src, _shards(src)[0]["file"])
    # other readers read the pages as ever; pyarrow checks them when asked
    assert pq.read_table(shard, page_checksum_verification=True).num_rows > 0
    _flip_value(shard, data["train"]["k"][: _shards(src)[0]["records"]])
    with pytest.raises(OSError, match="CRC"):
        pq.read_table(shard, page_checksum_verification=True)
    with dstore.open(src) as ds, pytest.raises(CodecIOError, match=r"CRC|checksum"):
        ds["train"]["k"][1]  # a ranged read: one row group, the page's checksum


def test_a_file_is_checked_against_its_manifest_entry(tmp_path, tiles):
    """``check_shard_file``, what a whole read checks: the manifest's size and sha256
    against the file (one changed byte, the same size)."""
    from dstore.sharding.manifest import check_shard_file

    src = _write(tmp_path, "webdataset", _data(tiles))
    entry = _shards(src)[0]
    path = os.path.join(src, entry["file"])
    check_shard_file(path, entry)  # as written: fine
    with open(path, "r+b") as f:
        f.seek(600)
        f.write(b"!")
    with pytest.raises(CodecIOError, match=f"{entry['file']}.*sha256"):
        check_shard_file(path, entry)


def _read_all_then_exit(reader, want: int) -> None:
    n = sum(len(b["k"]) for b in reader.iter_batches("train"))
    os._exit(0 if n == want else 1)


def test_a_reader_forked_while_it_hashes_ahead_reads_on(tmp_path, tiles, monkeypatch):
    """A shard is hashed on a thread while the one before it is read; a process forked
    then (a DataLoader worker started with 'fork') has no such thread, and must not wait
    for it."""
    import multiprocessing
    import time

    from dstore.sharding import checked

    data = _data(tiles)
    src = _write(tmp_path, "webdataset", data)
    digest = checked._digest
    monkeypatch.setattr(checked, "_digest", lambda p: (time.sleep(3), digest(p))[1])
    reader = dstore.api.open_reader(src)
    batches = reader.iter_batches("train", batch_rows=1)
    next(batches)  # shard 0 read; shard 1 is being hashed, for 3 s
    child = multiprocessing.get_context("fork").Process(
        target=_read_all_then_exit, args=(reader, len(data["train"]["k"]))
    )
    child.start()
    child.join(120)
    if child.exitcode is None:  # waiting for a thread it does not have
        child.kill()
        child.join()
    assert child.exitcode == 0
    assert sum(len(b["k"]) for b in batches) == len(data["train"]["k"]) - 1
    reader.close()
