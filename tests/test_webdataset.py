"""WebDataset tar shards: dstore's output read by the real ``webdataset`` package, tars
written by ``webdataset.TarWriter``/``ShardWriter`` and plain ``tar`` read by dstore,
hostile members refused, deterministic bytes, resume and Dask, training readers."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile

import numpy as np
import pytest

import dstore
from dstore.errors import CodecIOError, SchemaError
from dstore.model import Bytes, Ragged, StringList
from dstore.testing import assert_datasets_equal, cli_command, file_digests, read_all

pytest.importorskip("imagecodecs")
wds = pytest.importorskip("webdataset")
# webdataset 1.0 leaves each tar it iterated open for the garbage collector (not ours)
pytestmark = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


def _samples(url, *decode):
    """``WebDataset(url).decode(*decode)``: ``decode()`` alone decodes all but images."""
    return list(wds.WebDataset(url, shardshuffle=False).decode(*decode))


@pytest.fixture
def written(tmp_path, tiles):
    x, y = tiles
    data = {
        "train": {
            "x": x[:30],
            "label": y[:30].argmax(1).astype(np.int64),
            "onehot": y[:30],
            "name": [f"tile {i}.png" for i in range(30)],
        },
        "test": {"x": x[30:], "label": y[30:].argmax(1).astype(np.int64)},
    }
    path = str(tmp_path / "data.wds")
    dstore.save({s: dict(f) for s, f in data.items()}, path, shard_mb=0.05)
    return path, data


def test_real_webdataset_decodes_every_field_as_written(written):
    path, data = written
    shards = sorted(f for f in os.listdir(path) if f.startswith("train-"))
    assert len(shards) > 1 and shards[0] == "train-000000.tar"
    url = os.path.join(path, f"train-{{000000..{len(shards) - 1:06d}}}.tar")
    got = _samples(url, "rgb8")
    train = data["train"]
    assert [s["__key__"] for s in got] == [f"{i:06d}" for i in range(30)]
    for i, s in enumerate(got):
        np.testing.assert_array_equal(s["x.png"], train["x"][i])
        assert s["label.cls"] == int(train["label"][i]) and isinstance(s["label.cls"], int)
        onehot = s["onehot.npy"]
        assert onehot.dtype == train["onehot"].dtype
        np.testing.assert_array_equal(onehot, train["onehot"][i])
        assert s["name.txt"] == train["name"][i]
    plain = _samples(url)  # decode() alone: images stay their PNG bytes
    assert plain[0]["x.png"][:8] == b"\x89PNG\r\n\x1a\n" and plain[0]["label.cls"] == int(
        train["label"][0]
    )
    got_all = read_all(path)
    assert got_all["train"].pop("name").to_str_list() == train["name"]
    assert_datasets_equal(
        {**data, "train": {k: v for k, v in train.items() if k != "name"}}, got_all
    )
    with dstore.open(url) as ds:  # the brace pattern, read by dstore (no manifest)
        assert ds["train"]["label.cls"][:].tolist() == train["label"].tolist()


def test_every_kind_through_webdataset_decode(tmp_path):
    rng = np.random.default_rng(0)
    ragged = [rng.random((n, 4)).astype(np.float32) for n in (2, 0, 5)]
    data = {
        "train": {
            "boxes": ragged,
            "tags": [["a", "é"], [], ["x"]],
            "blob": [b"\x00\xff", b"", b"z"],
            "f64": rng.random((3, 2)),
            "flag": np.array([True, False, True]),
        }
    }
    kinds = {
        ("train", "boxes"): Ragged(np.dtype(np.float32), (4,)),
        ("train", "tags"): StringList(),
        ("train", "blob"): Bytes(),
    }
    path = str(tmp_path / "k.wds")
    dstore.save(data, path, kinds=kinds)
    got = _samples(os.path.join(path, "train-000000.tar"), "rgb8")
    for i, s in enumerate(got):
        np.testing.assert_array_equal(s["boxes.npy"], ragged[i])
        assert s["tags.json"] == data["train"]["tags"][i]
        assert s["blob.bin"] == data["train"]["blob"][i]
        np.testing.assert_array_equal(s["f64.npy"], data["train"]["f64"][i])
        assert s["flag.npy"] == data["train"]["flag"][i]
    with dstore.open(path) as ds:
        assert [ds["train"]["boxes"][i].tobytes() for i in range(3)] == [
            r.tobytes() for r in ragged
        ]
        assert ds["train"]["tags"][0] == ["a", "é"]


def test_field_names_are_escaped_and_restored(tmp_path):
    data = {"train": {"a.b": np.arange(4, dtype=np.int32), "c/d": np.ones((4, 2), np.float32)}}
    path = str(tmp_path / "e.wds")
    dstore.save(data, path)
    with tarfile.open(os.path.join(path, "train-000000.tar")) as tf:
        names = tf.getnames()
    assert names[:2] == ["000000.a%2Eb.cls", "000000.c%2Fd.npy"]
    assert sorted(_samples(os.path.join(path, "train-000000.tar"), "rgb8")[0]) == [
        "__key__",
        "__local_path__",
        "__url__",
        "a%2eb.cls",  # webdataset lower-cases suffixes
        "c%2fd.npy",
    ]
    assert_datasets_equal(data, read_all(path))


def test_output_is_deterministic_with_fixed_headers(tmp_path, tiles):
    x, y = tiles
    a, b = str(tmp_path / "a.wds"), str(tmp_path / "b.wds")
    dstore.save({"x": x, "y": y}, a, workers=1)
    dstore.save({"x": x, "y": y}, b, workers=2)
    assert file_digests(a) == file_digests(b)
    with tarfile.open(os.path.join(a, "data-000000.tar")) as tf:
        members = tf.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {
        (0, 0, 0, "", "", 0o644)
    }


def test_lossy_image_codec_verifies_and_decodes(tmp_path, tiles):
    x, y = tiles
    src, dst = str(tmp_path / "s.npz"), str(tmp_path / "j.wds")
    np.savez(src, x_train=x, y_train=y)
    dstore.convert(src, dst, options={"image_codec": "jpeg", "quality": "90"})
    assert dstore.verify(src, dst).ok
    s = _samples(os.path.join(dst, "train-000000.tar"), "rgb8")[0]
    assert s["x.jpg"].shape == x[0].shape


# ------------------------------------------------------------------ foreign tars


def _write_foreign(path, n, pixels):
    """A tar the way WebDataset users write them: TarWriter with its own encoders."""
    with wds.TarWriter(path) as sink:
        for i in range(n):
            sink.write(
                {
                    "__key__": f"sample{i:04d}",
                    "jpg": pixels[i],
                    "cls": i % 3,
                    "npy": np.arange(i + 1, dtype=np.int16),
                    "txt": f"caption {i}",
                    "json": ["a", str(i)],
                    "meta.bin": bytes([i]),
                }
            )


def test_tars_written_by_webdataset_are_read(tmp_path, tiles):
    x, _ = tiles
    one = str(tmp_path / "one.tar")
    _write_foreign(one, 6, x)
    with dstore.open(one) as ds:
        split = ds["data"]
        kinds = {n: split[n].kind.describe() for n in split}
        assert kinds == {
            "jpg": "image uint8 (*, *, ?) jpeg",
            "cls": "int64 ()",
            "npy": "ragged int16 (*,)",
            "txt": "string",
            "json": "list of string",
            "meta.bin": "bytes",
        }
        assert split["cls"][:].tolist() == [0, 1, 2, 0, 1, 2]
        assert split["npy"][3].tolist() == [0, 1, 2, 3]
        assert split["txt"][5] == "caption 5" and split["json"][2] == ["a", "2"]
        with tarfile.open(one) as tf:
            assert split["jpg"][4] == tf.extractfile("sample0004.jpg").read()
    folder = tmp_path / "shards"
    folder.mkdir()
    with wds.ShardWriter(str(folder / "train-%06d.tar"), maxcount=4) as sink:
        for i in range(10):
            sink.write({"__key__": f"k{i:03d}", "cls": i, "npy": np.full((2, 2), i, np.float32)})
    for path in (str(folder), str(folder / "train-{000000..000002}.tar")):
        with dstore.open(path, format="webdataset") as ds:
            assert list(ds) == ["train"]
            assert ds["train"]["cls"][:].tolist() == list(range(10))
            assert ds["train"]["npy"].kind.describe() == "float32 (2, 2)"
            np.testing.assert_array_equal(ds["train"]["npy"][7], np.full((2, 2), 7, np.float32))


def test_plain_tar_and_converting_a_foreign_tar(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    for i in range(3):
        (files / f"{i:02d}.txt").write_text(f"text {i}")
        (files / f"{i:02d}.cls").write_text(str(10 * i))
    tar = str(tmp_path / "plain.tar")
    subprocess.run(["tar", "-cf", tar, "-C", str(files), *sorted(os.listdir(files))], check=True)
    out = str(tmp_path / "out.npz")
    dstore.convert(tar, out)
    got = read_all(out)["data"]
    assert got["cls"].tolist() == [0, 10, 20]
    assert dstore.verify(tar, out).ok


# a field some samples lack reads as a list kind, as TFRecord features some Examples lack
_OUTPUTS = ("out.npz", "out.zarr", "out.parquet", "out.tfrecords")


def _same(got, want, where):
    """One record of a field equal to the one expected, element by element."""
    if isinstance(want, list):
        assert list(got) == want, where
    else:
        assert np.asarray(got).dtype == np.asarray(want).dtype, where
        np.testing.assert_array_equal(got, want, err_msg=str(where))


def _check_records(path, want, kinds, fmt=None):
    """``path`` holds the splits ``want`` ({split: {field: records}}) of ``kinds``, read by
    dstore.open; so do its conversions to npz, zarr, parquet and tfrecords (verified)."""
    for target in (path, *(os.path.join(os.path.dirname(path), o) for o in _OUTPUTS)):
        if target != path:
            dstore.convert(path, target, from_format=fmt)
            assert dstore.verify(path, target, a_format=fmt).ok, target
        with dstore.open(target, format=fmt if target == path else None) as ds:
            assert sorted(ds) == sorted(want)
            for split, fields in want.items():
                got = ds[split]
                assert {n: got[n].kind.describe() for n in got} == kinds[split], target
                assert list(got) == list(kinds[split]), target  # first-seen order
                for name, records in fields.items():
                    assert len(got[name]) == len(records)
                    for i, value in enumerate(records):
                        _same(got[name][i], value, (target, split, name, i))


def _members(path):
    with tarfile.open(path) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}


def test_samples_whose_fields_differ_read_as_lists(tmp_path, tiles):
    # refused before: "sample 'b' lacks field 'jpg' unlike sample 'a'"
    x, _ = tiles
    path = str(tmp_path / "m.tar")
    with wds.TarWriter(path) as sink:
        sink.write(
            {"__key__": "a", "cls": 1, "txt": "x", "jpg": x[0], "npy": np.float32(2.5)}
            | {"json": ["p", "q"]}
        )
        sink.write({"__key__": "b", "cls": 2})  # lacks all but cls
        sink.write({"__key__": "c", "cls": 3, "txt": "z", "npy": np.float32(7), "meta.bin": b"m"})
    jpg = _members(path)["a.jpg"]
    f32 = np.float32
    want = {
        "cls": [np.int64(1), np.int64(2), np.int64(3)],
        "jpg": [[jpg], [], []],
        "json": [["p", "q"], [], []],
        "npy": [np.array([2.5], f32), np.zeros(0, f32), np.array([7], f32)],
        "txt": [["x"], [], ["z"]],
        "meta.bin": [[], [], [b"m"]],
    }
    kinds = {
        "cls": "int64 ()",
        "jpg": "list of bytes",
        "json": "list of string",
        "npy": "ragged float32 (*,)",
        "txt": "list of string",
        "meta.bin": "list of bytes",
    }
    _check_records(path, {"data": want}, {"data": kinds})
    got = list(dstore.to_torch(path, split="data"))
    assert [r["txt"] for r in got] == want["txt"] and got[0]["jpg"] == [jpg]
    assert [r["npy"].tolist() for r in got] == [[2.5], [], [7.0]]


def test_fields_differing_across_shards_of_a_brace_pattern(tmp_path, tiles):
    x, _ = tiles
    folder = tmp_path / "shards"
    folder.mkdir()
    with wds.ShardWriter(str(folder / "train-%06d.tar"), maxcount=3) as sink:
        for i in range(9):
            sample = {"__key__": f"k{i:03d}", "cls": i}
            if i < 3 or i >= 6:
                sample["png"] = x[i]
            if i < 3:
                sample["seg.npy"] = np.full((i + 1, 2), i, np.int16)
            if i >= 3:
                sample["txt"] = f"caption {i}"
            if 3 <= i < 6:
                sample["vec.npy"] = np.full((2, 3), i, np.float32)
            sink.write(sample)
    assert sorted(os.listdir(folder)) == [f"train-{i:06d}.tar" for i in range(3)]
    members = {}
    for name in sorted(os.listdir(folder)):
        members |= _members(str(folder / name))
    none16, none32 = np.zeros((0, 2), np.int16), np.zeros((0, 3), np.float32)
    want = {
        "cls": [np.int64(i) for i in range(9)],
        "png": [[members[f"k{i:03d}.png"]] if i < 3 or i >= 6 else [] for i in range(9)],
        "seg.npy": [np.full((i + 1, 2), i, np.int16) if i < 3 else none16 for i in range(9)],
        "txt": [[f"caption {i}"] if i >= 3 else [] for i in range(9)],
        "vec.npy": [np.full((2, 3), i, np.float32) if 3 <= i < 6 else none32 for i in range(9)],
    }
    kinds = {
        "cls": "int64 ()",
        "png": "list of bytes",
        "seg.npy": "ragged int16 (*, 2)",
        "txt": "list of string",
        "vec.npy": "ragged float32 (*, 3)",
    }
    pattern = str(folder / "train-{000000..000002}.tar")
    _check_records(pattern, {"train": want}, {"train": kinds}, fmt="webdataset")
    loader = dstore.to_torch(pattern, split="train", format="webdataset")
    got = sorted(loader, key=lambda r: int(r["cls"]))
    assert [r["txt"] for r in got] == want["txt"]
    assert [r["vec.npy"].shape[0] for r in got] == [0, 0, 0, 2, 2, 2, 0, 0, 0]


def test_a_field_only_in_the_last_sample_of_a_plain_tar(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    for i in range(3):
        (files / f"{i:02d}.txt").write_text(f"text {i}")
        (files / f"{i:02d}.cls").write_text(str(10 * i))
    (files / "02.json").write_text('["last", "one"]')
    (files / "02.npy").write_bytes(_npy_bytes(np.int64(5)))  # 0-d: one value
    tar = str(tmp_path / "plain.tar")
    subprocess.run(["tar", "-cf", tar, "-C", str(files), *sorted(os.listdir(files))], check=True)
    want = {
        "cls": [np.int64(0), np.int64(10), np.int64(20)],
        "txt": ["text 0", "text 1", "text 2"],
        "json": [[], [], ["last", "one"]],
        "npy": [np.zeros(0, np.int64), np.zeros(0, np.int64), np.array([5], np.int64)],
    }
    kinds = {
        "cls": "int64 ()",
        "txt": "string",  # every sample holds it: as before
        "json": "list of string",
        "npy": "ragged int64 (*,)",
    }
    _check_records(tar, {"data": want}, {"data": kinds})
    out = str(tmp_path / "cli.parquet")
    for argv in (["info", tar], ["convert", tar, out], ["verify", tar, out]):
        res = subprocess.run(cli_command(*argv), check=False, capture_output=True, text=True)
        assert res.returncode == 0, (argv, res.stderr)
        if argv[0] == "info":
            assert "ragged int64" in res.stdout and "list of string" in res.stdout, res.stdout
    with dstore.open(out) as ds:
        assert [ds["data"]["json"][i] for i in range(3)] == want["json"]


def test_two_splits_each_typed_by_its_own_samples(tmp_path):
    folder = tmp_path / "two"
    folder.mkdir()
    with wds.TarWriter(str(folder / "train-000000.tar")) as sink:
        sink.write({"__key__": "a", "cls": 0, "txt": "only here"})
        sink.write({"__key__": "b", "cls": 1})
    with wds.TarWriter(str(folder / "test-000000.tar")) as sink:
        for i in range(2):
            sink.write({"__key__": f"t{i}", "cls": 5 + i, "txt": f"test {i}"})
    want = {
        "train": {"cls": [np.int64(0), np.int64(1)], "txt": [["only here"], []]},
        "test": {"cls": [np.int64(5), np.int64(6)], "txt": ["test 0", "test 1"]},
    }
    kinds = {
        "train": {"cls": "int64 ()", "txt": "list of string"},
        "test": {"cls": "int64 ()", "txt": "string"},  # every sample holds txt: as before
    }
    _check_records(str(folder), want, kinds, fmt="webdataset")


def test_arrays_that_are_no_list_when_some_samples_lack_them_are_refused(tmp_path):
    path = str(tmp_path / "odd.tar")
    with wds.TarWriter(path) as sink:
        sink.write({"__key__": "a", "npy": np.float32(1)})
        sink.write({"__key__": "b", "npy": np.zeros(2, np.float32)})
        sink.write({"__key__": "c", "cls": 1})
    with pytest.raises(SchemaError, match=r"field 'npy': \.npy records differ"):
        dstore.open(path)


def _tar_with(path, info, data=b""):
    with tarfile.open(path, "w") as tf:
        ok = tarfile.TarInfo("0.txt")
        ok.size = 1
        tf.addfile(ok, io.BytesIO(b"a"))
        tf.addfile(info, io.BytesIO(data) if data else None)


@pytest.mark.parametrize(
    ("name", "kind", "message"),
    [
        ("1.txt", tarfile.SYMTYPE, "is a symbolic link"),
        ("1.txt", tarfile.LNKTYPE, "is a hard link"),
        ("1.txt", tarfile.CHRTYPE, "is a character device"),
        ("../1.txt", tarfile.REGTYPE, "leaves the archive"),
        ("/etc/1.txt", tarfile.REGTYPE, "absolute path"),
    ],
)
def test_hostile_members_are_refused_naming_them(tmp_path, name, kind, message):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
    path = str(tmp_path / "bad.tar")
    _tar_with(path, info, b"b" if kind == tarfile.REGTYPE else b"")
    if kind == tarfile.REGTYPE:
        info.size = 1
        _tar_with(path, info, b"b")
    with pytest.raises(CodecIOError, match=f"member '{name}' .*{message}"):
        dstore.open(path)


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_long_names_of_every_tar_format_are_read_and_sparse_members_refused(tmp_path, fmt):
    """GNU long-name and PAX path records (names past ustar's 100 bytes) are followed;
    a GNU sparse member is not a plain file and is refused by name."""
    path = str(tmp_path / "long.tar")
    prefix = "dir/" + "k" * 120 if fmt != tarfile.USTAR_FORMAT else "k"
    with tarfile.open(path, "w", format=fmt) as tf:
        for i in range(3):
            for ext, data in (("txt", f"text {i}".encode()), ("cls", str(10 * i).encode())):
                info = tarfile.TarInfo(f"{prefix}{i}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    with dstore.open(path) as ds:
        assert ds["data"]["cls"][:].tolist() == [0, 10, 20]
        assert [ds["data"]["txt"][i] for i in range(3)] == ["text 0", "text 1", "text 2"]
    if fmt == tarfile.GNU_FORMAT:
        with tarfile.open(path, "a", format=fmt) as tf:
            info = tarfile.TarInfo("z.txt")
            info.type, info.size = tarfile.GNUTYPE_SPARSE, 1
            tf.addfile(info, io.BytesIO(b"z"))
        with pytest.raises(CodecIOError, match=r"member 'z.txt' is a member of type b'S'"):
            dstore.open(path)


def test_truncated_and_corrupt_tars_are_one_line(tmp_path, written):
    path, _ = written
    shard = os.path.join(path, "train-000000.tar")
    with open(shard, "rb") as f:
        data = f.read()
    bad = str(tmp_path / "cut.tar")
    with open(bad, "wb") as f:
        f.write(data[:1500])
    with pytest.raises(CodecIOError, match="truncated tar"):
        dstore.open(bad)
    with open(bad, "wb") as f:
        f.write(data[:4000])  # inside the PNG of the first sample
    with pytest.raises(CodecIOError, match=r"member '000000.x.png' claims \d+ bytes past the end"):
        dstore.open(bad)
    with open(bad, "wb") as f:
        f.write(data[:600])  # inside the first member's padding
    with pytest.raises(CodecIOError, match="truncated tar"):
        dstore.open(bad)
    with open(bad, "wb") as f:
        f.write(data[:1024] + b"\x01" * 512 + data[1536:])  # the second member's header
    with pytest.raises(CodecIOError, match="not a tar header"):
        dstore.open(bad)


# ------------------------------------------------------------------ reading for training


def test_random_access_ranges_and_map_style_torch(written):
    torch = pytest.importorskip("torch")
    path, data = written
    with dstore.api.open(path) as ds:
        reader = ds.reader
        shard = reader.shards["train"][0]
        assert reader.shard_pieces(shard, 1024) > 1  # mid-shard entry is cheap
        ranges = reader.record_ranges("train", 1024)
        assert len(ranges) > len(reader.shards["train"])
        assert ranges[0][0] == 0 and ranges[-1][1] == 30
        np.testing.assert_array_equal(ds["train"]["x"][17:19], data["train"]["x"][17:19])
    mapped = dstore.to_torch(path, split="train", map_style=True)
    assert len(mapped) == 30
    assert int(mapped[21]["label"]) == int(data["train"]["label"][21])
    it = dstore.to_torch(path, split="train", shuffle=8, seed=0, range_mb=0.01)
    loader = torch.utils.data.DataLoader(it, batch_size=None, num_workers=2)
    labels = sorted(int(r["label"]) * 100 + int(r["x"].sum() % 97) for r in loader)
    want = sorted(
        int(lab) * 100 + int(t.sum() % 97)
        for lab, t in zip(data["train"]["label"], data["train"]["x"], strict=True)
    )
    assert labels == want


# ------------------------------------------------------------------ CLI


def test_cli_convert_info_verify_across_formats(tmp_path, label_maker_npz):
    dst = str(tmp_path / "out.wds")
    for argv in (
        ["convert", label_maker_npz, dst],
        ["verify", label_maker_npz, dst],
        ["verify", dst],
        ["info", dst],
        ["info", os.path.join(dst, "test-000000.tar")],  # one shard of a folder of two splits
    ):
        res = subprocess.run(cli_command(*argv), check=False, capture_output=True, text=True)
        assert res.returncode == 0, (argv, res.stderr)
    assert "test: 1 tar shard(s); x: x.png (png)" in res.stdout
    back = str(tmp_path / "back.h5")
    dstore.convert(dst, back)
    assert dstore.verify(label_maker_npz, back).ok
    with open(os.path.join(dst, "dstore.json")) as f:
        assert json.load(f)["format"] == "dstore-webdataset"


def test_overwrite_replaces_only_a_webdataset_output(tmp_path, tiles):
    x, _ = tiles
    dst = tmp_path / "o.wds"
    dstore.save({"x": x[:5]}, str(dst))
    dstore.save({"x": x[:7]}, str(dst), overwrite=True)
    assert read_all(str(dst))["data"]["x"].shape[0] == 7
    other = tmp_path / "notes.wds"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(dstore.DstoreError):
        dstore.save({"x": x[:5]}, str(other), overwrite=True)
    assert (other / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("member", "data", "error", "message"),
    [
        ("cls", b"x1", CodecIOError, r"sample 'b', field 'cls': not a int64 integer: b'x1'"),
        # JSON other than lists of strings is read as its text, which must be UTF-8
        ("json", b'{"a": "\xff"}', CodecIOError, r"field 'json'.*invalid UTF-8"),
        ("json", b'["\\ud800"]', CodecIOError, r"sample 'b', field 'json'.*lone surrogate"),
        ("npy", b"not numpy", CodecIOError, r"sample 'b'.*not an \.npy of format version 1 or 2"),
        ("txt", b"\xff\xfe", CodecIOError, r"field 'txt'.*invalid UTF-8"),
    ],
)
def test_a_bad_member_value_is_one_line_naming_sample_and_field(
    tmp_path, member, data, error, message
):
    path = str(tmp_path / "bad.tar")
    good = {"cls": b"1", "json": b'["a"]', "npy": _npy_bytes(np.arange(3)), "txt": b"ok"}
    with tarfile.open(path, "w") as tf:
        for key, value in (("a", good[member]), ("b", data)):
            info = tarfile.TarInfo(f"{key}.{member}")
            info.size = len(value)
            tf.addfile(info, io.BytesIO(value))
    with pytest.raises(error, match=message):
        dstore.convert(path, str(tmp_path / "out.npz"))
    assert not os.path.exists(tmp_path / "out.npz")


def _npy_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()
