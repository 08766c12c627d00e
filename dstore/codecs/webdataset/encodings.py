"""Which member each field becomes in a sample (the table: docs/formats/webdataset.md)."""

from __future__ import annotations

from typing import ClassVar

from ...errors import UnsupportedDtypeError
from ...model import Image, Ragged, String, StringList, Tensor, names
from ...model.schema import FieldSpec
from .._imagecodec import LossyImage, is_image_like
from .._stored_fields import StoredField

__all__ = ["EXT_IMAGE", "FieldEncoding", "choose_encoding"]

#: a member's extension by its encoding (:data:`.._record_bytes.ENCODINGS`) where they differ
_EXT = {"jpeg": "jpg", "json-base64": "json", "tiff": "tif"}
#: an encoded image's encoding by its extension (foreign tars)
EXT_IMAGE = {"png": "png", "jpg": "jpeg", "jpeg": "jpeg", "webp": "webp"}


class FieldEncoding(StoredField):
    """A field's member suffix in a sample (``x.png``; a foreign ``jpg``) and encoding."""

    json_key: ClassVar[str] = "member"


def choose_encoding(spec: FieldSpec, lossy: LossyImage | None) -> FieldEncoding:
    """How ``spec`` is stored; raw images take ``lossy`` (refused by name when they cannot)."""
    kind = spec.kind
    if isinstance(kind, Image) and kind.encoding != "raw":
        enc, ext = "encoded", _EXT.get(kind.encoding, kind.encoding)
    elif isinstance(kind, Image) or (isinstance(kind, Tensor) and is_image_like(spec)):
        enc = "png" if lossy is None else lossy.format
        if lossy is not None:
            try:
                lossy.check_field(spec, "webdataset", images_option=False)
            except UnsupportedDtypeError as e:  # it names zarr's lossless setting; ours is png
                raise UnsupportedDtypeError(str(e).replace("codec=none", "codec=png")) from None
    elif isinstance(kind, Tensor) and kind.shape == () and kind.dtype.kind in "iu":
        enc = "cls"
    elif isinstance(kind, (Tensor, Ragged)):
        enc = "npy"
    elif isinstance(kind, String):
        enc = "txt"
    elif isinstance(kind, StringList):
        enc = "json" if kind.text else "json-base64"
    else:
        enc = "bin"
    if enc != "encoded":
        ext = _EXT.get(enc, enc)
    quality = lossy.quality if lossy is not None and enc == lossy.format else None
    # escaped, no "." or "/" left: WebDataset's split at dots finds the key and the field
    return FieldEncoding(f"{names.escape_dotless(spec.name)}.{ext}", enc, quality)
