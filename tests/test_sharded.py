"""The sharded-directory container (dstore.sharding) and the engine that feeds it.

TFRecord is the container's first user, so these tests prove that moving the
container out of the codec changed no byte, and that the container itself
(names, plan, .part commit, manifest, journal) holds for any record kind.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import dstore
from dstore.engine.journal import JOURNAL, append_journal, read_journal, still_good
from dstore.sharding import open_for_write, shard_name
from dstore.testing import assert_datasets_equal, file_digests, read_all

pytest.importorskip("imagecodecs")

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
sys.path.insert(0, GOLDEN)
from generate import CASE_OPTIONS, golden_data


def _golden_tfrecords() -> list[str]:
    return sorted(
        os.path.join(GOLDEN, version, name)
        for version in os.listdir(GOLDEN)
        if os.path.isdir(os.path.join(GOLDEN, version)) and not version.startswith("__")
        for name in os.listdir(os.path.join(GOLDEN, version))
        if name.endswith(".tfrecords")
    )


@pytest.mark.parametrize("golden", _golden_tfrecords(), ids=os.path.basename)
def test_tfrecord_output_is_byte_identical_to_the_golden_files(tmp_path, golden):
    """Same data, same options: every shard equals the committed file, and so does
    every manifest key the golden file has, except the version of dstore."""
    case = os.path.basename(golden).split(".", 1)[0]
    out = tmp_path / os.path.basename(golden)
    dstore.save(golden_data()[case], out, **CASE_OPTIONS.get(case, {}))
    want, got = file_digests(golden), file_digests(out)
    # record indexes came after the first golden files, beside the shards; they moved into
    # .dstore-index/ since (issue #34: a train-* glob took them for shards): same bytes;
    # the Croissant card every folder output holds came later still (tests/test_card.py)
    assert not [f for f in got if f.endswith(".idx") and not f.startswith(".dstore-index/")]
    want = {(f".dstore-index/{f}" if f.endswith(".idx") else f): d for f, d in want.items()}
    new_indexes = {f for f in got if f.endswith(".idx") and f not in want}
    assert "croissant.json" in got
    assert sorted(want) == sorted(set(got) - new_indexes - {"croissant.json"})
    with open(os.path.join(golden, "dstore.json")) as f:
        old = json.load(f)
    new = json.loads((out / "dstore.json").read_text())
    old.pop("dstore_version"), new.pop("dstore_version")
    new["schema"].pop("digest", None)  # stored schemas gained a digest after some of these
    old["schema"].pop("digest", None)
    # keys manifests gained since (libraries, run) are new; the rest must not change
    assert {k: new[k] for k in old if k != "splits"} == {
        k: v for k, v in old.items() if k != "splits"
    }
    pngs = any(e["encoding"] == "png" for fs in new["fields"].values() for e in fs.values())
    if pngs and old.get("libraries") != new["libraries"]:
        # PNG bytes are the encoder's (recorded since in "libraries"; tiles_fpng holds the
        # current encoder's): the same shards and record counts, the values compared by
        # test_golden.py
        assert "fpng" not in old.get("libraries", {}).get("png", ""), old.get("libraries")
        assert {
            s: [(e["file"], e["records"]) for e in i["shards"]] for s, i in new["splits"].items()
        } == {s: [(e["file"], e["records"]) for e in i["shards"]] for s, i in old["splits"].items()}
        return
    if new_indexes:
        assert new_indexes == {
            e["index"]["file"] for i in new["splits"].values() for e in i["shards"]
        }
        for info in new["splits"].values():
            for e in info["shards"]:
                e.pop("index")
    for info in old["splits"].values():  # the index files' new place, as above
        for e in info["shards"]:
            if "index" in e:
                e["index"]["file"] = ".dstore-index/" + e["index"]["file"]
    assert new["splits"] == old["splits"]  # names, counts, sizes and sha256 of every shard
    shards = [f for f in want if f != "dstore.json"]
    assert shards and {f: want[f] for f in shards} == {f: got[f] for f in shards}


@pytest.mark.parametrize("shard_kb", [0.3, 0.7, 2, 5, 1000])
def test_ragged_and_string_fields_cut_across_gzip_shards(tmp_path, shard_kb):
    """Batches of values + offsets are cut at shard boundaries (once a TypeError), in
    GZIP shards (plain shards of every sharded format: the sharded suite's
    test_variable_size_fields_cut_across_shards)."""
    compression = "gzip"
    rng = np.random.default_rng(int(shard_kb * 10))
    n = 257
    data = {
        "train": {
            "names": [f"record {i} " + "é" * (i % 7) for i in range(n)],
            "blobs": [bytes(rng.integers(0, 256, i % 5, dtype=np.uint8)) for i in range(n)],
            "boxes": [rng.random((i % 6, 4)).astype(np.float32) for i in range(n)],
            "y": rng.integers(0, 9, n),
        }
    }
    out = tmp_path / "cut.tfrecords"
    # small batches so that batch edges and shard edges fall in different places
    src = tmp_path / "src.npz"
    dstore.save(data, src)
    dstore.convert(
        src, out, options={"shard_mb": shard_kb / 1024, "compression": compression}, batch_bytes=900
    )
    shards = [f for f in os.listdir(out) if f.endswith(".tfrecord")]
    manifest = json.loads((out / "dstore.json").read_text())
    assert len(shards) == len(manifest["splits"]["train"]["shards"])
    assert all(
        shard_name("train", i, len(shards), ".tfrecord") in shards for i in range(len(shards))
    )
    assert_datasets_equal(read_all(src), read_all(out))
    assert dstore.api.check(out).ok


def test_shard_names_escape_the_split():
    assert shard_name("train", 3, 17, ".tfrecord") == "train-00003-of-00017.tfrecord"
    assert shard_name("a/b", 0, 1, ".tar") == "a%2Fb-00000-of-00001.tar"


def test_open_for_write_commits_only_complete_files(tmp_path):
    with open_for_write(str(tmp_path), "done.bin") as f:
        f.write(b"abc")
        assert os.listdir(tmp_path) == ["done.bin.part"]  # not under its name until complete
    assert (tmp_path / "done.bin").read_bytes() == b"abc"
    with pytest.raises(RuntimeError), open_for_write(str(tmp_path), "failed.bin") as f:
        f.write(b"half")
        raise RuntimeError("killed")
    assert os.listdir(tmp_path) == ["done.bin"]  # neither the file nor its .part


def test_journal_keeps_finished_shards_and_ignores_a_torn_line(tmp_path):
    with open_for_write(str(tmp_path), "s-00000-of-00002.x") as f:
        f.write(b"shard zero")
    entry = {
        "file": "s-00000-of-00002.x",
        "records": 1,
        "bytes": 10,
        "sha256": dstore.fs.sha256_file(str(tmp_path / "s-00000-of-00002.x"))[1],
    }
    journal = str(tmp_path / JOURNAL)
    append_journal(journal, {"journal": 1, "plan": []})
    append_journal(journal, entry)
    with open(journal, "a") as f:
        f.write('{"file": "s-00001-of-0')  # killed mid-line
    header, done = read_journal(str(tmp_path))
    assert header == {"journal": 1, "plan": []}
    assert done == {entry["file"]: entry}
    assert still_good(str(tmp_path), entry)
    (tmp_path / "s-00000-of-00002.x").write_bytes(b"shard zerO")
    assert not still_good(str(tmp_path), entry)  # same size, other bytes
