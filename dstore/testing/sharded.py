"""The shared suite every sharded format passes: subclass :class:`ShardedCodecSuite` and
provide ``codec`` (a registered codec whose class says ``sharded = True``).

As zarr's stores inherit ``StoreTests``, every format written as a folder of shards
inherits these: two runs write the same bytes; record ranges, random access and
variable-size fields across shard edges; the record index where the format keeps one
(its shard writer's ``record_index``); a damaged manifest is one error naming the
file; resume after an interruption, a SIGKILL or a SIGINT gives the bytes of a plain
run (:mod:`.sharded_resume`, :mod:`.sharded_kills`); Dask writes them too
(:mod:`.sharded_dask`); the shard cache reads every record once, within its limit
(:mod:`.sharded_cache`). Built-in formats run it from ``tests/test_sharded_suite.py``;
``tests/test_toy_format.py`` defines a format in a test module and runs it there.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
from typing import Any

import numpy as np
import pytest

from .. import api
from ..abc import Codec
from ..errors import DstoreError
from ..model import Bytes, Ragged, String
from ..sharding import ShardedDirectoryReader
from .checks import assert_datasets_equal, file_digests, read_all
from .data import sharded_data
from .sharded_base import ShardedSuiteBase, shard_options, torch_dataset
from .sharded_cache import CacheTests
from .sharded_dask import DaskTests
from .sharded_kills import KillTests

__all__ = ["MANIFEST_DAMAGE", "ShardedCodecSuite"]

#: How the suite damages a manifest; each must be one error naming the file.
MANIFEST_DAMAGE = ["truncated", "count", "listed-twice", "outside", "absolute", "missing-shard"]


def _damage(path: str, manifest: dict[str, Any], damage: str, outside: str) -> str:
    """Damage the dataset at ``path`` (whose manifest is ``manifest``) as ``damage``
    says; the name the error must give."""
    shards = manifest["splits"]["train"]["shards"]
    victim = shards[1]
    if damage == "truncated":
        with open(os.path.join(path, "dstore.json"), "rb") as f:
            raw = f.read()
        with open(os.path.join(path, "dstore.json"), "wb") as f:
            f.write(raw[: len(raw) // 2])
        return "dstore.json"
    if damage == "missing-shard":
        os.remove(os.path.join(path, victim["file"]))
        return str(victim["file"])
    if damage == "count":
        victim["records"] += 1
    elif damage == "listed-twice":  # counts raised to match: only the stored schema can tell
        shards.append(dict(shards[0]))
        manifest["splits"]["train"]["count"] += shards[0]["records"]
        manifest["schema"]["splits"]["train"]["count"] += shards[0]["records"]
    else:  # a valid shard outside the folder, which must never be read
        shutil.copy(os.path.join(path, victim["file"]), outside)
        victim["file"] = outside if damage == "absolute" else "../" + os.path.basename(outside)
    ShardedSuiteBase.write_manifest(path, manifest)
    return "dstore.json"


class ShardedCodecSuite(KillTests, CacheTests, DaskTests):
    """Tests of one sharded format; subclasses provide the ``codec`` fixture."""

    def test_two_runs_write_the_same_bytes(self, codec: Codec, tmp_path: Any) -> None:
        """The same data and options, other batch edges (and encoding threads): the same
        files, byte for byte; the records read back equal, element by element."""
        data = sharded_data()
        options = shard_options(codec, data)
        src = self.source(tmp_path, data)
        a, b = self.out(tmp_path, codec, "a"), self.out(tmp_path, codec, "b")
        self.convert(codec, src, a, options)
        other = {**options, "workers": "1"} if "workers" in self.option_names(codec) else options
        self.convert(codec, src, b, other, batch_bytes=1500)
        assert file_digests(a) == file_digests(b)
        assert len(self.shard_edges(a, "train")) - 1 >= 4, self.manifest(a)["splits"]
        assert_datasets_equal(data, read_all(a))

    def test_record_ranges_and_random_access_across_shards(
        self, codec: Codec, tmp_path: Any
    ) -> None:
        data = sharded_data()
        path = self.out(tmp_path, codec)
        api.save(data, path, **shard_options(codec, data))
        with api.open_reader(path) as reader:
            for split, fields in data.items():
                edges = self.shard_edges(path, split)
                for target in (1 << 23, 300):  # whole shards; pieces where entering is cheap
                    ranges = reader.record_ranges(split, target)
                    assert ranges[0][0] == 0 and ranges[-1][1] == len(fields["k"]), ranges
                    assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(ranges))
                    assert not [(a, b) for a, b in ranges for e in edges if a < e < b], edges
                    got = [
                        batch
                        for lo, hi in ranges
                        for batch in reader.iter_batches(split, start=lo, stop=hi, batch_rows=7)
                    ]
                    for name, column in fields.items():
                        joined = np.concatenate([g[name] for g in got])
                        np.testing.assert_array_equal(joined, column)
        with api.open(path) as ds:
            f, k, want = ds["train"]["f"], ds["train"]["k"], data["train"]
            for e in self.shard_edges(path, "train")[1:-1]:
                np.testing.assert_array_equal(f[e - 2 : e + 3], want["f"][e - 2 : e + 3])
                assert int(k[e]) == e and int(k[e - 1]) == e - 1
            np.testing.assert_array_equal(f[3:90:11], want["f"][3:90:11])
            np.testing.assert_array_equal(f[-1], want["f"][-1])

    @pytest.mark.parametrize("per_shard", [2, 7, 60, 1000])
    def test_variable_size_fields_cut_across_shards(
        self, codec: Codec, tmp_path: Any, per_shard: int
    ) -> None:
        """Batches of values and offsets (strings, bytes, ragged boxes: those the format
        stores) cut where shards end, in batches whose edges fall elsewhere."""
        rng = np.random.default_rng(per_shard)
        n = 257
        fields: dict[str, Any] = {"y": rng.integers(0, 9, n)}
        if String in codec.kinds:
            fields["names"] = [f"record {i} " + "é" * (i % 7) for i in range(n)]
        if Bytes in codec.kinds:
            fields["blobs"] = [bytes(rng.integers(0, 256, i % 5, dtype=np.uint8)) for i in range(n)]
        if Ragged in codec.kinds:
            fields["boxes"] = [rng.random((i % 6, 4)).astype(np.float32) for i in range(n)]
        data = {"train": fields}
        src = self.source(tmp_path, data)
        out = self.out(tmp_path, codec)
        self.convert(codec, src, out, shard_options(codec, data, per_shard), batch_bytes=900)
        listed = [s["file"] for s in self.manifest(out)["splits"]["train"]["shards"]]
        assert len(listed) == -(-n // per_shard) and len(set(listed)) == len(listed), listed
        assert type(codec).foreign_files(out) == []  # the folder holds what it lists
        assert_datasets_equal(read_all(src), read_all(out))
        assert api.check(out).ok

    def test_record_index_where_the_format_keeps_one(self, codec: Codec, tmp_path: Any) -> None:
        """A format whose shard writer keeps a ``record_index`` lists one per shard,
        each line a frame, the frames tiling the shard; a damaged one is named by
        ``check`` and by the read it would misdirect. Other formats list none."""
        data = sharded_data()
        path = self.out(tmp_path, codec)
        api.save(data, path, **shard_options(codec, data))
        with api.open_reader(path) as reader:
            writer = codec.shard_writer(reader.schema, [])
        entries = [s for info in self.manifest(path)["splits"].values() for s in info["shards"]]
        if not getattr(writer, "record_index", False) or getattr(writer, "compression", None):
            assert not [s for s in entries if "index" in s]
            assert not [f for f in file_digests(path) if f.endswith(".idx")]
            return
        for s in entries:
            index = os.path.join(path, s["index"]["file"])
            # in the folder's .dstore-index/, where no `train-*` or `*.tfrecord*` glob looks
            assert s["index"]["file"] == ".dstore-index/" + s["file"] + ".idx"
            table = np.loadtxt(index, dtype=np.int64, ndmin=2)  # DALI's `offset length` lines
            assert len(table) == s["records"]
            assert table[0, 0] == 0 and (table[1:, 0] == table[:-1].sum(axis=1)).all()
            assert table[-1].sum() == os.path.getsize(os.path.join(path, s["file"]))
        with api.open_reader(path) as reader:
            assert isinstance(reader, ShardedDirectoryReader), type(reader)
            assert reader.indexed() and reader.sequential_reason is None
        second = self.manifest(path)["splits"]["train"]["shards"][1]
        index = os.path.join(path, second["index"]["file"])
        with open(index) as f:
            lines = f.read().splitlines()
        lines[2] = lines[2].replace(" ", "1 ", 1)  # an offset off by a digit
        with open(index, "w") as f:
            f.write("\n".join(lines) + "\n")
        assert not api.check(path).ok
        first = self.shard_edges(path, "train")[1]
        with api.open(path) as ds, pytest.raises(DstoreError, match=r"\.idx"):
            ds["train"]["f"][first + 3]

    def test_single_records_at_random(self, codec: Codec, tmp_path: Any) -> None:
        """A map-style torch dataset reads any record alone, or is refused in one line
        naming why when the format reads its shards in order."""
        torch = pytest.importorskip("torch")
        data = sharded_data()
        path = self.out(tmp_path, codec)
        api.save(data, path, **shard_options(codec, data))
        with api.open_reader(path) as reader:
            reason = reader.sequential_reason
        if reason is not None:
            with pytest.raises(DstoreError, match=re.escape(reason)):
                torch_dataset(path, "train", map_style=True)
            return
        ds = torch_dataset(path, "train", map_style=True)
        want = data["train"]
        assert len(ds) == len(want["k"])
        for i in (33, 0, len(want["k"]) - 1, 20, 19, 57):
            rec = ds[i]
            assert int(rec["k"]) == i and torch.equal(rec["f"], torch.from_numpy(want["f"][i]))

    @pytest.mark.parametrize("damage", MANIFEST_DAMAGE)
    def test_a_damaged_manifest_is_one_error_naming_the_file(
        self, codec: Codec, tmp_path: Any, damage: str
    ) -> None:
        """Reading, converting and checking fail in one line naming the manifest (or the
        shard it lists that is gone); a name leading out of the folder is never read;
        nothing is left behind."""
        data = sharded_data()
        path = self.out(tmp_path, codec)
        api.save(data, path, **shard_options(codec, data))
        named = _damage(path, self.manifest(path), damage, str(tmp_path / "outside"))
        with pytest.raises(DstoreError) as err:
            read_all(path)
        assert named in str(err.value) and "\n" not in str(err.value), err.value
        copy = str(tmp_path / "copy.npz")
        with pytest.raises(DstoreError, match=re.escape(named)):
            api.convert(path, copy)
        assert not os.path.exists(copy) and not self.leftovers(copy)
        try:
            report = api.check(path)
        except DstoreError as e:
            assert named in str(e), e
        else:
            assert not report.ok
            assert [ln for ln in report.lines() if "MISMATCH" in ln and named in ln]

    def test_a_wrong_sha256_is_named_by_check(self, codec: Codec, tmp_path: Any) -> None:
        data = sharded_data()
        path = self.out(tmp_path, codec)
        api.save(data, path, **shard_options(codec, data))
        manifest = self.manifest(path)
        victim = manifest["splits"]["train"]["shards"][1]
        victim["sha256"] = "0" * 64
        self.write_manifest(path, manifest)
        lines = api.check(path).lines()
        bad = [ln for ln in lines if "MISMATCH" in ln]
        assert len(bad) == 1 and victim["file"] in bad[0] and "sha256" in bad[0], lines

    def test_a_shard_of_another_size_is_refused_by_reads_at_positions(
        self, codec: Codec, tmp_path: Any
    ) -> None:
        """A record read at its position, like a range, is read only from a shard of the
        size its manifest lists: a shard grown by a few bytes is one error naming it
        (Parquet's footer, at the end, refuses it first)."""
        data = sharded_data()
        path = self.out(tmp_path, codec)
        api.save(data, path, **shard_options(codec, data))
        with api.open_reader(path) as reader:
            if reader.sequential_reason is not None:
                pytest.skip(f"{codec.name} reads its shards in order")
        shards = self.manifest(path)["splits"]["train"]["shards"]
        victim = os.path.join(path, shards[1]["file"])
        with open(victim, "ab") as f:
            f.write(b"\0" * 7)
        record = int(shards[0]["records"])  # the first record of the grown shard
        with pytest.raises(DstoreError) as err:
            torch_dataset(path, "train", map_style=True)[record]
        message = str(err.value)  # the manifest's size, or the format's own check first
        assert victim in message and "\n" not in message, message
