"""zarr's ``-o`` options (:class:`ZarrOptions`) and which fields they store lossily."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ...errors import UnsupportedDtypeError
from ...images.imagecodec import LOSSY_FORMATS, LossyImage, image_fields
from ...images.options import ImageOptions, image_codec_option, quality_option
from ...model import (
    Image,
)
from ...model.schema import (
    Schema,
)

__all__ = ["ZarrOptions", "lossy_fields"]

_ATTR = "dstore_schema"
#: the root attribute marking a store an append is writing (or a killed one wrote):
#: its arrays may hold records after the committed counts (:mod:`.append`)
GROWING = "dstore_appending"


@dataclass(frozen=True)
class ZarrOptions(ImageOptions):
    IMAGE_CODECS: ClassVar[tuple[str, ...]] = ("none", *LOSSY_FORMATS)
    LOSSLESS: ClassVar[str] = "none"

    cname: str = field(
        default="zstd", metadata={"help": "blosc compressor: zstd, lz4, lz4hc, blosclz, zlib"}
    )
    clevel: int = field(default=3, metadata={"help": "blosc level 0..9"})
    shuffle: str = field(
        default="shuffle", metadata={"help": "blosc filter: shuffle, bitshuffle, noshuffle"}
    )
    chunk_mb: float = field(default=1.0, metadata={"help": "target chunk size in MiB"})
    shard_chunks: int = field(
        default=0,
        metadata={"help": "chunks per shard file (0 = no sharding): many small chunks, few files"},
    )
    # lossy: one chunk per image; zarr users open them with imagecodecs (docs/formats/zarr.md)
    image_codec: str = image_codec_option(IMAGE_CODECS, default="none")
    quality: int = quality_option()

    def compressor(self) -> str:
        """What compresses the arrays, for reports ("blosc zstd 3")."""
        return f"blosc {self.cname} {self.clevel}"

    def validate(self) -> None:
        if self.cname not in ("zstd", "lz4", "lz4hc", "blosclz", "zlib"):
            raise ValueError(f"zarr: unknown blosc cname {self.cname!r}")
        if not 0 <= self.clevel <= 9:
            raise ValueError(f"zarr: clevel must be 0..9. Got {self.clevel} instead.")
        if self.shuffle not in ("shuffle", "bitshuffle", "noshuffle"):
            raise ValueError(
                f"zarr: shuffle must be shuffle, bitshuffle or noshuffle. Got {self.shuffle!r}."
            )
        if self.chunk_mb <= 0:
            raise ValueError("zarr: chunk_mb must be > 0")
        self.check_image_options("zarr")


def lossy_fields(schema: Schema, options: ZarrOptions) -> dict[tuple[str, str], LossyImage]:
    """The image fields ``image_codec`` applies to, each checked it can take it (one line
    naming the field otherwise, before anything is written)."""
    lossy = options.lossy()
    out: dict[tuple[str, str], LossyImage] = {}
    if lossy is None:
        return out
    for split in schema.splits.values():
        for spec in split.fields.values():
            kind = spec.kind
            if isinstance(kind, Image) and kind.encoding == "raw" and not spec.dense:
                raise UnsupportedDtypeError(
                    f"zarr: split {split.name!r}, field {spec.name!r} holds images of varying "
                    f"size: image_codec={lossy.format} needs one chunk per image of one size; "
                    f"use TFRecord with -o image_codec={lossy.format}"
                )
    for split_name, spec in image_fields(schema):
        lossy.check_field(spec, f"zarr: split {split_name!r}", lossless="none", images_option=False)
        out[(split_name, spec.name)] = lossy
    return out


def _codecs_json(metadata: Any) -> str:
    """An array's codec chain as the JSON zarr stores in its metadata, not Python reprs."""
    if metadata.zarr_format >= 3:
        chain = [c.to_dict() for c in metadata.codecs]
    else:
        chain = [f.get_config() for f in metadata.filters or ()]
        if metadata.compressor is not None:
            chain.append(metadata.compressor.get_config())
    return json.dumps(chain, default=str)
