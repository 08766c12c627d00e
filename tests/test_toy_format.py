"""A sharded format defined here, in a test module, passing both shared suites.

``toyjsonl`` stores each split as shards of JSON Lines (one record a line, one key a
field) and is registered for these tests only. It shows how little a format of the
sharded container (:mod:`dstore.sharding`) holds of its own: how records become
bytes (:meth:`ToyShardWriter.encode_shard`) and back (:meth:`ToyReader.decode_records`),
and where its records start (a line is a frame, so every shard gets a record index).
The folder, shard names, ``.part`` commits, manifest, resume journal, record ranges,
the shard cache and Dask come from the container and the engine, and the suites
test all of them on it as on a built-in format.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import dstore
from dstore import fs
from dstore.abc import Reader, Shard, ShardWriter
from dstore.errors import CodecIOError
from dstore.model import column_len
from dstore.model.samples import BatchRows
from dstore.model.schema import Batch, FieldSpec, Schema, SplitSpec
from dstore.options import option
from dstore.registry import codec_names
from dstore.sharding import ShardedCodec, ShardedDirectoryReader, ShardedDirectoryWriter, ShardFile
from dstore.testing import CodecSuite, ShardedCodecSuite, registered_codec

FORMAT_ID = "dstore-toyjsonl"


@dataclass(frozen=True)
class ToyOptions:
    shard_mb: float = option(1.0, "target shard size in MiB")


def encode_lines(batch: Batch) -> list[bytes]:
    """One JSON object per record, a line each (NaN and infinities as Python's json)."""
    n = column_len(next(iter(batch.values()))) if batch else 0
    return [
        json.dumps({k: np.asarray(v[i]).tolist() for k, v in batch.items()}).encode() + b"\n"
        for i in range(n)
    ]


class ToyShardWriter(ShardedDirectoryWriter):
    codec_name = "toyjsonl"
    record_index = True  # a line is a frame: the container writes <shard>.idx

    def __init__(self, schema: Schema, options: ToyOptions, plan: Sequence[Shard] = ()) -> None:
        self.options = options
        super().__init__(schema, plan, None)

    def encode_shard(self, shard: Shard, batches: Iterator[Batch]) -> Generator[list[bytes]]:
        for batch in batches:
            yield encode_lines(batch)

    def manifest_head(self) -> dict[str, Any]:
        return self.standard_head(FORMAT_ID, self.options, {})  # the schema says it all


class ToyReader(ShardedDirectoryReader):
    format_id = FORMAT_ID
    codec_name = "toyjsonl"
    sequential_reason = "a JSON Lines shard is read line by line"  # until indexed

    def load_manifest_head(self, manifest: dict[str, Any], where: str) -> None:
        pass  # no field encodings: every field is its schema's dtype and shape

    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        raise CodecIOError(f"{paths[0]}: toyjsonl reads only the folders it wrote")

    def walk_frames(self, shard: ShardFile) -> list[int]:
        """Where each line starts, then the end (what an index must list)."""
        with fs.open_binary(shard.path) as f:
            data = f.read()
        return [0, *(i + 1 for i, b in enumerate(data) if b == ord("\n"))]

    def shard_records(self, shard: ShardFile, lo: int, hi: int) -> Iterator[tuple[bytes, str]]:
        offsets = self.frame_offsets(shard) if lo else None  # checked against the shard
        try:
            f = fs.open_binary(shard.path)
        except FileNotFoundError:
            raise CodecIOError(f"{shard.path}: no such shard (the manifest lists it)") from None
        with f:
            first = lo if offsets is None else 0
            if offsets is not None:
                f.seek(int(offsets[lo]))
            for i, line in enumerate(f, lo - first):
                if i >= hi:
                    return
                if i >= lo:
                    yield line, f"{shard.path}: record {i}"

    def decode_records(
        self, spec: SplitSpec, names: list[str], records: list[Any], rows: BatchRows, first: int
    ) -> None:
        for i, (line, where) in enumerate(records, first):
            try:
                record = json.loads(line)
                for n in names:
                    value = np.asarray(record[n], spec.fields[n].dtype)
                    rows.fill(n, i, lambda out, v=value: v, where)
            except (ValueError, KeyError, TypeError) as e:
                raise CodecIOError(f"{where}: not a record of this split ({e})") from None


class ToyCodec(ShardedCodec):
    """Shards of JSON Lines, ``<split>-00000-of-00004.jsonl``."""

    name = "toyjsonl"
    extensions = (".toyjsonl",)
    shard_suffix = ".jsonl"
    format_id = FORMAT_ID
    supports_urls = True
    Options = ToyOptions

    def supports(self, dtype: np.dtype) -> bool:
        return dtype.kind in "biuf"  # JSON has no complex numbers

    def record_sizes(self, writer: Any, split: str, records: Batch) -> list[int]:
        return [len(line) for line in encode_lines(records)]

    def shard_writer(self, schema: Schema, plan: list[Shard]) -> ShardWriter:
        return ToyShardWriter(schema, self.options, plan)

    def open_reader(self, path: str) -> Reader:
        return ToyReader(path)


@pytest.fixture
def toy() -> Iterator[ToyCodec]:
    with registered_codec(ToyCodec):
        yield ToyCodec()


class TestToyCodec(CodecSuite):
    @pytest.fixture
    def codec(self, toy: ToyCodec) -> ToyCodec:
        return toy


class TestToyShardedCodec(ShardedCodecSuite):
    @pytest.fixture
    def codec(self, toy: ToyCodec) -> ToyCodec:
        return toy


def test_the_toy_is_registered_only_inside_its_tests(toy: ToyCodec, tmp_path: Any) -> None:
    assert "toyjsonl" in codec_names()
    dstore.save({"x": np.arange(6).reshape(3, 2)}, tmp_path / "t.toyjsonl")
    assert dstore.info(tmp_path / "t.toyjsonl").format == "toyjsonl"


def test_the_toy_leaves_no_trace_in_the_registry() -> None:
    assert "toyjsonl" not in codec_names()
    with pytest.raises(dstore.errors.UnknownCodecError):
        dstore.get_codec("toyjsonl")
