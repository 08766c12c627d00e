"""``dstore.card``: the Croissant 1.1 metadata of any dataset, and a Parquet folder's
Hugging Face ``README.md`` (docs/publish.md).

The API's part: the dataset opened as stored (:func:`~dstore.api.views.open`) and, with
a source, its error measured by :func:`~dstore.api.verify.verify`; what the cards say
and how they are written is :mod:`dstore.card`'s, below the API, which a conversion
calls to write a folder's cards inside its commit.
"""

from __future__ import annotations

import os

from ..card import ABOUT, CardReport, Written, describe
from ..errors import CodecIOError
from ..registry import get_codec_class
from .verify import verify
from .views import open as open_dataset

__all__ = ["CardReport", "card"]


def _measure(
    path: str, format: str | None, source: str
) -> tuple[Written, dict[tuple[str, str], dict[str, float]]]:
    """What ``source`` was, and per (split, field) the error ``verify`` measures in the
    dataset at ``path`` against it. A dataset that is not ``source`` within the error its
    encodings declare is refused: a card must not vouch for it."""
    report = verify(source, path, b_format=format)
    if not report.ok:
        bad = next(r for r in report.results if not r.ok)
        raise CodecIOError(
            f"{path}: differs from {source} (split {bad.split!r}, field {bad.field!r}: "
            f"{bad.detail}); no card was written ('dstore verify' compares them)"
        )
    with open_dataset(source) as ds:
        schema = ds.schema
    verified = {(r.split, r.field): dict(r.measured) for r in report.results if r.measured}
    return Written(source, schema), verified


def card(
    path: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    format: str | None = None,
    source: str | os.PathLike[str] | None = None,
    bench: str | os.PathLike[str] | None = None,
    hf: bool = False,
    **about: str | None,
) -> CardReport:
    """Write the Croissant 1.1 metadata of the dataset at ``path`` (any format), and a
    Parquet folder's Hugging Face ``README.md`` (docs/publish.md).

    :param path: the dataset: a folder or a file (``format`` names its format when its
        name does not)
    :param out: where the Croissant JSON-LD goes; default ``PATH/croissant.json`` in a
        folder, ``PATH.croissant.json`` beside a file
    :param source: the dataset ``path`` was converted from: each lossy field's error is
        measured against it (``verify(source, path)``); one that differs beyond the
        error its encoding declares gets no card
    :param bench: a ``dstore bench`` JSON report on the source: its accuracy figures for
        this format join ``rai:dataPreprocessingProtocol``
    :param hf: also write the Hub's ``README.md`` (a Parquet folder; one dstore wrote
        earlier is rewritten anyway, to stay in step)
    :param about: ``name``, ``description``, ``license``, ``creator``, ``url``; one not
        given keeps an earlier card's value, else gets a neutral default and is reported
        in :attr:`CardReport.missing`
    :raises OutputExistsError: ``out`` (or the README) exists and dstore did not write it
    :raises CodecIOError: a file differs from its manifest, or the dataset from ``source``

    >>> report = dstore.card("tiles.parquet", license="cc-by-4.0")  # doctest: +SKIP
    >>> report.missing                                              # doctest: +SKIP
    ['name', 'description', 'creator', 'url']
    """
    path = os.fspath(path)
    unknown = set(about) - set(ABOUT)
    if unknown:
        raise TypeError(f"card() got unexpected keyword(s) {sorted(unknown)}; takes {ABOUT}")
    measured = _measure(path, format, os.fspath(source)) if source is not None else None
    with open_dataset(path, format=format) as ds:
        codec = get_codec_class(ds.format)
        return describe(
            path, codec, ds.reader, out=out, hf=hf, about=about, measured=measured, bench=bench
        )
