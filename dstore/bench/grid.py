"""The bench grid's axes: image encodings and feature precisions, parsed strictly.

``--images png,jpeg:95,webp:90`` and ``--dtypes keep,float16,round:10,int8`` name
values from a fixed vocabulary. A value outside it (``jpeg:0``, ``float8``) is a
usage error before any work. A value inside it that this installation cannot
write yet (a codec without the ``image_codec`` option, a dtype policy the
dtype module does not know) is not an error: its cells are reported as
"not supported: <why>", so one grid runs on every dstore version and fills in
as codecs gain encodings.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..engine.dtypes import parse_policy
from ..errors import DstoreError, UsageError
from ..images.options import NAMED_PNG_LEVELS

__all__ = [
    "DTYPE_VOCABULARY",
    "IMAGE_ENCODINGS",
    "ImageEncoding",
    "dtype_support",
    "image_options",
    "parse_dtypes",
    "parse_images",
]

#: Lossy image encodings the grid knows; ``png`` is each format's lossless default.
IMAGE_ENCODINGS = ("png", "jpeg", "webp", "jxl")
#: The ``-o`` option that chooses the image encoding, in every format.
_IMAGE_OPTION = "image_codec"
#: Feature precisions the grid knows (``round:N`` keeps N float32 mantissa bits).
DTYPE_VOCABULARY = ("keep", "float32", "float16", "float64", "bfloat16", "round:N", "int8", "uint8")
_ROUND = re.compile(r"round:(\d+)$")
_QUANT = re.compile(r"u?int8(:channel)?$")


#: ``png:LEVEL`` values: the formats' ``png_level`` names, or a zlib level.
PNG_LEVELS = (*NAMED_PNG_LEVELS, *map(str, range(10)))


@dataclass(frozen=True)
class ImageEncoding:
    """One value of ``--images``: an encoding and, for lossy ones, a quality 1..100;
    ``png`` may name a level (``png:fastest``, ``png:6``)."""

    name: str
    quality: int | None = None
    level: str | None = None  # png only

    def __str__(self) -> str:
        if self.level is not None:
            return f"{self.name}:{self.level}"
        return self.name if self.quality is None else f"{self.name}:{self.quality}"

    @property
    def lossless(self) -> bool:
        return self.name == "png"


def parse_images(values: Sequence[str]) -> list[ImageEncoding]:
    """``["png", "jpeg:95"]`` -> encodings; anything else is one UsageError line."""
    out: list[ImageEncoding] = []
    for raw in values:
        text = raw.strip().lower()
        if not text:
            continue
        name, sep, q = text.partition(":")
        if name not in IMAGE_ENCODINGS:
            raise UsageError(
                f"--images: {raw!r} is not an image encoding; valid: png, png:LEVEL, jpeg:Q, "
                "webp:Q, jxl:Q (Q = quality 1..100)"
            )
        if name == "png":
            if sep and q not in PNG_LEVELS:
                raise UsageError(
                    f"--images: {raw!r}: png takes a level, not a quality: "
                    f"png:{', png:'.join(NAMED_PNG_LEVELS)} or png:0..9"
                )
            enc = ImageEncoding("png", level=q if sep else None)
        else:
            if not q.isdigit() or not 1 <= int(q) <= 100:
                raise UsageError(
                    f"--images: {raw!r}: give a quality 1..100 after the colon, e.g. {name}:90"
                )
            enc = ImageEncoding(name, int(q))
        if enc in out:
            raise UsageError(f"--images: {raw!r} is given twice")
        out.append(enc)
    if not out:
        raise UsageError("--images: give at least one image encoding (png, jpeg:90, ...)")
    return out


def _in_vocabulary(target: str) -> bool:
    m = _ROUND.match(target)
    if m:
        return 0 <= int(m.group(1)) <= 23  # float32 has 23 explicit mantissa bits
    return target in DTYPE_VOCABULARY or bool(_QUANT.match(target))


def dtype_support(spec: str) -> str | None:
    """None when this dstore applies ``spec``; else why not (one line).

    A spec outside the vocabulary is a UsageError: a typo must not become a
    quiet "not supported" row.
    """
    try:
        parse_policy(spec)
        return None
    except DstoreError:
        targets = [part.partition("=")[2] or part for part in spec.split(",") if part.strip()]
        if targets and all(_in_vocabulary(t.strip()) for t in targets):
            return f"dtype policy {spec!r} is not in this dstore"
        raise UsageError(
            f"--dtypes: {spec!r} is not a dtype policy; valid: keep, float32, float16, float64, "
            "bfloat16, round:N (N = 0..23 mantissa bits), int8, uint8 (or FIELD=POLICY)"
        ) from None


def parse_dtypes(values: Sequence[str]) -> list[str]:
    """Strip, refuse duplicates and unknown policies (see :func:`dtype_support`)."""
    out = [v.strip() for v in values if v.strip()]
    if not out:
        raise UsageError("--dtypes: give at least one dtype policy (keep, float32, float16, ...)")
    for v in out:
        dtype_support(v)
        if out.count(v) > 1:
            raise UsageError(f"--dtypes: {v!r} is given twice")
    return out


def image_options(codec_cls: Any, fmt: str, enc: ImageEncoding) -> dict[str, Any] | str:
    """The ``-o`` options that make format ``fmt`` store images as ``enc``, or why it can't.

    ``png`` is each format's lossless default (no option); ``png:LEVEL`` maps to
    ``png_level`` where the format encodes PNGs of a chosen level. A lossy encoding
    maps to ``image_codec`` + ``quality``; a codec whose options lack them, or that
    refuses the values, cannot take it here.
    """
    options_cls = getattr(codec_cls, "Options", None)
    fields = (
        {f.name for f in dataclasses.fields(options_cls)}
        if options_cls is not None and dataclasses.is_dataclass(options_cls)
        else set()
    )
    if enc.lossless:
        if enc.level is None:
            return {}
        if "png_level" not in fields:
            return f"{fmt} has no -o png_level= option (no PNG levels)"
        return {"png_level": enc.level}
    key = _IMAGE_OPTION
    if key not in fields or "quality" not in fields:
        return f"{fmt} has no -o {key}=/quality= option (no lossy image encodings)"
    options = {key: enc.name, "quality": enc.quality}
    try:
        codec_cls.parse_options(options)
    except (ValueError, DstoreError) as e:
        return f"{fmt} -o {key}={enc.name} quality={enc.quality}: {e}".splitlines()[0]
    return options
