"""Writing WebDataset tar shards: record *i* of a split is the sample of members
``<key>.<field>.<ext>``, ``key`` being *i* zero-padded, members sorted by name
(which member each field becomes: docs/formats/webdataset.md)."""

from __future__ import annotations

import tarfile
from collections.abc import Generator, Iterator, Sequence
from contextlib import suppress
from typing import Any, ClassVar

from ...abc import Shard
from ...errors import DstoreError
from ...images.imagecodec import LossyImage
from ...images.png import holds_gil, png_encoder
from ...model import Image, column_len, names, raw_record
from ...model.schema import Batch, FieldSpec, Schema, SplitSpec
from ...sharding import ShardedDirectoryWriter, encode_chunks
from .record_bytes import choose_record_encoding, encode_record
from .stored_fields import StoredField, table_json, table_libraries

__all__ = [
    "EXT_IMAGE",
    "FORMAT_ID",
    "JSON_MEDIA_TYPE",
    "MEDIA_TYPE_ATTR",
    "FieldEncoding",
    "WebDatasetShardWriter",
    "choose_encoding",
    "written_encodings",
]

FORMAT_ID = "dstore-webdataset"
END = b"\0" * 1024  # a tar's end-of-archive blocks
#: a member's extension by its encoding (:data:`.record_bytes.ENCODINGS`) where they differ
_EXT = {"jpeg": "jpg", "json-base64": "json", "tiff": "tif"}
#: A field attribute naming what a string field's records are: a ``.json`` member read as
#: its text is a string field of media type :data:`JSON_MEDIA_TYPE` (kept by every
#: format with the schema), written back as a ``.json`` member.
MEDIA_TYPE_ATTR = "media_type"
JSON_MEDIA_TYPE = "application/json"
#: an encoded image's encoding by its extension (foreign tars)
EXT_IMAGE = {"png": "png", "jpg": "jpeg", "jpeg": "jpeg", "webp": "webp"}


class FieldEncoding(StoredField):
    """A field's member suffix in a sample (``x.png``; a foreign ``jpg``) and encoding."""

    json_key: ClassVar[str] = "member"


def tar_member(name: str, data: bytes) -> bytes:
    """One regular file member whose bytes depend on its name and data alone."""
    info = tarfile.TarInfo(name)  # mtime 0, uid/gid 0, no user names, mode 0644
    info.size = len(data)
    header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    return header + data + b"\0" * (-len(data) % 512)


def choose_encoding(spec: FieldSpec, lossy: LossyImage | None) -> FieldEncoding:
    """How ``spec`` is stored; raw images take ``lossy`` (refused by name when they cannot).
    A field named as its extension is that member alone (``jpg``, ``cls``, ``json``: the
    fields of a tar webdataset's TarWriter wrote), so a tar read and written comes back
    with the members it had."""
    enc, quality = choose_record_encoding(spec, lossy, "webdataset")
    ext = spec.kind.encoding if isinstance(spec.kind, Image) and enc == "encoded" else enc
    if enc == "txt" and spec.attrs.get(MEDIA_TYPE_ATTR) == JSON_MEDIA_TYPE:
        ext = "json"  # a .json member read as its text goes back as .json
    ext = _EXT.get(ext, ext)
    if spec.name == ext:
        return FieldEncoding(ext, enc, quality)
    # escaped, no "." or "/" left: WebDataset's split at dots finds the key and the field
    return FieldEncoding(f"{names.escape_dotless(spec.name)}.{ext}", enc, quality)


def written_encodings(spec: FieldSpec) -> set[str]:
    """Every encoding :func:`choose_encoding` gives ``spec``, with or without a lossy
    image codec (what a manifest may say of the field)."""
    out = set()
    for lossy in (None, *(LossyImage(f) for f in ("jpeg", "webp"))):
        with suppress(DstoreError):  # not an image a lossy codec takes
            out.add(choose_encoding(spec, lossy).encoding)
    return out


class WebDatasetShardWriter(ShardedDirectoryWriter):
    """Encodes records to tar samples; picklable (options and encodings only) for Dask."""

    codec_name = "webdataset"

    def __init__(self, schema: Schema, options: Any, plan: Sequence[Shard] = ()) -> None:
        self.options = options
        self.encodings: dict[str, dict[str, FieldEncoding]] = {
            split.name: {n: choose_encoding(s, options.lossy()) for n, s in split.fields.items()}
            for split in schema.splits.values()
        }
        self.workers = options.workers
        super().__init__(schema, plan, None)

    def gil_bound(self, split: str) -> bool:
        encodings = (e.encoding for e in self.encodings[split].values())
        return holds_gil(str(self.options.png_level)) and "png" in encodings

    def current_libraries(self) -> dict[str, str]:
        return table_libraries(self.encodings, str(self.options.png_level))

    def encode_chunk(
        self, spec: SplitSpec, start: int, chunk: Batch, png: Any = None
    ) -> list[bytes]:
        """One sample's members per record of ``chunk`` (records ``start:`` of the split)."""
        png = png or png_encoder(str(self.options.png_level))
        encs = self.encodings[spec.name]
        width = max(6, len(str(max(spec.count - 1, 0))))  # six digits, as WebDataset's

        def member(i: int, name: str) -> bytes:
            f, e = spec.fields[name], encs[name]
            value = raw_record(f.kind, chunk[name], i)
            return tar_member(
                f"{start + i:0{width}d}.{e.at}", encode_record(e.encoding, f, value, e.lossy, png)
            )

        order = sorted(chunk, key=lambda name: encs[name].at)
        n = column_len(next(iter(chunk.values()))) if chunk else 0
        return [b"".join(member(i, name) for name in order) for i in range(n)]

    def encode_shard(
        self, shard: Shard, batches: Iterator[Batch]
    ) -> Generator[list[bytes], None, None]:
        spec = self.schema.splits[shard.split]
        png = png_encoder(str(self.options.png_level))
        yield from encode_chunks(
            batches,
            lambda at, chunk: self.encode_chunk(
                spec, self.record_offsets.get(shard.split, 0) + shard.start + at, chunk, png
            ),
            self.options.workers,
            "dstore-wds",
        )

    def write_records(
        self, shard: Shard, batches: Iterator[Batch], out: Any
    ) -> Generator[int, None, None]:
        wrote = False
        for records in super().write_records(shard, batches, out):
            wrote = True
            yield records
        if wrote:  # a shard of no records stays empty
            out.write(END)

    def manifest_head(self) -> dict[str, Any]:
        return self.standard_head(FORMAT_ID, self.options, table_json(self.encodings))
