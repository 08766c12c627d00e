"""``dstore check``: exact and near duplicates, and leakage between splits.

Reads a dataset once, keeping only hashes of its records (:mod:`.collect`):
a SHA-256 prefix of the checked fields' decoded values (exact duplicates), a
64-bit pHash per image field (:mod:`.perceptual`; near duplicates within a
Hamming distance, found by multi-index hashing, :mod:`.hamming`) and a random
projection per feature-vector field (:mod:`.vectors`; cosine similarity, found
by random-projection LSH). :mod:`.analyse` turns them into pairs, leakage
counts and groups; :mod:`.report` into the JSON object, the table and the
summary line; :mod:`.run` reads (:func:`check`) or watches a conversion
(:class:`ConvertCheck`).

Above :mod:`dstore.api` in the layers: it reads through ``dstore.api`` and uses
``dstore.model`` and ``dstore.errors``, never the bench or the CLI.
"""

from __future__ import annotations

from .report import CheckReport
from .run import DEFAULT_COSINE, DEFAULT_NEAR, ConvertCheck, check, leakage_summary

__all__ = [
    "DEFAULT_COSINE",
    "DEFAULT_NEAR",
    "CheckReport",
    "ConvertCheck",
    "check",
    "leakage_summary",
]
