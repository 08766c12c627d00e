"""Reading WebDataset tars: dstore's folders (manifest) and anyone's tars, typed by
inspection as docs/formats/webdataset.md says; nothing is extracted."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from tarfile import TarInfo
from typing import IO, Any

import numpy as np

from ... import fs
from ...errors import CodecIOError, SchemaError
from ...model import Bytes, Image, String, StringList, Tensor
from ...model.samples import SampleFields, array_kind, records_batch
from ...model.schema import DEFAULT_SPLIT, Batch, FieldSpec, SplitSpec
from ...sharding import ShardFile
from ...sharding.numbered import NumberedShardReader
from ...sharding.spans import SpanShardReader
from .._npy import npy_header
from .._record_bytes import ENCODINGS, decode_record, json_string_list
from .._stored_fields import read_field_table
from . import tario
from .encodings import EXT_IMAGE, FieldEncoding
from .writer import FORMAT_ID

__all__ = ["WebDatasetReader"]

_KEY_RE = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # WebDataset's key / suffix split
#: what a foreign member's extension makes a field (.npy: array_kind; images: EXT_IMAGE)
_FOREIGN = {"cls": "cls", "index": "cls", "npy": "npy", "txt": "txt", "json": "json"}


@dataclass(frozen=True)
class Sample:
    """One sample of a shard: its key, its members by suffix, the bytes it spans."""

    key: str
    members: dict[str, TarInfo]
    start: int
    end: int


def _samples(members: Iterator[TarInfo], path: str) -> list[Sample]:
    """Consecutive members of one key make a sample (as WebDataset groups them)."""
    groups: list[tuple[str, dict[str, TarInfo]]] = []
    for m in members:
        parts = _KEY_RE.match(m.name)
        if parts is None:
            raise CodecIOError(f"{path}: member {m.name!r} has no <key>.<extension> name")
        key, suffix = parts.groups()
        if not groups or groups[-1][0] != key:
            groups.append((key, {}))
        elif suffix in groups[-1][1]:
            raise CodecIOError(f"{path}: sample {key!r} has two members {suffix!r}")
        groups[-1][1][suffix] = m
    return [
        Sample(
            key,
            g,
            min(m.offset for m in g.values()),
            max(m.offset_data + tario.padded(m.size) for m in g.values()),
        )
        for key, g in groups
    ]


def _look(f: IO[bytes], m: TarInfo, suffix: str, npy: set[Any], where: str) -> None:
    """What a foreign member tells of its field: an ``.npy``'s header, a ``.json``'s list."""
    ext = suffix.rsplit(".", 1)[-1].lower()
    if ext == "npy":
        npy.add(npy_header(f, m.offset_data, m.size, where))
    elif ext == "json" and (f.seek(m.offset_data), json_string_list(f.read(m.size)))[1] is None:
        raise SchemaError(
            f"{where}: field {suffix!r} is JSON other than a list of strings, which "
            "dstore does not read; leave it out of the tars"
        )


def _foreign_field(suffix: str, npy: set[Any]) -> tuple[FieldSpec, FieldEncoding]:
    ext = suffix.rsplit(".", 1)[-1].lower()
    enc = "encoded" if ext in EXT_IMAGE else _FOREIGN.get(ext, "bin")
    kind = {
        "encoded": lambda: Image(np.dtype(np.uint8), None, None, None, EXT_IMAGE[ext]),
        "cls": lambda: Tensor(np.dtype(np.int64), ()),
        "npy": lambda: array_kind(npy, f"field {suffix!r}: .npy"),
        "txt": String,
        "json": StringList,
        "bin": Bytes,
    }[enc]()
    return FieldSpec(suffix, kind), FieldEncoding(suffix, enc)


class WebDatasetReader(NumberedShardReader, SpanShardReader):
    """Tar shards of samples; a member index per shard makes every record range cheap."""

    format_id = FORMAT_ID
    codec_name = "webdataset"
    file_pattern = r"\.tar$"
    shard_suffix = ".tar"

    def __init__(self, path: str, workers: int = 0) -> None:
        self.encodings: dict[str, dict[str, FieldEncoding]] = {}
        super().__init__(path, workers)

    def load_manifest_head(self, manifest: dict[str, Any], where: str) -> None:
        self.encodings = read_field_table(FieldEncoding, manifest, self.schema, ENCODINGS, where)

    def walk_shard(self, f: IO[bytes], path: str, size: int) -> list[Sample]:
        return _samples(tario.walk(f, path, size), path)

    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        seen: SampleFields[set[Any]] = SampleFields(lambda suffix: set())
        for path in paths:
            with fs.open_binary(path) as f:
                for s in self.spans(path):
                    fields = seen.sample(s.members.keys(), path, f"sample {s.key!r}")
                    for suffix, m in s.members.items():
                        _look(f, m, suffix, fields[suffix], f"{path}: sample {s.key!r}")
        specs = {suffix: _foreign_field(suffix, npy) for suffix, npy in seen.fields.items()}
        self.encodings[split] = {name: enc for name, (_, enc) in specs.items()}
        shards = [ShardFile(path, len(self.spans(path))) for path in paths]
        return {name: spec for name, (spec, _) in specs.items()}, shards

    def decode_records(self, spec: SplitSpec, names: list[str], records: list[Any]) -> Batch:
        encs = self.encodings[spec.name]

        def value(name: str, record: tuple[Sample, bytes, str]) -> Any:
            s, buf, path = record
            where = f"{path}: sample {s.key!r}, field {name!r}"
            m = s.members.get(encs[name].at)
            if m is None:
                raise CodecIOError(f"{where}: no member {encs[name].at!r}")
            data = buf[m.offset_data - s.start : m.offset_data - s.start + m.size]
            return decode_record(
                encs[name].encoding, spec.fields[name], data, encs[name].lossy, where
            )

        return records_batch(spec, names, records, value)

    def describe(self) -> list[str]:
        return [
            f"{split}: {len(shards)} tar shard(s); members "
            + ", ".join(f"{n}: .{e.at} ({e.encoding})" for n, e in self.encodings[split].items())
            for split, shards in self.shards.items()
        ] + [
            f"no dstore manifest: fields inferred from extensions ({DEFAULT_SPLIT!r} "
            "unless file names say train/test/...)"
        ] * (self.manifest is None)
