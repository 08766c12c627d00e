"""TFRecord directories of ``tf.train.Example`` with PNG images -- no TensorFlow needed.

Layout written (``data.tfrecords/``)::

    train-00000-of-00002.tfrecord   shards of about ``shard_mb`` each, per split
    ...
    dstore.json                     schema, per-field encoding, shards (records, bytes, sha256)

Field encoding: image-like fields (uint8/uint16, ``(H, W)`` or ``(H, W, 1|3|4)``)
become PNG bytes; integers and bools ``int64_list``; float32 ``float_list``;
anything else (float16, float64, complex) raw little-endian bytes, its dtype
and shape kept in the manifest so every round trip restores them. PNG
encoding and decoding run on all cores (imagecodecs releases the GIL).

Reading also takes TFRecords written by others -- a single file, a glob, a
folder of shards, TFDS names like ``mnist-train.tfrecord-00000-of-00001`` --
inferring the schema from the first Example of each split.
"""

from __future__ import annotations

import fnmatch
import os
import re
import zlib
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from glob import escape as glob_escape
from typing import Any, ClassVar

from ... import fs, links
from ...abc import Codec, Reader, Shard, ShardWriter, Writer
from ...errors import CodecIOError
from ...fs import is_regular_file, is_url
from ...images.options import (
    ImageOptions,
    image_codec_option,
    png_level_option,
    quality_option,
    workers_option,
)
from ...model import Bytes, Image, Ragged, String, StringList, Tensor
from ...model.schema import Batch, FieldSpec, Schema, SplitSpec
from ...options import option
from ...sharding import (
    ShardedDirectoryReader,
    ShardedDirectoryWriter,
    ShardFile,
    foreign_files,
    manifest_files,
    plan_by_size,
    planning_records,
    shard_name,
)
from ..example.encoder import ExampleEncoder
from ..example.fields import (
    FieldEncoding,
    check_manifest_fields,
    choose_encoding,
    read_examples,
    written_encodings,
)
from ..example.infer import ExampleInference
from ..example.tf import parse_snippet
from . import io as rio

__all__ = ["TFRecordCodec"]

_PLAN_SAMPLE = 64  # records encoded to size the shards


# ------------------------------------------------------------------------ options


@dataclass(frozen=True)
class TFRecordOptions(ImageOptions):
    #: old option names, read as the new ones with a warning
    RENAMED: ClassVar[dict[str, str]] = {"image_format": "image_codec"}

    shard_mb: float = field(
        default=256.0, metadata={"help": "target shard size in MiB (TFDS aims at 64 MiB - 1 GiB)"}
    )
    compression: str = field(
        default="none",
        metadata={"help": 'none or gzip (TensorFlow: compression_type="GZIP")'},
    )
    png_level: str = png_level_option()
    images: tuple[str, ...] | None = option(
        None, "comma-separated fields stored as PNG; auto = image-like fields; none", none="auto"
    )
    # option() gives each instance its own copy of a mutable default
    rename: dict[str, str] = option(  # noqa: RUF009
        {}, "feature names in the Example, e.g. x=image,y=label"
    )
    image_codec: str = image_codec_option(ImageOptions.IMAGE_CODECS)
    quality: int = quality_option()
    workers: int = workers_option()

    def validate(self) -> None:
        if self.compression not in ("none", "gzip"):
            raise ValueError(
                f"tfrecord: compression must be none or gzip. Got {self.compression!r} instead."
            )
        self.check_image_options("tfrecord")

    def image_set(self) -> set[str] | None:
        """The fields stored as PNG, or None: every image-like field."""
        return None if self.images is None else set(self.images)

    def renames(self) -> dict[str, str]:
        """Field name -> feature name, for the fields renamed."""
        return dict(self.rename)


# ------------------------------------------------------------------------- writer


class TFRecordShardWriter(ShardedDirectoryWriter):
    """Frames the Examples of :class:`ExampleEncoder` as TFRecords; the shard files and
    the manifest are the sharded-directory container's (:mod:`dstore.sharding`).

    Holds only options and encodings (no open handles or threads), so it
    pickles to Dask workers; every process writes the same bytes for a shard.
    """

    codec_name = "tfrecord"
    record_index = True  # each record is one frame: shards get DALI-style .idx sidecars

    def __init__(
        self, schema: Schema, options: TFRecordOptions, plan: Sequence[Shard] = ()
    ) -> None:
        self.options = options
        self.examples = ExampleEncoder(
            schema,
            self.codec_name,
            renames=options.renames(),
            images=options.image_set(),
            lossy=options.lossy(),
            png_level=str(options.png_level),
            workers=options.workers,
        )
        self.encodings = self.examples.encodings
        self.workers = options.workers
        compression = None if options.compression == "none" else options.compression
        super().__init__(schema, plan, compression)

    def current_libraries(self) -> dict[str, str]:
        """The compressors this process would use, with their versions."""
        libs = self.examples.libraries()
        if self.options.compression == "gzip":
            libs["gzip"] = f"zlib {zlib.ZLIB_RUNTIME_VERSION}"
        return libs

    def gil_bound(self, split: str) -> bool:
        return self.examples.fpng_fields(split) > 0

    def encode_chunk(self, split: str, chunk: Batch, png: Any = None) -> list[bytes]:
        """Framed TFRecords for the records of ``chunk``."""
        return self.examples.encode(split, chunk, png, rio.frame)

    def encode_shard(
        self, shard: Shard, batches: Iterator[Batch]
    ) -> Generator[list[bytes], None, None]:
        """Framed records, in chunks encoded on all cores, in order."""
        yield from self.examples.encode_batches(
            shard.split, batches, rio.frame, shard.stop - shard.start
        )

    def manifest_head(self) -> dict[str, Any]:
        skip = {"workers"}
        if self.options.image_codec == "png":  # PNG outputs' manifests stay as they were
            skip |= {"image_codec", "quality"}
        return self.standard_head(
            "dstore-tfrecord", self.options, self.examples.fields_json(), skip
        )


# ------------------------------------------------------------------------- reader

_OF_RE = re.compile(r"-(\d+)-of-(\d+)")


class TFRecordReader(ShardedDirectoryReader):
    """TFRecord shards: dstore's folders (manifest and field encodings) and files
    written by TensorFlow, TFDS or anyone (fields by inspection of every record)."""

    format_id = "dstore-tfrecord"
    codec_name = "tfrecord"
    sequential_reason = "TFRecord shards are read in order"
    file_pattern = r"\.tfrecords?(-\d+-of-\d+)?(\.gz)?$"
    shard_extension = r"\.tfrecords?"
    compressions = (None, "gzip")  # what the writer's compression option writes

    def __init__(self, path: str, workers: int = 0, follow_links: bool = False) -> None:
        self.encodings: dict[str, dict[str, FieldEncoding]] = {}
        super().__init__(path, workers, follow_links)

    def load_manifest_head(self, manifest: dict[str, Any], where: str) -> None:
        self.encodings = check_manifest_fields(manifest, self.schema, where)

    def written_encodings(self, spec: FieldSpec) -> set[str]:
        return written_encodings(spec)

    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        fields, self.encodings[split], shards = self._scan_split(paths)
        return fields, shards

    def _scan_split(
        self, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], dict[str, FieldEncoding], list[ShardFile]]:
        """Fields inferred from every record of the split (:class:`ExampleInference`)."""
        inference = ExampleInference(paths[0])
        shards = []
        for p in paths:
            with rio.RecordFile(p) as rf:
                while True:
                    index, offset = rf.index, rf.offset
                    rec = rf.next_record()
                    if rec is None:
                        break
                    inference.add(rec, p, index, f"{p}: record {index} at byte {offset}")
                    del rec  # before the next record is read: one large record in memory
                shards.append(ShardFile(p, rf.index, rf.compression))
        fields, encs = inference.result()
        self.notes = [*self.notes, *inference.notes]
        return fields, encs, shards

    def shard_records(self, shard: ShardFile, lo: int, hi: int) -> Iterator[tuple[bytes, str]]:
        """Raw records lo:hi of one shard with their location, CRCs checked."""
        offsets = self.frame_offsets(shard) if lo else None
        with rio.RecordFile(shard.path, shard.compression) as rf:
            if offsets is not None:  # one seek, not a walk over lo frames
                rf.seek_record(lo, offsets, shard.index or "")
            else:
                rf.skip(lo)
            for _ in range(lo, hi):
                where = f"{shard.path}: record {rf.index} at byte {rf.offset}"
                rec = rf.next_record()
                if rec is None:
                    raise CodecIOError(
                        f"{shard.path}: ended after {rf.index} records, expected {shard.records}"
                    )
                yield rec, where
            if hi == shard.records and rf.next_record() is not None:
                raise CodecIOError(f"{shard.path}: more records than the {shard.records} expected")

    def walk_frames(self, shard: ShardFile) -> list[int]:
        return rio.frame_ends(shard.path)

    def shard_pieces(self, shard: ShardFile, target_bytes: int) -> int:
        """A plain shard is entered mid-way by seeking over record headers (cheap); a
        GZIP or ZLIB shard would have to be decompressed up to there, so it stays whole."""
        if (shard.compression or rio.detect_compression(shard.path)) is None:
            return self.pieces_by_size(shard, target_bytes)
        return 1

    def read_shard(
        self,
        spec: SplitSpec,
        names: list[str],
        shard: ShardFile,
        lo: int,
        hi: int,
        rows: int,
        pool: Executor,
    ) -> Iterator[Batch]:
        raw = self.shard_records(shard, lo, hi)
        yield from read_examples(spec, self.encodings[spec.name], names, raw, hi - lo, rows, pool)
        for _ in raw:  # drain: checks the tail of the shard
            pass

    def tf_compression_types(self, split: str) -> list[str]:
        """TensorFlow's ``compression_type`` of each shard of ``split``: "", "GZIP" or "ZLIB"."""
        shown = {None: "", "gzip": "GZIP", "zlib": "ZLIB"}
        if self.manifest is not None:
            return [shown[self.manifest.get("compression")]] * len(self.shards[split])
        return [shown[s.compression] for s in self.shards[split]]

    def feature_description(self, split: str) -> list[str]:
        """A Python snippet a TensorFlow user pastes to read this split: every line runs as is.

        It defines ``feature_description``, ``decode(record)`` (a dict of the
        split's fields) and ``dataset``, with the compression the files have."""
        lines = parse_snippet(self.schema.splits[split], self.encodings[split])
        paths = [s.path for s in self.shards[split]]
        types = self.tf_compression_types(split)
        if len(set(types)) <= 1:
            lines.append(f"files = {_files_expression(paths)}")
            ctype = types[0] if types else ""
            lines.append(
                f"dataset = tf.data.TFRecordDataset(files, compression_type={ctype!r}).map(decode)"
            )
        else:  # one TFRecordDataset reads one compression: chain one per file, in order
            lines.append(f"files = {paths!r}")
            lines.append(f"compression_types = {types!r}")
            lines.append(
                "dataset = tf.data.TFRecordDataset(files[0], compression_type=compression_types[0])"
            )
            lines.append("for f, c in zip(files[1:], compression_types[1:]):")
            lines.append(
                "    dataset = dataset.concatenate(tf.data.TFRecordDataset(f, compression_type=c))"
            )
            lines.append("dataset = dataset.map(decode)")
        return lines

    def describe(self) -> list[str]:
        lines = []
        for split, shards in self.shards.items():
            comp = "+".join(sorted({t.lower() for t in self.tf_compression_types(split)} - {""}))
            lines.append(f"split {split}: {len(shards)} shard(s)" + (f", {comp}" if comp else ""))
            for name, enc in self.encodings[split].items():
                how = enc.encoding + (f" quality {enc.quality}" if enc.lossy else "")
                lines.append(f"  {name}: feature {enc.feature!r} as {how}")
        first = next((s for s, spec in self.schema.splits.items() if spec.fields), None)
        if first is not None:
            lines.append(f"TensorFlow ({first} split):")
            lines.extend(self.feature_description(first))
        return lines


def _files_expression(paths: list[str]) -> str:
    """``paths`` as Python: a list when short, else a sorted glob that matches exactly them."""
    if len(paths) <= 4 or is_url(paths[0]):
        return repr(paths)
    folder = os.path.dirname(paths[0])
    names = {os.path.basename(p) for p in paths}
    first = os.path.basename(paths[0])
    m = _OF_RE.search(first)
    if m and all(os.path.dirname(p) == folder for p in paths):
        star = "-" + "[0-9]" * len(m.group(1)) + f"-of-{m.group(2)}"
        pattern = glob_escape(first[: m.start()]) + star + glob_escape(first[m.end() :])
        if {f for f in os.listdir(folder or ".") if fnmatch.fnmatchcase(f, pattern)} == names:
            return f"sorted(tf.io.gfile.glob({os.path.join(folder, pattern)!r}))"
    return repr(paths)


class TFRecordCodec(Codec):
    """TFRecord shards of ``tf.train.Example``, images as PNG (no TensorFlow needed)."""

    name = "tfrecord"
    reads_folders = True
    sharded = True
    tensorflow_native = True  # tf.data.TFRecordDataset reads the shards itself
    frame_indexes = True  # dstore index: <file>.idx for TFRecord files others wrote
    extensions = (".tfrecords", ".tfrecord")
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    keeps_encoded_images = True  # JPEG/PNG bytes pass through byte for byte
    keeps_empty_rows = False  # a ragged record is one feature of its values
    bfloat16_as = "float32"  # float_list is float32: bfloat16 values widen exactly
    supports_urls = True
    random_access_when = "plain, with its .idx"  # record offsets: 'dstore index'
    Options = TFRecordOptions

    @classmethod
    def path_options(cls, path: str) -> dict[str, Any]:
        """``x.tfrecords.gz``: gzip-compressed shards, as TensorFlow users name such files."""
        return {"compression": "gzip"} if path.rstrip("/").lower().endswith(".gz") else {}

    @classmethod
    def frame_files(cls, path: str, follow_links: bool = False) -> list[str]:
        return TFRecordReader.find_files_at(path, follow_links)

    @classmethod
    def frame_lengths(cls, path: str) -> list[int]:
        with rio.RecordFile(path) as rf:
            if rf.compressed:
                raise CodecIOError(
                    f"{path}: a {str(rf.compression).upper()} TFRecord file cannot be indexed (it "
                    "cannot be entered mid-way); convert it to a plain one to read it at random"
                )
            return rf.frame_lengths()

    @classmethod
    def owns(cls, path: str) -> bool:
        """A folder with dstore's manifest, or one TFRecord file whose first
        record's framing (length and its CRC) checks out, plain or GZIP."""
        if fs.isdir(path):
            return manifest_files(path, "dstore-tfrecord") is not None
        if not is_regular_file(path):
            return False
        try:
            records = rio.RecordFile(path)
            try:  # the header only: a 2**-32 chance for other bytes, and no large read
                return records.header_ok()
            finally:
                records.close()
        except (CodecIOError, OSError):
            return False

    @classmethod
    def foreign_files(cls, path: str) -> list[str]:
        """Files in a dataset folder its manifest does not list."""
        return foreign_files(path, "dstore-tfrecord") if fs.isdir(path) else []

    def open_reader(self, path: str) -> Reader:
        if not fs.is_url(path) and os.path.isdir(path):
            # a shard linked out of the folder would be read as this dataset's
            links.check_store(path, self.follow_links, "folder")
        return TFRecordReader(path, self.options.workers, self.follow_links)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        raise NotImplementedError(
            "tfrecord is written shard by shard: use plan_shards and shard_writer"
        )

    def planning_records(self, schema: Schema) -> int:
        return planning_records(schema, self.options.shard_mb * 2**20, _PLAN_SAMPLE)

    def plan_shards(self, schema: Schema, sample: Any) -> list[Shard]:
        """Shards of about ``shard_mb`` each, sized from the encoded first records.

        Encoding a sample (not guessing from raw sizes) makes PNG shards land
        near the target; the sample is the split's first records, so the
        plan is the same on every run over the same data and options."""
        self.check_schema(schema)
        writer = TFRecordShardWriter(schema, self.options)
        return plan_by_size(
            schema,
            sample,
            lambda split, first: [len(r) for r in writer.encode_chunk(split, first)],
            target_bytes=self.options.shard_mb * 1024 * 1024,
            sample_records=_PLAN_SAMPLE,
            suffix=".tfrecord",
        )

    def shard_writer(self, schema: Schema, plan: list[Shard]) -> ShardWriter:
        return TFRecordShardWriter(schema, self.options, plan)

    def shard_file(self, split: str, index: int, total: int) -> str:
        return shard_name(split, index, total, ".tfrecord")

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        images = self.options.image_set()
        for split in schema.splits.values():
            for spec in split.fields.values():
                choose_encoding(spec, spec.name, images, self.options.lossy())
