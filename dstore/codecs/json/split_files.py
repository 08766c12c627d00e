"""JSON Lines of several splits: a folder holding one JSON Lines file per split.

One file can hold the records of one split only, for every reader of JSON Lines
that is not dstore: pandas and ``datasets`` read a file's lines as one table, and a
Croissant reader (mlcroissant) reads a record set from whole files, with no way to
take some lines of a file and not others. So a dataset of several splits written
as JSON Lines is a folder (named as the user named the output, ``out.jsonl``)::

    out.jsonl/
        train.jsonl     the records of split "train", as a one-split JSON Lines file
        test.jsonl      the same for "test": each file reads alone, with dstore too
        dstore.json     the manifest (:mod:`dstore.sharding.manifest`): the splits in
                        order, each one's file with its size and sha256, the schema
        croissant.json  the card (:mod:`dstore.card`)

A split without records has no file (the manifest and the schema hold it). The
manifest is not trusted: its counts must be its schema's, each split's one file a
regular file inside the folder of the size listed, whose own schema, carried by its
last record, names the split the manifest gives it, with its count, fields and the
dataset's attributes; ``dstore verify`` compares every file with its sha256 too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from ... import fs, links
from ...abc import Reader, Writer
from ...errors import CodecIOError, SchemaError
from ...fs import is_regular_file
from ...model import names as naming
from ...model.schema import Batch, Schema, SplitSpec
from ...sharding.manifest import (
    MANIFEST,
    check_compression,
    check_shards,
    is_manifest_of,
    load_manifest,
    manifest_base,
    manifest_schema,
)
from .writer import JsonWriter

__all__ = ["FORMAT_ID", "SplitFilesReader", "SplitFilesWriter", "is_split_folder", "split_file"]

#: the manifest's ``format`` value
FORMAT_ID = "dstore-jsonl"


def split_file(split: str) -> str:
    """The file of a split's records in the folder (``a/b`` -> ``a%2Fb.jsonl``)."""
    return f"{naming.escape(split)}.jsonl"


def is_split_folder(path: str) -> bool:
    """True when ``path`` is a folder holding dstore's manifest of JSON Lines splits."""
    return fs.isdir(path) and is_manifest_of(path, FORMAT_ID)


def _one_split(schema: Schema, split: str, checksums: dict[str, dict[str, str]]) -> Schema:
    """The schema a split's own file carries: that split, the dataset's attributes and
    versions, the split's checksums."""
    held = {split: checksums[split]} if split in checksums else {}
    return Schema({split: schema.splits[split]}, dict(schema.attrs), held, list(schema.versions))


class SplitFilesWriter(Writer):
    """Writes each split to its own file as it comes (one file open at a time: a split's
    file is parked when another's records come; each one's schema, written last, holds
    the checksums the caller sets before ``close``), then the manifest."""

    def __init__(self, path: str, schema: Schema) -> None:
        super().__init__(path, schema)
        naming.check_case_distinct(
            ((s, split_file(s)) for s in schema.splits), "splits", "a JSON Lines folder"
        )
        try:
            os.mkdir(path)
        except OSError as e:
            raise CodecIOError(f"{path}: cannot create: {e.strerror or e}") from None
        self._writers: dict[str, JsonWriter] = {}
        self._last: JsonWriter | None = None

    def write(self, split: str, batch: Batch) -> None:
        writer = self._writers.get(split)
        if self._last is not None and self._last is not writer:
            self._last.park()  # one file open at a time, however many splits
        if writer is None:
            if split not in self.schema.splits:
                raise SchemaError(f"split {split!r} is unknown")
            own = _one_split(self.schema, split, {})
            writer = JsonWriter(os.path.join(self.path, split_file(split)), own, True)
            self._writers[split] = writer
        self._last = writer
        writer.write(split, batch)

    def close(self) -> None:
        entries: dict[str, dict[str, Any]] = {}
        for split, spec in self.schema.splits.items():
            shards = []
            writer = self._writers.get(split)
            if writer is not None and spec.count:
                writer.schema.checksums = _one_split(
                    self.schema, split, self.schema.checksums
                ).checksums
                writer.close()
                size, sha = fs.sha256_file(writer.path)
                shards.append(
                    {"file": split_file(split), "records": spec.count, "bytes": size, "sha256": sha}
                )
            elif writer is not None:  # a batch of no records: no file for an empty split
                writer.abort()
                os.remove(writer.path)
            entries[split] = {"count": spec.count, "shards": shards}
        manifest = {
            **manifest_base(FORMAT_ID, None),
            "schema": self.schema.to_json(),
            "splits": entries,
        }
        with open(os.path.join(self.path, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, allow_nan=False)
            f.write("\n")

    def abort(self) -> None:
        for writer in self._writers.values():
            writer.abort()


class SplitFilesReader(Reader):
    """The splits of a JSON Lines folder, each read from its own file."""

    def __init__(self, path: str, follow_links: bool = False) -> None:
        self.path = self.root = path
        #: read a split file or manifest linked in from outside the folder (else refused)
        self.follow_links = follow_links
        where = fs.join(path, MANIFEST)
        if not fs.exists(where):
            raise CodecIOError(
                f"{path}: a folder without {MANIFEST} (dstore's manifest of its splits)"
            )
        if not fs.is_url(path):
            links.check_inside(path, [where], follow_links)  # nothing read from outside
        if not is_regular_file(where):  # a FIFO would block the read for ever
            raise CodecIOError(f"{where}: not a regular file (a folder, FIFO or device)")
        self.manifest = load_manifest(where)
        if self.manifest.get("format") != FORMAT_ID:
            raise CodecIOError(
                f"{where}: format {self.manifest.get('format')!r}, not a JSON Lines folder's "
                f"({FORMAT_ID!r})"
            )
        check_compression(self.manifest, (None,), "jsonl", where)
        self.schema = manifest_schema(self.manifest, where)
        self._readers: dict[str, Reader] = {}
        self.shards: dict[str, list[Any]] = {}
        for split, info in self.manifest["splits"].items():
            if len(info["shards"]) > 1:
                raise CodecIOError(
                    f"{where}: split {split!r} lists {len(info['shards'])} files; a JSON Lines "
                    "folder holds one per split"
                )
            for entry in info["shards"]:
                reader = self._open(split, entry)
                self._readers[split] = reader
                self.shards[split] = [reader]

    def _open(self, split: str, entry: dict[str, Any]) -> Reader:
        """The reader of split ``split``'s file (its manifest ``entry``), once the file is
        found a regular file inside the folder, of the size listed, with the split's schema."""
        from .reader import JsonReader
        from .stream import open_streamed

        file = fs.join(self.path, entry["file"])
        if not fs.is_url(file):
            links.check_inside(self.path, [file], self.follow_links)
            if fs.exists(file) and not is_regular_file(file):
                raise CodecIOError(
                    f"{file}: not a regular file (a folder, FIFO or device), where the "
                    f"manifest lists split {split!r}"
                )
        if fs.exists(file) and fs.getsize(file) != entry["bytes"]:
            raise CodecIOError(
                f"{file}: {fs.getsize(file)} bytes, the manifest lists {entry['bytes']} for "
                f"split {split!r} (another file, or changed since it was written)"
            )
        # a file edited by hand (a blank line) is read whole, as alone
        reader = open_streamed(file, True) or JsonReader(file, True)
        self._check(file, split, reader.schema)
        return reader

    def _check(self, file: str, split: str, own: Schema) -> None:
        """The file's own schema must be the manifest's for its split: the same name,
        count and fields, the dataset's attributes."""
        expected = _one_split(self.schema, split, self.schema.checksums)
        if own.to_json() != expected.to_json():
            raise CodecIOError(
                f"{file}: its schema is not split {split!r} of {fs.join(self.path, MANIFEST)} "
                "(a file of another dataset, or a changed one)"
            )

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        reader = self._readers.get(spec.name)
        if reader is None:
            return iter(())
        return reader._iter(reader.schema.splits[spec.name], names, start, stop, rows)

    def check_integrity(self) -> list[tuple[bool, str]]:
        return check_shards(self.path, self.manifest)
