"""Where and how a sharded format stores each field of a record, as its manifest's
``fields`` lists them: a place in the record (a tar member's suffix, an Example's
feature), an encoding and, for a lossy image encoding, its quality."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sized
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ...errors import CodecIOError
from ...images.imagecodec import LossyImage
from ...images.pixels import image_libraries, lossy_of
from ...model.schema import Schema

__all__ = ["StoredField", "describe_table", "read_field_table", "table_json", "table_libraries"]

F = TypeVar("F", bound="StoredField")


@dataclass(frozen=True)
class StoredField:
    """One field's place in a record (stored under :attr:`json_key`) and encoding."""

    #: the manifest key of :attr:`at` (``member``, ``feature``)
    json_key: ClassVar[str] = "at"

    at: str
    encoding: str
    quality: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {self.json_key: self.at, "encoding": self.encoding}
        if self.quality is not None:
            out["quality"] = self.quality
        return out

    @property
    def lossy(self) -> LossyImage | None:
        """The lossy image encoding of this field, None for every other encoding."""
        return lossy_of(self.encoding, self.quality)


def table_json(table: Mapping[str, Mapping[str, StoredField]]) -> dict[str, Any]:
    """A manifest's ``fields``: per split, each field's :meth:`StoredField.to_json`."""
    return {split: {n: e.to_json() for n, e in fields.items()} for split, fields in table.items()}


def table_libraries(
    table: Mapping[str, Mapping[str, StoredField]], png_level: str
) -> dict[str, str]:
    """The image encoders (with versions) the fields of ``table`` are stored with."""
    every = [e for fields in table.values() for e in fields.values()]
    return image_libraries((e.lossy or e.encoding for e in every), png_level)


def describe_table(
    table: Mapping[str, Mapping[str, StoredField]], shards: Mapping[str, Sized], files: str
) -> list[str]:
    """``dstore info``'s line per split of ``shards``: its number of ``files`` and where
    and how each field is stored."""
    return [
        f"{split}: {len(files_of)} {files}; "
        + ", ".join(f"{n}: {e.at} ({e.encoding})" for n, e in table[split].items())
        for split, files_of in shards.items()
    ]


def read_field_table(
    cls: type[F], manifest: Mapping[str, Any], schema: Schema, known: Collection[str], where: str
) -> dict[str, dict[str, F]]:
    """The fields a manifest lists per split, checked against its schema and the format's
    ``known`` encodings: anything else is one line naming the split and field."""
    try:
        table = {
            split: {n: cls(e[cls.json_key], e["encoding"], e.get("quality")) for n, e in f.items()}
            for split, f in manifest["fields"].items()
        }
    except (KeyError, TypeError, AttributeError) as e:
        raise CodecIOError(f"{where}: unreadable manifest: {e}") from None
    if set(table) != set(schema.splits):
        raise CodecIOError(f"{where}: splits of the schema and fields disagree (corrupt manifest)")
    for split, fields in table.items():
        if set(fields) != set(schema.splits[split].fields):
            raise CodecIOError(f"{where}: split {split!r}: fields disagree with the schema")
        for name, enc in fields.items():
            try:
                enc.lossy  # noqa: B018 - checks the quality a lossy field declares
                ok = enc.encoding in known
            except ValueError:
                ok = False
            if not ok:
                raise CodecIOError(
                    f"{where}: split {split!r}, field {name!r}: bad encoding {enc.to_json()}"
                )
    return table
