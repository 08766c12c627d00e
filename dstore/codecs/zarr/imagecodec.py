"""zarr v3 codecs for imagecodecs' numcodecs JPEG, WebP and JPEG XL (``-o image_codec=``).

A lossy image field is one zarr array chunked one image per chunk, whose
array-to-bytes codec is imagecodecs' numcodecs codec (``imagecodecs_jpeg``,
``imagecodecs_webp``, ``imagecodecs_jpegxl``), named in the array metadata
the way zarr-python names every numcodecs codec in a v3 array:
``{"name": "numcodecs.imagecodecs_jpeg", "configuration": {"level": 90}}``.

zarr-python 3 resolves a codec name through its own registry, which has no
entry for imagecodecs' names (imagecodecs registers with numcodecs only), so
this module registers one zarr codec class per name -- in this process when
dstore writes or reads, and for every process through the ``zarr.codecs``
entry points dstore's package declares. Without dstore, the same takes five
lines (docs/formats/zarr.md, "Lossy images in zarr without dstore").
"""

from __future__ import annotations

from typing import Any

import zarr.registry
from zarr.codecs.numcodecs import _NumcodecsArrayBytesCodec

from ...images.imagecodec import LossyImage

__all__ = ["Jpeg", "Jpegxl", "Webp", "lossy_of", "zarr_codec"]

_PREFIX = "numcodecs."


class _ImageCodec(_NumcodecsArrayBytesCodec):
    """imagecodecs' numcodecs codec as a zarr v3 array-to-bytes codec."""

    def __init__(self, **codec_config: Any) -> None:
        # zarr's base warns on every construction that numcodecs codecs are outside
        # the v3 specification; the docs say so once, per array would be noise
        # (and pytest turns warnings into errors).
        own = self.codec_name.removeprefix(_PREFIX)
        codec_config.pop("id", None)
        object.__setattr__(self, "codec_config", {"id": own, **codec_config})

    @property
    def _codec(self) -> Any:
        # imagecodecs' own numcodecs class, built from the stored configuration
        # (zarr's base asks numcodecs' registry, which needs register_codecs() first)
        import imagecodecs.numcodecs as icn

        cached = self.__dict__.get("_built")
        if cached is None:
            classes: dict[str, type[icn.Jpeg | icn.Webp | icn.Jpegxl]] = {
                "imagecodecs_jpeg": icn.Jpeg,
                "imagecodecs_webp": icn.Webp,
            }
            cls = classes.get(str(self.codec_config["id"]), icn.Jpegxl)
            cached = cls.from_config({k: v for k, v in self.codec_config.items() if k != "id"})
            object.__setattr__(self, "_built", cached)
        return cached


class Jpeg(_ImageCodec, codec_name="imagecodecs_jpeg"):
    pass


class Webp(_ImageCodec, codec_name="imagecodecs_webp"):
    pass


class Jpegxl(_ImageCodec, codec_name="imagecodecs_jpegxl"):
    pass


_BY_FORMAT: dict[str, type[_ImageCodec]] = {"jpeg": Jpeg, "webp": Webp, "jxl": Jpegxl}
# zarr annotates codec_name as an instance field, though its __init_subclass__ sets it
# on the class (as codec_name= above does): mypy sees no class attribute.
_FORMAT_OF = {cls.codec_name: fmt for fmt, cls in _BY_FORMAT.items()}  # type: ignore[misc]

for _cls in _BY_FORMAT.values():
    zarr.registry.register_codec(_cls.codec_name, _cls)  # type: ignore[misc]


def zarr_codec(lossy: LossyImage) -> _ImageCodec:
    """The zarr serializer for ``lossy``: quality is imagecodecs' ``level``; WebP and
    JPEG XL are told lossy explicitly (imagecodecs' defaults are lossless)."""
    config: dict[str, Any] = {"level": lossy.quality}
    if lossy.format != "jpeg":
        config["lossless"] = False
    return _BY_FORMAT[lossy.format](**config)


def lossy_of(arr: Any) -> LossyImage | None:
    """The lossy encoding of a zarr v3 array whose serializer is one of these codecs."""
    meta = arr.metadata
    if getattr(meta, "zarr_format", 2) < 3:
        return None
    for codec in meta.codecs:
        name = getattr(codec, "codec_name", None)
        if name in _FORMAT_OF:
            level = codec.codec_config.get("level")
            return LossyImage(_FORMAT_OF[name], int(level) if level is not None else 75)
    return None
