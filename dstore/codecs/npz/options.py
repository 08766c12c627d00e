"""Options and constants of the npz format (the zip layout both halves share)."""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass, field

_COMMENT_PREFIX = b"dstore-schema:"
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # reproducible archives
_COPY_CHUNK = 8 * 1024 * 1024

_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError)


@dataclass(frozen=True)
class NpzOptions:
    compress: bool = field(
        default=True, metadata={"help": "deflate each member (false: stored, like np.savez)"}
    )
    level: int = field(
        default=6,
        metadata={"help": "zlib level, 1 fastest .. 9 smallest (6: np.savez_compressed's)"},
    )
    workers: int = field(default=0, metadata={"help": "threads compressing; 0 = one per core"})
    check_space: bool = field(
        default=True,
        metadata={
            "help": "refuse before writing when free space or ulimit -f is below the "
            "archive's raw fixed-size data"
        },
    )
    drop: str = field(
        default="",
        metadata={
            "help": "reading: keys to leave out, comma-separated (a member whose record count "
            "does not line up with the others, e.g. pyspacer's meta); also --drop KEY"
        },
    )

    def compressor(self) -> str:
        """What compresses the arrays, for reports ("deflate 6"; "none": stored)."""
        return f"deflate {self.level}" if self.compress else "none"

    def validate(self) -> None:
        if not 0 <= self.level <= 9:
            raise ValueError(f"npz: level must be 0..9. Got {self.level} instead.")
        if self.workers < 0:
            raise ValueError(f"npz: workers must be >= 0. Got {self.workers} instead.")


#: Member suffixes of a field whose records vary (TensorFlow's RaggedTensor names):
#: ``K.values.npy`` (all records' values), ``K.row_splits.npy`` (records + 1 offsets
#: into them), and for raw images of varying size ``K.shapes.npy`` (each record's shape).
_VALUES, _ROW_SPLITS, _SHAPES = ".values", ".row_splits", ".shapes"
