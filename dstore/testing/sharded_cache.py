"""A sharded dataset read from a URL through the shard cache (``to_torch(url,
cache_dir=, cache_limit=)``, :mod:`dstore.sharding.cache`), on ``file://`` and fsspec's
``memory://``: every record once and in order, later epochs served by verified copies,
the cache within its limit, deleting only its own files; copies changed, downloads
unlike the manifest and datasets rewritten at the same URL are never served."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .. import api
from ..abc import Codec
from ..errors import CodecIOError, DstoreError
from ..sharding.cache import FOLDER
from .checks import file_digests
from .data import sharded_data
from .sharded_base import ShardedSuiteBase, shard_options, torch_dataset

__all__ = ["CacheTests"]


def _files(root: str) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes)."""
    out = {}
    for name in file_digests(root):
        with open(os.path.join(root, name), "rb") as f:
            out[name] = f.read()
    return out


def _upload(path: str, url: str) -> None:
    """The files of the local folder ``path`` written at ``url`` (as a user copies a
    folder to a bucket), over what is there."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    for name, data in _files(path).items():
        fs.pipe_file(f"{root}/{name}", data)


def _copies(cache: str, shards: list[str]) -> dict[str, str]:
    """The shard copies in a cache folder (``<key>-<shard name>``, wherever the cache
    keeps them) by shard name: their paths."""
    found = {}
    for root, _, files in os.walk(cache):
        for name in files:
            shard = next((s for s in shards if name.endswith("-" + s)), None)
            if shard is not None and not name.endswith((".part", ".json")):
                found[shard] = os.path.join(root, name)
    return found


def _size(copies: dict[str, str]) -> int:
    return sum(os.path.getsize(p) for p in copies.values())


class CacheTests(ShardedSuiteBase):
    """The shard cache (a mixin of the sharded suite)."""

    def remote(self, codec: Codec, root: Any, scheme: str, data: Any = None) -> str:
        """``data`` (by default the train split of the suite's data) written as the split
        ``train`` under ``root``, as a URL."""
        pytest.importorskip("torch")
        pytest.importorskip("fsspec")
        train = {"train": sharded_data()["train"] if data is None else data}
        local = self.out(root, codec, "local")
        os.makedirs(str(root), exist_ok=True)
        # shards of 20 records whatever the records: other records get the same shard names
        api.save(train, local, **shard_options(codec, train))
        if scheme == "file":
            return Path(local).absolute().as_uri()
        url = f"memory:///dstore-suite-{uuid.uuid4().hex}/{os.path.basename(local)}"
        _upload(local, url)
        return url

    def shards(self, url: str) -> list[str]:
        """The train shards a dataset at ``url`` lists."""
        import fsspec

        fs, root = fsspec.core.url_to_fs(url)
        manifest = json.loads(fs.cat_file(f"{root}/dstore.json"))
        return [s["file"] for s in manifest["splits"]["train"]["shards"]]

    @staticmethod
    def epoch(ds: Any, want: Any) -> None:
        """One pass over a torch dataset: every record once, in order, equal."""
        got = list(ds)
        assert [int(r["k"]) for r in got] == [int(k) for k in want["k"]]
        np.testing.assert_array_equal(np.stack([r["f"].numpy() for r in got]), want["f"])

    @pytest.mark.parametrize("scheme", ["file", "memory"])
    def test_the_cache_serves_a_second_epoch(
        self, codec: Codec, tmp_path: Any, scheme: str
    ) -> None:
        """Each shard copied once; with every shard at the URL damaged since, the next
        epoch still reads the copies, and a read without the cache fails in dstore's
        words."""
        url = self.remote(codec, tmp_path, scheme)
        names, want, cache = self.shards(url), sharded_data()["train"], str(tmp_path / "cache")
        assert len(names) >= 4
        ds = torch_dataset(url, "train", cache_dir=cache)
        self.epoch(ds, want)
        assert sorted(_copies(cache, names)) == sorted(names)
        import fsspec

        fs, root = fsspec.core.url_to_fs(url)
        for name in names:
            fs.pipe_file(f"{root}/{name}", b"\0" * 64)
        self.epoch(ds, want)
        with pytest.raises(DstoreError):
            list(torch_dataset(url, "train"))

    @pytest.mark.parametrize("scheme", ["file", "memory"])
    def test_the_cache_stays_within_its_limit(
        self, codec: Codec, tmp_path: Any, scheme: str
    ) -> None:
        """Room for two and a half shards: read in order, the two read last are what the
        cache holds; the next epoch fetches the others again and still fits."""
        url = self.remote(codec, tmp_path, scheme)
        names, want, cache = self.shards(url), sharded_data()["train"], str(tmp_path / "cache")
        local = self.out(tmp_path, codec, "local")
        sizes = [os.path.getsize(os.path.join(local, n)) for n in names]
        limit = sizes[-1] + sizes[-2] + max(sizes) // 2
        ds = torch_dataset(url, "train", cache_dir=cache, cache_limit=limit)
        self.epoch(ds, want)
        kept = _copies(cache, names)
        assert sorted(kept) == sorted(names[-2:]) and _size(kept) <= limit, kept
        self.epoch(ds, want)
        assert _size(_copies(cache, names)) <= limit

    def test_eviction_deletes_only_the_caches_own_files(self, codec: Codec, tmp_path: Any) -> None:
        """A cache_dir holding a user's files (a document, a folder, a file named like a
        copy, a note inside the cache's own folder) and a limit below one shard: two
        epochs evict every copy but the one read, and nothing else."""
        url = self.remote(codec, tmp_path / "data", "file")
        names, want = self.shards(url), sharded_data()["train"]
        home = tmp_path / "home"
        (home / "sub").mkdir(parents=True)
        (home / "thesis.docx").write_bytes(b"chapter one " * 100)
        (home / "sub" / "notes.txt").write_text("keep me")
        (home / f"0123456789abcdef-{names[0]}").write_bytes(b"mine, not a cache copy")
        (home / FOLDER).mkdir()
        (home / FOLDER / "README").write_text("a user's note in the cache's folder")
        theirs, dataset = _files(str(home)), _files(str(tmp_path / "data"))
        ds = torch_dataset(url, "train", cache_dir=home, cache_limit=1)
        self.epoch(ds, want)
        self.epoch(ds, want)
        now = _files(str(home))
        assert {k: now[k] for k in theirs} == theirs  # every file of the user's, unchanged
        assert {n.split("/")[0] for n in set(now) - set(theirs)} <= {FOLDER}
        in_folder = {n: p for n, p in _copies(str(home), names).items() if FOLDER in p}
        assert len(in_folder) == 1  # the shard read last: a process keeps what it reads
        assert _files(str(tmp_path / "data")) == dataset

    def test_a_cache_dir_overlapping_the_dataset_is_refused(
        self, codec: Codec, tmp_path: Any
    ) -> None:
        url = self.remote(codec, tmp_path / "data", "file")
        folder = Path(self.out(tmp_path / "data", codec, "local"))
        before = _files(str(tmp_path))
        for cache_dir in (folder, tmp_path / "data", tmp_path, folder / "inner"):
            with pytest.raises(ValueError, match="overlaps the dataset's folder"):
                torch_dataset(url, "train", cache_dir=cache_dir, cache_limit=1)
        assert _files(str(tmp_path)) == before  # nothing made, nothing deleted
        assert not (folder / "inner").exists()

    def other_records(self) -> dict[str, Any]:
        """Other records of the train split's shape: the same shards, other bytes."""
        train = sharded_data()["train"]
        return {"f": train["f"][::-1].copy(), "y": train["y"][::-1].copy(), "k": train["k"] + 1000}

    def test_a_dataset_rewritten_at_the_same_url_is_downloaded_again(
        self, codec: Codec, tmp_path: Any
    ) -> None:
        """The same URL, the same shard names, other records: the next reader reads the
        new records, not the copies of the old shards."""
        url = self.remote(codec, tmp_path, "memory")
        cache = str(tmp_path / "cache")
        self.epoch(torch_dataset(url, "train", cache_dir=cache), sharded_data()["train"])
        other = self.other_records()
        self.remote(codec, tmp_path / "again", "file", other)
        assert self.shards(url) == self.shards(
            Path(self.out(tmp_path / "again", codec, "local")).as_uri()
        )
        _upload(self.out(tmp_path / "again", codec, "local"), url)
        self.epoch(torch_dataset(url, "train", cache_dir=cache), other)

    @pytest.mark.parametrize("how", ["replaced", "written in place, mtime set back"])
    def test_a_copy_changed_between_epochs_is_not_served(
        self, codec: Codec, tmp_path: Any, how: str
    ) -> None:
        """Each copy swapped for the same shard of another dataset of the same shape
        between two epochs (a new file, or the bytes written into the old one with its
        mtime put back): the next epoch gives the dataset's own records (or, where the
        reader kept a copy open and its bytes changed under it, one error: never the
        other dataset's records), and a new reader gives them."""
        url = self.remote(codec, tmp_path, "memory")
        impostor = self.out(tmp_path / "other", codec, "local")
        self.remote(codec, tmp_path / "other", "file", self.other_records())
        names, want, cache = self.shards(url), sharded_data()["train"], str(tmp_path / "cache")
        ds = torch_dataset(url, "train", cache_dir=cache)
        self.epoch(ds, want)
        for name, path in _copies(cache, names).items():
            with open(os.path.join(impostor, name), "rb") as f:
                swapped = f.read()
            if how == "replaced":
                with open(path + ".new", "wb") as f:
                    f.write(swapped)
                os.replace(path + ".new", path)
            else:
                st = os.stat(path)
                with open(path, "r+b") as f:
                    f.write(swapped)
                    f.truncate()
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        try:
            self.epoch(ds, want)
        except CodecIOError:
            assert how != "replaced"  # an open copy of the first epoch stays what it was
        self.epoch(torch_dataset(url, "train", cache_dir=cache), want)

    def test_a_download_unlike_the_manifest_is_refused(self, codec: Codec, tmp_path: Any) -> None:
        """A shard at the URL changed after the manifest was written (one byte in its
        middle): one error naming the shard and the manifest; no copy, no part left."""
        url = self.remote(codec, tmp_path, "memory")
        import fsspec

        fs, root = fsspec.core.url_to_fs(url)
        shard = self.shards(url)[0]
        blob = bytearray(fs.cat_file(f"{root}/{shard}"))
        blob[len(blob) // 2] ^= 0x01
        fs.pipe_file(f"{root}/{shard}", bytes(blob))
        cache = str(tmp_path / "cache")
        said = re.escape(shard) + r": downloaded .* the manifest lists"
        with pytest.raises(CodecIOError, match=said):
            list(torch_dataset(url, "train", cache_dir=cache))
        assert not [n for n in os.listdir(os.path.join(cache, FOLDER)) if n.endswith(".part")]
        assert shard not in _copies(cache, [shard])
