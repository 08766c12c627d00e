"""Writing in-memory data: :func:`save`, through :class:`ArrayReader`, a reader over
Python/numpy values, so that saving is a conversion like any other."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..engine.dtypes import DtypePolicy, OnOverflow
from ..engine.job import ConvertJob
from ..model import Kind
from ..output import Overwrite
from ..sources.memory import ArrayReader
from ..sources.opening import codec_for
from .convert import write_dataset

__all__ = ["ArrayReader", "save"]  # ArrayReader: dstore.sources.memory, re-exported


def save(
    data: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    dtype: str | Sequence[str] | DtypePolicy | None = None,
    on_overflow: OnOverflow = "error",
    overwrite: Overwrite = False,
    kinds: Mapping[tuple[str, str], Kind] | None = None,
    **options: Any,
) -> None:
    """Write in-memory data: ``{"train": {"x": x, "y": y}}`` or flat ``{"x_train": x, ...}``.

    Values are numeric arrays (tensors), ``<U``/``S`` arrays or lists of
    ``str``/``bytes`` (strings/bytes), or lists of arrays whose first axis
    varies (ragged); ``kinds={("train", "img"): dstore.model.Image(...)}``
    names a kind the values cannot show (an image, a VarColumn's kind)."""
    path = os.fspath(path)
    job = ConvertJob.build(
        to=format, dtype=dtype, on_overflow=on_overflow, overwrite=overwrite, options=options
    )
    write_dataset(ArrayReader(data, kinds=kinds), path, codec_for(path, job.to, job.options), job)
