"""Datasets that describe themselves: Croissant 1.1 metadata and the Hugging Face card.

Every sharded folder output (TFRecord, WebDataset, Parquet, ArrayRecord) is written
with ``croissant.json`` in its root, inside the same atomic commit as its manifest
(:func:`write_with_output`, called by the conversion); a Parquet folder also gets the
Hub's ``README.md``. :func:`dstore.card` (:mod:`dstore.api.card`, ``dstore card PATH``)
writes them for any dataset afterwards, through :func:`describe`.

What is in them (docs/publish.md says it for users):

* dataset-level values: ``name``, ``description``, ``license``, ``creator``,
  ``url`` as given (a neutral default, reported missing, otherwise), the
  dataset's ``version``, ``datePublished``;
* every data file with its size and sha256, one record set per split, one field
  per field with its stored dtype and shape (:mod:`.croissant`, :mod:`.datatypes`);
* ``rai:dataPreprocessingProtocol``: each lossy choice with the error measured
  (:mod:`.rai`), and ``dstore bench``'s accuracy figures when given a report.

Modules: :mod:`.facts` (files and storage, from the reader), :mod:`.croissant`,
:mod:`.datatypes`, :mod:`.rai`, :mod:`.hf` (README.md), :mod:`.build` (writing them).
This package sits below the API (a conversion calls it): it opens and compares
nothing itself; the API hands it an open reader and ``verify``'s figures.
"""

from __future__ import annotations

from .build import ABOUT, CardReport, describe, write_with_output
from .rai import Written

__all__ = ["ABOUT", "CardReport", "Written", "describe", "write_with_output"]
