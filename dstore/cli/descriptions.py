"""The paragraph each subcommand's ``--help`` opens with: what it does, in a few lines
(``dstore --help`` lists the one-line summaries). ``build_parser`` sets them through
:func:`describe_commands`; a command that declares its own description where it is built
(``convert``, ``bench``) is not here."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

__all__ = ["DESCRIPTIONS", "describe_commands"]

DESCRIPTIONS = {
    "info": "Describe the dataset at PATH without converting it: its splits (data that "
    "names no split, such as one TFRecord file of another's, is the split 'data'), each "
    "field's kind, dtype, shape and bytes, and what its format adds (a TFRecord's tf.data "
    "snippet, shards, attributes, how the input was read).",
    "index": "Write a record index of each file of PATH (one 'offset length' line per "
    "record, as NVIDIA DALI and the tfrecord package read it) into .dstore-index/ in the "
    "file's folder, where no shard glob finds it, or <file>.idx files into --out, so that "
    "dstore.open, to_torch's global shuffle and DALI read any record with one seek. Each "
    "record's CRCs are checked; compressed files and files linked in from outside the "
    "folder are refused.",
    "verify": "With A and B: compare them field by field, record by record (bit for bit, or "
    "within the error a lossy setting declares). With A alone: check its checksums and "
    "decode every record. Exit 0 when all is equal, 1 on any difference.",
    "formats": "List every registered format with its extensions, whether it is usable here "
    "(else the pip command that makes it so), what it supports (--resume, Dask) and its "
    "-o KEY=DEFAULT options; then the --layout names.",
    "demo": "Build a label-maker style data.npz from photos that ship with scikit-image "
    "(nothing is downloaded), convert it to every usable format and verify each, then "
    "bench a CoralNet-style features.npz (bench.md, bench.png), all in DIR.",
}


def describe_commands(commands: Mapping[str, argparse.ArgumentParser]) -> None:
    """Give each subcommand parser of ``commands`` its paragraph from :data:`DESCRIPTIONS`."""
    for name, text in DESCRIPTIONS.items():
        commands[name].description = text
