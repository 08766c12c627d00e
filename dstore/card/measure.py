"""The dataset as stored, and its error against a source: what ``dstore card`` reads
through the library's own API (``open``, ``verify``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from ..errors import CodecIOError
from .rai import Written

__all__ = ["measure", "open_stored"]


@contextlib.contextmanager
def open_stored(path: str, format: str | None) -> Iterator[tuple[Any, Any]]:
    """The codec class and reader of the dataset at ``path`` (its stored schema is
    ``reader.stored_schema`` where values are decoded on read)."""
    from .. import api
    from ..registry import get_codec_class

    ds = api.open(path, format=format)
    try:
        yield get_codec_class(ds.format), ds.reader
    finally:
        ds.close()


def measure(
    path: str, format: str | None, source: str | os.PathLike[str]
) -> tuple[Written, dict[tuple[str, str], dict[str, float]]]:
    """What ``source`` was, and per (split, field) the error ``dstore verify`` measures
    in the dataset at ``path`` against it. A dataset that is not ``source`` within the
    error its encodings declare is refused: a card must not vouch for it."""
    from .. import api

    src = os.fspath(source)
    report = api.verify(src, path, b_format=format)
    if not report.ok:
        bad = next(r for r in report.results if not r.ok)
        raise CodecIOError(
            f"{path}: differs from {src} (split {bad.split!r}, field {bad.field!r}: {bad.detail}); "
            "no card was written ('dstore verify' compares them)"
        )
    with api.open(src) as ds:
        schema = ds.schema
    verified = {(r.split, r.field): dict(r.measured) for r in report.results if r.measured}
    return Written(src, schema), verified
