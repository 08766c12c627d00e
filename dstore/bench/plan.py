"""Which cells a bench measures: only the choices that change what is stored.

* A dtype policy that changes no field of the data (``float32`` on float32
  features, any cast on integer tiles) would repeat ``keep``'s cell: it is not
  measured, and one line says which were left out and why.
* Image fields get the image choices instead: ``png`` (each format's lossless
  default: PNG where the format encodes images, raw pixels plus its compressor
  elsewhere), ``png:LEVEL`` where the format has a PNG level, ``jpeg:Q`` /
  ``webp:Q`` / ``jxl:Q`` where it has a lossy image codec (:func:`.grid.image_options`
  asks the codec's own options). A choice a format cannot take is not a cell
  there either (one line). Without image fields, lossy choices named by the
  user are left out with a line, and the default adds none.
* Formats that store values as text (the codec's ``stores_text`` flag: JSON)
  hold image tiles as long lists of numbers: left out when the data has image
  fields, unless named with ``--formats`` (one line).

What each cell stores its images as (``PNG``, ``JPEG q90``, ``raw + blosc zstd 3``)
comes from the codec's options (their ``image_codec`` value and the
``compressor()`` they describe), never from the format's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine.dtypes import parse_policy
from ..errors import DstoreError
from ..model.schema import Schema
from ..registry import get_codec_class
from .grid import ImageEncoding, dtype_support, image_options, parse_images

__all__ = ["AUTO_IMAGES", "CellSpec", "default_settings", "plan_cells"]

#: ``--images auto`` (the default) on data with image fields: lossless and one JPEG.
AUTO_IMAGES = ("png", "jpeg:90")
#: What ``image_codec`` values store, in reports.
_CODEC_NAMES = {"png": "PNG", "jpeg": "JPEG", "webp": "WebP", "jxl": "JPEG XL"}


def default_settings(fmt: str, grid: bool) -> list[dict[str, Any]]:
    """Codec options per cell: the defaults first; ``grid`` adds compressor/level variants."""
    base: list[dict[str, Any]] = [{}]
    if not grid:
        return base
    extra: dict[str, list[dict[str, Any]]] = {
        "npz": [{"level": 1}, {"level": 9}, {"compress": False}],
        "zarr": [{"cname": "lz4"}, {"cname": "zstd", "clevel": 7}, {"shuffle": "bitshuffle"}],
        "hdf5": [{"compression": "lzf"}, {"level": 9, "shuffle": True}, {"compression": "none"}],
        "tfrecord": [{"png_level": "6"}, {"compression": "gzip"}],
    }
    return base + extra.get(fmt, [])


@dataclass(frozen=True)
class CellSpec:
    """One cell to measure: format, codec options, image choice and dtype policy."""

    format: str
    dtype: str
    options: dict[str, Any]
    images: str  # the --images choice ("png", "jpeg:90"); "-" without image fields
    image_options: dict[str, Any] = field(default_factory=dict)
    stored: str = ""  # what is stored: "PNG", "JPEG q90", "raw + deflate 6", "zstd 3"

    @property
    def write_options(self) -> dict[str, Any]:
        return {**self.options, **self.image_options}


def stored_as(codec_cls: Any, options: dict[str, Any], has_images: bool) -> str:
    """``PNG``, ``JPEG q90``, ``raw + blosc zstd 3`` (images), or the compressor alone."""
    try:
        opts = codec_cls.parse_options(options)
    except Exception:  # noqa: BLE001 - a description only: the write reports the problem
        return ""
    codec = getattr(opts, "image_codec", None)
    if has_images and codec in _CODEC_NAMES:
        if codec == "png":
            level = options.get("png_level")
            return "PNG" if level is None else f"PNG {level}"
        return f"{_CODEC_NAMES[codec]} q{opts.quality}"
    compressor = opts.compressor() if hasattr(opts, "compressor") else ""
    if has_images:
        return f"raw + {compressor}" if compressor and compressor != "none" else "raw"
    return compressor or "-"


def _effect(policy_text: str, schema: Schema) -> tuple[str, ...]:
    """What a policy does to each field (its stored dtype or encoding): equal tuples,
    equal cells."""
    policy = parse_policy(policy_text)
    out = []
    for split in schema.splits.values():
        for spec in split.fields.values():
            if policy.changes(spec):
                spec_text = policy.per_field.get(spec.name, policy.default)
                out.append(f"{split.name}/{spec.name}:{spec_text}")
    return tuple(out)


def plan_dtypes(dtypes: Sequence[str], schema: Schema) -> tuple[list[str], list[str]]:
    """The policies worth a cell (the first of each distinct effect on the data, in the
    order given), and one line per reason others were left out."""
    kept: list[str] = []
    seen: dict[tuple[str, ...], str] = {}
    same: list[str] = []
    missing: list[str] = []
    for spec in dtypes:
        if dtype_support(spec):
            missing.append(spec)
            continue
        effect = _effect(spec, schema)
        if effect in seen:
            same.append(f"{spec} (stores what {seen[effect]} does)")
            continue
        seen[effect] = spec
        kept.append(spec)
    notes = []
    floating = any(
        parse_policy("float16").changes(f) or f.dtype.kind == "f"
        for s in schema.splits.values()
        for f in s.fields.values()
    )
    if same and not floating:
        names = ", ".join(s.split(" (")[0] for s in same)
        notes.append(f"dtypes not measured: {names}: no field is floating")
    elif same:
        notes.append(f"dtypes not measured: {', '.join(same)}")
    if missing:
        notes.append(f"dtypes not measured: {', '.join(missing)}: not in this dstore")
    return kept, notes


def _image_choices(
    images: Sequence[str] | None, has_images: bool
) -> tuple[list[ImageEncoding], list[str]]:
    if images is None:  # auto
        return parse_images(AUTO_IMAGES if has_images else ["png"]), []
    encodings = parse_images(images)
    if has_images:
        return encodings, []
    extra = [str(e) for e in encodings if str(e) != "png"]
    note = [f"images not measured: {', '.join(extra)}: no image field"] if extra else []
    return parse_images(["png"]), note


def plan_cells(
    schema: Schema,
    formats: Sequence[str],
    *,
    named: Sequence[str] = (),
    dtypes: Sequence[str] = ("keep",),
    images: Sequence[str] | None = None,
    grid: bool = False,
    has_images: bool = False,
) -> tuple[list[CellSpec], list[str]]:
    """The cells to measure, in order (format, codec setting, image choice, dtype), and
    the one-line notes on what was left out. ``named``: formats the user asked for."""
    policies, notes = plan_dtypes(dtypes, schema)
    encodings, image_notes = _image_choices(images, has_images)
    notes += image_notes
    text_skipped: list[str] = []
    cannot: dict[str, list[str]] = {}
    refused: list[str] = []
    cells: list[CellSpec] = []
    for fmt in formats:
        codec_cls = get_codec_class(fmt)
        if has_images and codec_cls.stores_text and fmt not in named:
            text_skipped.append(fmt)
            continue
        for options in default_settings(fmt, grid):
            for enc in encodings:
                got = image_options(codec_cls, fmt, enc) if has_images else {}
                if isinstance(got, str):
                    why: str | None = got
                    opts: dict[str, Any] = {}
                else:
                    opts, why = got, _refusal(codec_cls, {**options, **got}, schema)
                if why is not None:
                    if str(enc) == "png" and not options:  # the format's own default
                        refused.append(f"formats not measured: {fmt}: {why}")
                    else:
                        cannot.setdefault(str(enc), []).append(fmt)
                    continue
                stored = stored_as(codec_cls, {**options, **opts}, has_images)
                for dtype in policies:
                    label = str(enc) if has_images else "-"
                    cells.append(CellSpec(fmt, dtype, dict(options), label, dict(opts), stored))
    if text_skipped:
        notes.append(
            f"formats not measured: {', '.join(text_skipped)}: text formats hold each pixel as "
            "a number (name them in --formats to measure them)"
        )
    for choice, fmts in cannot.items():
        notes.append(
            f"images {choice} not measured on {', '.join(fmts)}: the format cannot store it"
        )
    return cells, notes + refused


def _refusal(codec_cls: Any, options: dict[str, Any], schema: Schema) -> str | None:
    """Why the format refuses to store ``schema`` with ``options`` before writing a byte
    (its own ``check_schema``: lossy images in HDF5, a kind JSON has no room for), or None."""
    try:
        codec_cls(**options).check_schema(schema)
    except DstoreError as e:
        return str(e).splitlines()[0]
    return None
