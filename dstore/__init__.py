"""dstore: move ML datasets between npz, zarr, HDF5 and TFRecord, and measure the cost.

Importing dstore is light: numpy only. zarr, h5py, image codecs, TensorFlow,
scikit-learn and matplotlib are imported when a codec or feature needs them.
"""

from __future__ import annotations

from typing import Any

# The bench package shares the function's name; importing the function last
# makes ``dstore.bench`` the function (scikit-learn and matplotlib load lazily).
from ._dist import __version__
from .api import ConvertReport, Dataset, VerifyReport, convert, info, open, save, verify
from .dtypes import DtypePolicy, parse_policy
from .errors import (
    CodecIOError,
    DstoreError,
    DtypePolicyError,
    MissingDependencyError,
    OldOutputLeftError,
    OutputExistsError,
    SchemaError,
    UnknownCodecError,
    UnsupportedDtypeError,
)
from .registry import available_codecs, get_codec, get_codec_class, infer_codec, register_codec
from .schema import FieldSpec, Schema, SplitSpec

from .bench import bench  # noqa: E402, I001 - after the modules it uses


__all__ = [
    "CodecIOError",
    "ConvertReport",
    "Dataset",
    "DstoreError",
    "DtypePolicy",
    "DtypePolicyError",
    "FieldSpec",
    "MissingDependencyError",
    "OldOutputLeftError",
    "OutputExistsError",
    "Schema",
    "SchemaError",
    "SplitSpec",
    "UnknownCodecError",
    "UnsupportedDtypeError",
    "VerifyReport",
    "__version__",
    "available_codecs",
    "bench",
    "convert",
    "get_codec",
    "get_codec_class",
    "infer_codec",
    "info",
    "open",
    "parse_policy",
    "register_codec",
    "save",
    "to_tf_dataset",
    "to_torch",
    "verify",
]


def to_tf_dataset(path: str, split: str = "train", **kwargs: Any) -> Any:
    """A ``tf.data.Dataset`` over a dstore TFRecord directory (needs the ``tf`` extra)."""
    from .tf import to_tf_dataset as _impl

    return _impl(path, split=split, **kwargs)


def to_torch(path: str, split: str = "train", **kwargs: Any) -> Any:
    """A PyTorch ``IterableDataset`` (or with ``map_style=True`` a ``Dataset``) of
    ``{field: tensor}`` records of any format (needs the ``torch`` extra)."""
    try:
        from .readers.torch import to_torch as _impl
    except ImportError as e:
        if e.name != "torch":
            raise
        raise MissingDependencyError("to_torch", "torch", "torch") from e

    return _impl(path, split=split, **kwargs)
