"""Issue #34, item 2: a folder of shards without ``dstore.json`` (WebDataset, TFRecord,
ArrayRecord, Parquet, the Hub's ``data/`` layout) read with its format inferred
followed a file symlink out of the folder and read another dataset's records. Every
way of naming such files (a folder, a glob, a brace pattern, a folder of sources)
and every entry point that opens one (convert, open, bench, info, verify, index,
to_torch, to_tf_dataset) now refuses it in one line naming the link, unless links
are allowed (``--follow-links``, ``follow_links=True``); so do record indexes
linked in from outside. The registry drives the formats."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import dstore
import dstore.api
from dstore.cli import main
from dstore.errors import UnsafeInputError, UnsafePathError
from dstore.registry import codecs_with, default_extension
from dstore.testing import read_all

pytest.importorskip("imagecodecs")

SHARDED = codecs_with(lambda c: c.sharded)
SECRET_SHIFT = 1000  # the outside dataset's k values: any of them read is a leak


def _data(tiles, shift: int = 0) -> dict:
    x, onehot = tiles
    y = onehot.argmax(axis=1).astype(np.int64)
    return {"train": {"x": x, "y": y, "k": np.arange(len(x), dtype=np.int64) + shift}}


def _shard_names(path: str) -> list[str]:
    with open(os.path.join(path, "dstore.json")) as f:
        return [s["file"] for s in json.load(f)["splits"]["train"]["shards"]]


def _linked_folder(tmp_path, tiles, fmt: str, sub: str = "") -> tuple[str, str]:
    """``f/`` (or ``f/<sub>/``): a folder of shards dstore did not describe (no manifest,
    no extension), one of which is a symlink to the same-named shard of another
    dataset outside it. Returns the folder and the link's name."""
    ext = default_extension(fmt)
    mine, outside = str(tmp_path / f"mine{ext}"), str(tmp_path / "outside" / f"o{ext}")
    os.makedirs(tmp_path / "outside")
    dstore.save(_data(tiles), mine, shard_mb="0.05")
    dstore.save(_data(tiles, SECRET_SHIFT), outside, shard_mb="0.05")
    folder = tmp_path / "f"
    shards = folder / sub if sub else folder
    shards.mkdir(parents=True)
    names = _shard_names(mine)
    assert names == _shard_names(outside) and len(names) > 2
    for name in names:
        shutil.copy(os.path.join(mine, name), shards / name)
    os.remove(shards / names[1])
    os.symlink(os.path.join(outside, names[1]), shards / names[1])
    return str(folder), names[1]


def _one_refusal(capsys, argv: list[str], link: str) -> None:
    assert main(argv) == 2, argv
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("UnsafeInputError: "), err
    assert link in err[0] and "outside the" in err[0] and "--follow-links" in err[0], err


def _refused_by_every_entry_point(capsys, tmp_path, spec: str, link: str, fmt: str) -> None:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    _one_refusal(capsys, ["convert", spec, str(out / "o.npz")], link)
    _one_refusal(capsys, ["info", spec], link)
    _one_refusal(capsys, ["verify", spec], link)
    other = str(tmp_path / "other.npz")
    dstore.save({"train": {"k": np.arange(3)}}, other)
    _one_refusal(capsys, ["verify", other, spec], link)
    assert main(["bench", spec, "--formats", "npz", "--dtypes", "keep", "--no-probe"]) == 2
    assert link in capsys.readouterr().err
    assert os.listdir(out) == []
    with pytest.raises(UnsafeInputError, match=link):
        dstore.open(spec)
    with pytest.raises(UnsafeInputError, match=link):
        dstore.convert(spec, str(out / "o2.npz"))
    with pytest.raises(UnsafeInputError, match=link):
        dstore.api.check(spec)
    pytest.importorskip("torch")
    with pytest.raises(UnsafeInputError, match=link):  # a training reader needs the format
        list(dstore.to_torch(spec, "train", format=fmt))
    assert os.listdir(out) == []


def _followed(tmp_path, spec: str) -> None:
    """With links allowed, the linked shard's records are read (the outside values)."""
    got = read_all(dstore.convert(spec, str(tmp_path / "followed.npz"), follow_links=True).dst)
    (fields,) = got.values()
    # a WebDataset read without its manifest names a field by its member's suffix (k.cls)
    k = np.asarray(next(v for n, v in fields.items() if n.split(".")[0] == "k"))
    assert (k >= SECRET_SHIFT).any() and (k < SECRET_SHIFT).any()


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_folder_of_shards_with_one_linked_in_is_refused_everywhere(
    tmp_path, tiles, capsys, fmt, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    _, link = _linked_folder(tmp_path, tiles, fmt)
    _refused_by_every_entry_point(capsys, tmp_path, "f", link, fmt)
    _one_refusal(capsys, ["convert", "f", "out/o.npz", "--from", fmt], link)
    _followed(tmp_path, "f")


def test_the_hubs_data_layout_with_a_shard_linked_in_is_refused(tmp_path, tiles, capsys):
    if "parquet" not in SHARDED:
        pytest.skip("parquet is not registered here")
    folder, link = _linked_folder(tmp_path, tiles, "parquet", sub="data")
    _refused_by_every_entry_point(capsys, tmp_path, folder, link, "parquet")
    # the folder named as Parquet: the Hub's reader lists data/ itself
    _one_refusal(capsys, ["info", folder, "--from", "parquet"], link)


@pytest.mark.parametrize("fmt", SHARDED)
def test_a_glob_matching_a_shard_linked_in_is_refused(tmp_path, tiles, capsys, fmt):
    folder, link = _linked_folder(tmp_path, tiles, fmt)
    spec = os.path.join(folder, "*" + link[-6:])  # the shards' common ending
    _one_refusal(capsys, ["convert", spec, str(tmp_path / "o.npz")], link)
    _one_refusal(capsys, ["info", spec], link)


def test_a_brace_pattern_naming_a_shard_linked_in_is_refused(tmp_path, tiles, capsys):
    if "webdataset" not in SHARDED:
        pytest.skip("webdataset is not registered here")
    folder, link = _linked_folder(tmp_path, tiles, "webdataset")
    n = len([f for f in os.listdir(folder) if f.endswith(".tar")])
    spec = os.path.join(folder, f"train-{{000000..{n - 1:06d}}}.tar")
    _one_refusal(capsys, ["info", spec], link)
    _one_refusal(capsys, ["convert", spec, str(tmp_path / "o.npz")], link)
    with pytest.raises(UnsafeInputError, match=link):
        dstore.open(spec, format="webdataset")


def test_a_folder_of_sources_with_a_file_linked_in_is_refused(tmp_path, capsys, monkeypatch):
    """The same rule for many files read as one dataset (a folder, a glob of them)."""
    monkeypatch.chdir(tmp_path)
    os.makedirs("feats")
    os.makedirs("elsewhere")
    for name, folder in (("a.json", "feats"), ("b.json", "elsewhere")):
        with open(os.path.join(folder, name), "w") as f:
            json.dump([{"x": 1.0}, {"x": 2.0}], f)
    os.symlink(os.path.abspath("elsewhere/b.json"), "feats/b.json")
    _one_refusal(capsys, ["convert", "feats", "o.npz"], "b.json")
    _one_refusal(capsys, ["convert", "feats/*.json", "o.npz"], "b.json")
    assert dstore.convert("feats", "o.npz", follow_links=True).records == 4


def _tf_folder(tmp_path, tiles) -> tuple[str, str]:
    """A folder of TFRecord shards dstore did not describe, and one shard's name."""
    mine = str(tmp_path / "mine.tfrecords")
    dstore.save(_data(tiles), mine, shard_mb="0.05")
    folder = tmp_path / "tf"
    folder.mkdir()
    names = _shard_names(mine)
    for name in names:
        shutil.copy(os.path.join(mine, name), folder / name)
    return str(folder), names[0]


def test_dstore_index_refuses_a_shard_linked_in(tmp_path, tiles, capsys):
    if "tfrecord" not in SHARDED:
        pytest.skip("tfrecord is not registered here")
    folder, link = _linked_folder(tmp_path, tiles, "tfrecord")
    _one_refusal(capsys, ["index", folder], link)
    assert not os.path.exists(os.path.join(folder, ".dstore-index"))
    assert main(["index", folder, "--follow-links"]) == 0


def test_an_index_linked_in_from_outside_is_refused(tmp_path, tiles, capsys):
    """A record index is read because of the folder, not named by the user: an index
    that is a link out of the shard's folder is refused as a shard would be."""
    folder, name = _tf_folder(tmp_path, tiles)
    assert main(["index", folder, "--out", str(tmp_path / "elsewhere")]) == 0
    capsys.readouterr()
    for where in (os.path.join(folder, ".dstore-index"), folder):
        os.makedirs(where, exist_ok=True)
        os.symlink(tmp_path / "elsewhere" / (name + ".idx"), os.path.join(where, name + ".idx"))
        _one_refusal(capsys, ["info", folder, "--from", "tfrecord"], name + ".idx")
        with pytest.raises(UnsafeInputError, match=name):
            dstore.open(os.path.join(folder, name))
        os.remove(os.path.join(where, name + ".idx"))
    with dstore.open(folder, format="tfrecord", follow_links=True) as ds:
        assert ds["train"]["k"][3] == 3


def test_dstore_index_never_writes_through_a_linked_index_folder(tmp_path, tiles):
    folder, _ = _tf_folder(tmp_path, tiles)
    outside = tmp_path / "outside-indexes"
    outside.mkdir()
    os.symlink(outside, os.path.join(folder, ".dstore-index"))
    with pytest.raises(UnsafePathError, match=r"\.dstore-index"):
        dstore.api.index([folder])
    assert os.listdir(outside) == []


@pytest.mark.tf
@pytest.mark.parametrize("fmt", SHARDED)
def test_training_readers_infer_a_plain_folders_format(tmp_path, tiles, fmt):
    """A folder of one format's shards without a manifest or an extension: to_torch and
    to_tf_dataset read it as dstore.open does, without format= (they raised 'no format
    claims this extension'); with a shard linked in from outside, they refuse it."""
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    folder, link = _linked_folder(tmp_path, tiles, fmt)
    with pytest.raises(UnsafeInputError, match=link):
        list(dstore.to_torch(folder, "train"))
    with pytest.raises(UnsafeInputError, match=link):
        list(dstore.to_tf_dataset(folder, "train"))
    os.remove(os.path.join(folder, link))  # the folder's own shard back in place of the link
    shutil.copy(os.path.join(tmp_path / f"mine{default_extension(fmt)}", link), folder)
    torch_records = list(dstore.to_torch(folder, "train"))
    names = sorted(torch_records[0])  # the records' fields (open adds each record's source)
    key = next(n for n in names if n.split(".")[0] == "k")  # the records' numbers
    with dstore.open(folder) as ds:
        want = {n: ds["train"][n][:] for n in names}
    tf_records = [
        {n: v.numpy() for n, v in r.items()} for r in dstore.to_tf_dataset(folder, "train")
    ]

    def number(value: object) -> int:
        return int(np.asarray(value).reshape(-1)[0])

    want_keys = [number(v) for v in want[key]]
    for records in (torch_records, tf_records):
        # every record once, equal to open's (the order across shards is the reader's)
        by_key = sorted(records, key=lambda r: number(r[key]))
        assert [number(r[key]) for r in by_key] == sorted(want_keys)
        order = np.argsort(want_keys, kind="stable")
        for n in names:
            expected = [want[n][i] for i in order]
            if isinstance(expected[0], bytes):
                # a foreign WebDataset's PNG members: open gives the member, the training
                # readers their bytes as they deliver them; both give one per record
                assert all(len(r[n]) for r in by_key), n
            else:
                got = np.stack([np.asarray(r[n]) for r in by_key])
                np.testing.assert_array_equal(got, np.stack(expected))


@pytest.mark.tf
@pytest.mark.parametrize("fmt", SHARDED)
def test_to_tf_dataset_refuses_a_shard_linked_in(tmp_path, tiles, fmt):
    pytest.importorskip("tensorflow")
    folder, link = _linked_folder(tmp_path, tiles, fmt)
    with pytest.raises(UnsafeInputError, match=link):
        list(dstore.to_tf_dataset(folder, "train", format=fmt))


_FIFO_CHILD = r"""
import sys
from dstore.cli import main
folder, out = sys.argv[1], sys.argv[2]
print(main(["info", folder]), main(["convert", folder, out]))
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("described", [False, True], ids=["no manifest", "manifest"])
@pytest.mark.parametrize("fmt", SHARDED)
def test_a_fifo_among_a_folders_shards_is_refused_not_waited_on(tmp_path, tiles, fmt, described):
    """A FIFO with a shard's name: opening it blocked for ever (info, convert; Arrow's
    open cannot even be interrupted). Run in a child so that a hang fails the test."""
    import subprocess
    import sys

    ext = default_extension(fmt)
    mine = str(tmp_path / f"mine{ext}")
    dstore.save(_data(tiles), mine, shard_mb="0.05")
    names = _shard_names(mine)
    folder = tmp_path / "f"
    shutil.copytree(mine, folder)
    if not described:
        os.remove(folder / "dstore.json")
        shutil.rmtree(folder / ".dstore-index", ignore_errors=True)
    os.remove(folder / names[1])
    os.mkfifo(folder / names[1])
    out = tmp_path / "o.npz"
    child = subprocess.run(
        [sys.executable, "-c", _FIFO_CHILD, str(folder), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert child.stdout.split() == ["2", "2"], child.stderr
    err = [ln for ln in child.stderr.splitlines() if ln.strip()]
    assert len(err) == 2 and all(names[1] in ln and "not a regular file" in ln for ln in err)
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["f", os.path.basename(mine)]


@pytest.mark.parametrize("fmt", SHARDED)
def test_to_torch_follows_a_link_when_told(tmp_path, tiles, fmt):
    """to_torch(folder, follow_links=True) on a plain folder with a shard linked in reads
    it (it was refused with 'follow_links=True reads it': the format's inference walked
    the folder without the flag)."""
    pytest.importorskip("torch")
    folder, _ = _linked_folder(tmp_path, tiles, fmt)
    records = list(dstore.to_torch(folder, "train", follow_links=True))
    key = next(n for n in records[0] if n.split(".")[0] == "k")
    k = np.array([int(np.asarray(r[key]).reshape(-1)[0]) for r in records])
    assert (k >= SECRET_SHIFT).any() and (k < SECRET_SHIFT).any()
