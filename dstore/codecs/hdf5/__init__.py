"""HDF5 files through h5py: one group per split, one chunked dataset per field.

Written: chunks along the record axis (about ``chunk_mb`` each; one record each for
records of ``record_chunk_kb`` or more, so a random read decodes its own), gzip level 4
by default (``lzf`` and ``none`` too), optional byte shuffle; the schema sits
in the root attributes. Read: any HDF5 file; datasets in the root form the
default split (``x_train`` style names map to splits), each group a split.
Datasets dstore cannot carry (strings, compound, references) and datasets
compressed with a filter that is not installed are refused by name.
"""

from __future__ import annotations

from ... import fs
from ...abc import Codec, Reader, Writer
from ...errors import UnsupportedDtypeError
from ...fs import is_regular_file, read_at
from ...images.imagecodec import image_fields
from ...model import Bytes, Image, Ragged, String, StringList, Tensor, names
from ...model.attrs import for_hdf5, target_notes
from ...model.schema import Schema
from .options import HDF5Options, _plugins
from .reader import HDF5Reader
from .writer import HDF5Writer

__all__ = ["HDF5Codec", "HDF5Reader", "HDF5Writer"]

_SIGNATURE = b"\x89HDF\r\n\x1a\n"


class HDF5Codec(Codec):
    """HDF5 files via h5py (gzip/lzf compression, chunked along records)."""

    name = "hdf5"
    media_type = "application/x-hdf5"
    extensions = (".h5", ".hdf5", ".he5", ".hdf")
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    keeps_empty_rows = False  # a vlen record is its values only
    bfloat16_as = "uint16"  # HDF5 1.14 has no bfloat16 type (h5py writes it as opaque V2)
    Options = HDF5Options

    @classmethod
    def owns(cls, path: str) -> bool:
        """A file with the HDF5 signature at 0, or after a user block (512, 1024, 2048, ... bytes)."""
        if not is_regular_file(path):
            return False
        size = fs.getsize(path)
        offset = 0
        while offset + len(_SIGNATURE) <= size:
            if read_at(path, offset, len(_SIGNATURE)) == _SIGNATURE:
                return True
            offset = 512 if offset == 0 else offset * 2
        return False

    def open_reader(self, path: str) -> Reader:
        return HDF5Reader(path, self.follow_links)

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        fmt = self.options.image_codec
        if fmt == "none":
            return
        # A lossy HDF5 filter would need a plugin every reader installs; hdf5plugin (the
        # one h5py users have) registers none for these codecs: refuse, naming a way that works.
        plugins = _plugins()
        shipped = ", ".join(sorted(plugins.FILTERS)) if plugins is not None else "not installed"
        where = "hdf5"
        first = next(image_fields(schema), None)
        if first is not None:
            where = f"hdf5: split {first[0]!r}, field {first[1].name!r}"
        raise UnsupportedDtypeError(
            f"{where}: no HDF5 filter plugin for {fmt} exists (hdf5plugin: {shipped}); "
            f"write zarr or TFRecord with -o image_codec={fmt}, "
            "or keep HDF5 lossless"
        )

    def open_writer(self, path: str, schema: Schema) -> Writer:
        self.check_schema(schema)
        names.check_tree(schema, self.name)  # before any byte: a raw h5py/zarr error otherwise
        return HDF5Writer(path, schema, self.options)

    def attribute_notes(self, schema: Schema) -> list[str]:
        return target_notes(schema, self.name, for_hdf5)
