"""Datasets that describe themselves: Croissant 1.1 metadata and the Hugging Face card.

Every folder output (TFRecord, WebDataset, Parquet, ArrayRecord, zarr) is written
with ``croissant.json`` in its root, inside the same atomic commit as its
manifest; a Parquet folder also gets the Hub's ``README.md``. :func:`card`
(``dstore card PATH``) writes them for any dataset afterwards.

What is in them (docs/publish.md says it for users):

* dataset-level values: ``name``, ``description``, ``license``, ``creator``,
  ``url`` as given (a neutral default, reported missing, otherwise), the
  dataset's ``version``, ``datePublished``;
* every data file with its size and sha256, one record set per split, one field
  per field with its stored dtype and shape (:mod:`.croissant`, :mod:`.datatypes`);
* ``rai:dataPreprocessingProtocol``: each lossy choice with the error measured
  (:mod:`.rai`), and ``dstore bench``'s accuracy figures when given a report.

Modules: :mod:`.facts` (files and storage, from the reader), :mod:`.croissant`,
:mod:`.datatypes`, :mod:`.rai`, :mod:`.hf` (README.md), :mod:`.measure`
(``open``/``verify``), :mod:`.build` (writing them).
"""

from __future__ import annotations

from .build import CardReport, card, write_with_output
from .rai import Written

__all__ = ["CardReport", "Written", "card", "write_with_output"]
