"""HDF5's ``-o`` options (:class:`HDF5Options`) and the filters they choose
(gzip, lzf, shuffle; blosc and zstd through ``hdf5plugin``)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ...errors import MissingDependencyError
from ...images.imagecodec import LOSSY_FORMATS
from ...images.options import ImageOptions, image_codec_option, quality_option
from ...model.schema import FieldSpec
from ..arraytree.chunked import chunk_rows

__all__ = ["HDF5Options"]

_ATTR = "dstore_schema"


def _plugins() -> Any:
    """hdf5plugin registers blosc/zstd/lz4 filters with HDF5 when imported; optional."""
    try:
        import hdf5plugin
    except ImportError:
        return None
    return hdf5plugin


def _lzf() -> Any:
    """imagecodecs' liblzf (the same LZF h5py's filter uses), if installed."""
    try:
        import imagecodecs
    except ImportError:
        return None
    return imagecodecs


def _deflate(data: Any, level: int) -> bytes:
    """A zlib stream of ``data`` at ``level``, as HDF5's deflate filter stores a chunk.

    libdeflate (imagecodecs, when installed) compresses photo tiles at level 4
    about twice as fast as zlib to the same size (0.67 of the raw tiles either
    way); its output depends only on the data, the level and its version, and
    any zlib reads it. Without imagecodecs: zlib."""
    codecs = _lzf()
    if codecs is not None and hasattr(codecs, "deflate_encode"):
        return bytes(codecs.deflate_encode(data, level=level))
    return zlib.compress(data, level)


#: Filter ids of plain HDF5 (deflate, shuffle, fletcher32, szip, nbit, scaleoffset) and h5py's lzf.
_STANDARD_FILTERS = {1, 2, 3, 4, 5, 6, 32000}


@dataclass(frozen=True)
class HDF5Options(ImageOptions):
    IMAGE_CODECS: ClassVar[tuple[str, ...]] = ("none", *LOSSY_FORMATS)
    LOSSLESS: ClassVar[str] = "none"

    compression: str = field(
        default="gzip",
        metadata={"help": "gzip, lzf or none; blosc or zstd need hdf5plugin (also to read them)"},
    )
    level: int = field(default=4, metadata={"help": "compression level 0..9 (gzip, blosc, zstd)"})
    shuffle: bool = field(
        default=False, metadata={"help": "byte-shuffle filter before compressing"}
    )
    chunk_mb: float = field(default=1.0, metadata={"help": "target chunk size in MiB"})
    # A record is read at random (a global shuffle, a map-style dataset) by decoding its
    # whole chunk: with 5 photo tiles of 192 KiB to a chunk, each index decompressed 5
    # (map-style at 0.19x the ordered epoch). A chunk of its own costs a large record
    # almost nothing (an index entry; deflate's window is 32 KiB).
    record_chunk_kb: float = field(
        default=64.0,
        metadata={
            "help": "records of at least this many KiB get a chunk each (a random read "
            "decodes its record only); 0: chunks of chunk_mb whatever the record size"
        },
    )
    # refuse up front when the destination's free space or the process's file size
    # limit is below an upper bound of the file's size (raw data: compression is not
    # guaranteed); false tries anyway, and a full disk is then reported when it happens
    check_space: bool = field(
        default=True,
        metadata={
            "help": "refuse before writing when free space or ulimit -f is below the file's upper bound"
        },
    )

    # a lossy value is refused when a field would take it: no HDF5 filter plugin for
    # jpeg, webp or jxl exists in hdf5plugin (use zarr or TFRecord)
    image_codec: str = image_codec_option(IMAGE_CODECS, default="none")
    quality: int = quality_option()

    def chunk_rows(self, spec: FieldSpec, count: int) -> int:
        """Records per chunk of a fixed-shape field: one for records of at least
        ``record_chunk_kb``, else about ``chunk_mb`` of them."""
        if self.record_chunk_kb and spec.record_bytes >= self.record_chunk_kb * 1024:
            return 1
        return chunk_rows(spec, count, int(self.chunk_mb * 1024 * 1024))

    def compressor(self) -> str:
        """What compresses the arrays, for reports ("gzip 4", "lzf", "none")."""
        if self.compression in ("none", "lzf"):
            return self.compression
        return f"{self.compression} {self.level}"

    def validate(self) -> None:
        self.check_image_options("hdf5")
        if self.compression not in ("gzip", "lzf", "none", "blosc", "zstd"):
            raise ValueError(
                f"hdf5: compression must be gzip, lzf, none, blosc or zstd. Got {self.compression!r}."
            )
        if self.compression in ("blosc", "zstd") and _plugins() is None:
            raise MissingDependencyError(f"hdf5 {self.compression}", "hdf5-plugins", "hdf5plugin")
        if self.chunk_mb <= 0:
            raise ValueError(f"hdf5: chunk_mb must be > 0. Got {self.chunk_mb} instead.")
        if self.record_chunk_kb < 0:
            raise ValueError(
                f"hdf5: record_chunk_kb must be >= 0. Got {self.record_chunk_kb} instead."
            )
        if not 0 <= self.level <= 9:
            raise ValueError(f"hdf5: level must be 0..9. Got {self.level} instead.")
