"""Reading WebDataset tars: dstore's folders (manifest) and anyone's tars, typed by
inspection as docs/formats/webdataset.md says; nothing is extracted."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from tarfile import TarInfo
from typing import IO, Any

import numpy as np

from ... import fs
from ...bounded_json import JsonLimitError, max_json_bytes
from ...errors import CodecIOError
from ...model import Bytes, Image, String, StringList, Tensor
from ...model.samples import BatchRows, SampleFields, array_kind
from ...model.schema import DEFAULT_SPLIT, FieldSpec, SplitSpec
from ...sharding import ShardFile
from ...sharding.numbered import NumberedShardReader
from ...sharding.spans import SpanShardReader
from .npy import npy_header
from .record_bytes import ENCODINGS, decode_record, json_string_list
from .stored_fields import describe_table, read_field_table
from .tar_index import Member, simple_members
from .writer import (
    EXT_IMAGE,
    FORMAT_ID,
    JSON_MEDIA_TYPE,
    MEDIA_TYPE_ATTR,
    FieldEncoding,
    written_encodings,
)

__all__ = ["WebDatasetReader", "is_tar_header"]

BLOCK = 512
_KEY_RE = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # WebDataset's key / suffix split
#: what a foreign member's extension makes a field (.npy: array_kind; images: EXT_IMAGE)
_FOREIGN = {"cls": "cls", "index": "cls", "npy": "npy", "txt": "txt", "json": "json"}
#: what :func:`_look` says of a ``.json`` member: a list of strings, or other JSON text
_STRINGS, _TEXT = "strings", "text"
_REGULAR = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_WHAT = {
    tarfile.LNKTYPE: "hard link",
    tarfile.SYMTYPE: "symbolic link",
    tarfile.CHRTYPE: "character device",
    tarfile.BLKTYPE: "block device",
    tarfile.FIFOTYPE: "FIFO",
}


def _absent(out: np.ndarray | None) -> None:
    """The value of a field a foreign sample lacks (read as an empty list)."""
    return None


def is_tar_header(block: bytes) -> bool:
    """A first block that parses as a tar header (checksum included)."""
    try:
        return any(block[:BLOCK]) and bool(
            TarInfo.frombuf(block[:BLOCK], "utf-8", "surrogateescape")
        )
    except tarfile.HeaderError:
        return False


def _check(info: TarInfo, path: str, size: int) -> None:
    where, name = f"{path}: byte {info.offset}: member {info.name!r}", info.name
    if info.size < 0:  # tarfile parses '-1000' and would read this header again for ever
        raise CodecIOError(f"{where} declares a negative size ({info.size} bytes)")
    if info.offset_data + info.size > size:
        raise CodecIOError(f"{where} claims {info.size} bytes past the end")
    if info.type not in _REGULAR and not info.isdir():
        what = _WHAT.get(info.type, f"member of type {info.type!r}")
        raise CodecIOError(f"{where} is a {what}; only files are read")
    if name.startswith("/") or ".." in name.split("/") or "\\" in name or "\0" in name:
        raise CodecIOError(f"{where} is an absolute path or leaves the archive")


def walk(f: IO[bytes], path: str, size: int) -> Iterator[TarInfo]:
    """The regular members of the tar in ``f`` (``size`` bytes), directories passed over;
    links, devices, names leaving the archive and sizes past the end refused by member."""
    if size == 0:
        return  # no members (tarfile calls it no tar)
    try:
        with tarfile.open(fileobj=f, mode="r:", encoding="utf-8", errors="surrogateescape") as tar:
            for info in tar:
                _check(info, path, size)
                if not info.isdir():
                    yield info
    except tarfile.ReadError as e:
        raise CodecIOError(f"{path}: not a tar header, or a truncated tar ({e})") from None
    # tarfile stops quietly at a cut or bad header after the first: that must be the end
    f.seek(tar.offset)
    tail = f.read(BLOCK)
    if tar.offset < size and tail != b"\0" * BLOCK:
        what = "truncated tar (ends inside a header)" if len(tail) < BLOCK else "not a tar header"
        raise CodecIOError(f"{path}: byte {tar.offset}: {what}")


@dataclass(slots=True)
class Sample:
    """One sample of a shard: its key, its members' data (offset, size) by suffix, the
    bytes it spans; kept for the reader's life, so no TarInfo (twice the memory)."""

    key: str
    members: dict[str, tuple[int, int]]
    start: int
    end: int


def _samples(members: Iterator[TarInfo] | Iterator[Member], path: str) -> list[Sample]:
    """Consecutive members of one key make a sample (as WebDataset groups them)."""
    samples: list[Sample] = []
    for m in members:
        parts = _KEY_RE.match(m.name)
        if parts is None:
            raise CodecIOError(f"{path}: member {m.name!r} has no <key>.<extension> name")
        key, suffix = parts.groups()
        if not samples or samples[-1].key != key:
            samples.append(Sample(key, {}, m.offset, 0))
        elif suffix in samples[-1].members:
            raise CodecIOError(f"{path}: sample {key!r} has two members {suffix!r}")
        samples[-1].members[suffix] = (m.offset_data, m.size)
        samples[-1].end = m.offset_data + m.size + -m.size % BLOCK  # data padded to blocks
    return samples


def _look(f: IO[bytes], at: int, size: int, suffix: str, where: str) -> Any:
    """What a member of a tar dstore did not write says of its field: an ``.npy``'s dtype
    and shape; a ``.json``, whether it is a list of strings (``_STRINGS``) or other
    JSON, read as its text (``_TEXT``: also JSON too large to parse, never read here)."""
    ext = suffix.rsplit(".", 1)[-1].lower()
    if ext == "npy":
        return npy_header(f, at, size, where)
    if ext == "json":
        if size > max_json_bytes():
            return _TEXT
        f.seek(at)
        try:
            strings = json_string_list(f.read(size), where)
        except JsonLimitError:  # not JSON, or nested too deeply: its text all the same
            return _TEXT
        return _STRINGS if strings is not None else _TEXT
    return None


def _foreign_field(suffix: str, seen: set[Any]) -> tuple[FieldSpec, FieldEncoding]:
    """A field of tars dstore did not write, from its extension and what :func:`_look` saw."""
    ext = suffix.rsplit(".", 1)[-1].lower()
    enc = "encoded" if ext in EXT_IMAGE else _FOREIGN.get(ext, "bin")
    kinds = {"cls": Tensor(np.dtype(np.int64), ()), "txt": String(), "json": StringList()}
    kind = kinds.get(enc, Bytes())
    if enc == "json" and seen != {_STRINGS}:
        # per-sample metadata ({"caption": ..., "width": ...}): the JSON text as a string
        field = FieldSpec(suffix, String(), attrs={MEDIA_TYPE_ATTR: JSON_MEDIA_TYPE})
        return field, FieldEncoding(suffix, "txt")
    if enc == "encoded":
        kind = Image(np.dtype(np.uint8), None, None, None, EXT_IMAGE[ext])
    elif enc == "npy":
        kind = array_kind(seen, f"field {suffix!r}: .npy")
    return FieldSpec(suffix, kind), FieldEncoding(suffix, enc)


class WebDatasetReader(NumberedShardReader, SpanShardReader):
    """Tar shards of samples; a member index per shard makes every record range cheap."""

    format_id = FORMAT_ID
    codec_name = "webdataset"
    file_pattern = r"\.tar$"
    shard_suffix = ".tar"

    def __init__(self, path: str, workers: int = 0, follow_links: bool = False) -> None:
        self.encodings: dict[str, dict[str, FieldEncoding]] = {}
        super().__init__(path, workers, follow_links)

    def load_manifest_head(self, manifest: dict[str, Any], where: str) -> None:
        self.encodings = read_field_table(FieldEncoding, manifest, self.schema, ENCODINGS, where)

    def written_encodings(self, spec: FieldSpec) -> set[str]:
        return written_encodings(spec)

    def walk_shard(self, f: IO[bytes], path: str, size: int) -> list[Sample]:
        simple = simple_members(f, size)
        if simple is not None:
            return _samples(iter(simple), path)
        f.seek(0)  # headers the fast index does not read: tarfile reads them, or names them
        return _samples(walk(f, path, size), path)

    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        seen: SampleFields[set[Any]] = SampleFields(lambda suffix: set())
        for path in paths:
            with fs.open_binary(path) as f:
                for s in self.spans(path):
                    fields = seen.sample(s.members)
                    for suffix, (at, size) in s.members.items():
                        where = f"{path}: sample {s.key!r}"
                        fields[suffix].add(_look(f, at, size, suffix, where))
        specs = {suffix: _foreign_field(suffix, looked) for suffix, looked in seen.fields.items()}
        self.encodings[split] = {name: enc for name, (_, enc) in specs.items()}
        shards = [ShardFile(path, len(self.spans(path))) for path in paths]
        return seen.specs({name: spec for name, (spec, _) in specs.items()}), shards

    def decode_records(
        self, spec: SplitSpec, names: list[str], records: list[Any], rows: BatchRows, first: int
    ) -> None:
        encs = self.encodings[spec.name]
        for i, (s, buf, path) in enumerate(records, first):
            for name in names:
                where = f"{path}: sample {s.key!r}, field {name!r}"
                e, m = encs[name], s.members.get(encs[name].at)
                if m is None and self.manifest is None:
                    # a field this foreign sample lacks: an empty list (samples.py)
                    rows.fill(name, i, _absent, where)
                    continue
                if m is None:
                    raise CodecIOError(f"{where}: no member {e.at!r}")
                data = buf[m[0] - s.start : m[0] - s.start + m[1]]
                decode = partial(decode_record, e.encoding, spec.fields[name], data, e.lossy, where)
                rows.fill(name, i, decode, where)

    def describe(self) -> list[str]:
        lines = describe_table(self.encodings, self.shards, "tar shard(s)")
        if self.manifest is None:
            lines.append(
                f"no dstore manifest: fields inferred from extensions ({DEFAULT_SPLIT!r} "
                "unless file names say train/test/...)"
            )
        return lines
