"""The TensorFlow snippet that parses dstore's Examples: ``feature_description`` and ``decode``.

Shared by the formats whose records are serialized Examples (TFRecord and
others): ``dstore info`` prints it, each line runs as is, and the values
it returns are the ones dstore reads (PNG decoded with the channels dstore
keeps, raw bytes reshaped, int8/uint8 codes dequantized, uint64 bit patterns).
Each field's lines are its encoding's (:meth:`ExampleEncoding.tf_lines
<dstore.codecs.example.encodings.ExampleEncoding.tf_lines>`); how the records
reach ``decode`` (e.g. ``tf.data.TFRecordDataset``) is
the format's own line.
"""

from __future__ import annotations

from ...model.schema import SplitSpec
from .encodings import DECODE_RAW_DTYPES, FieldEncoding

__all__ = ["DECODE_RAW_DTYPES", "parse_snippet"]


def parse_snippet(split: SplitSpec, encs: dict[str, FieldEncoding]) -> list[str]:
    """Lines defining ``feature_description`` and ``decode(record)`` (a dict of the
    split's fields, as dstore reads them) for TensorFlow."""
    # the import too: the snippet is printed to be pasted and run as it is
    lines = ["import tensorflow as tf", "", "feature_description = {"]
    returns: list[str] = []
    sequence: list[str] = []  # a SequenceExample's feature lists
    for name, spec in split.fields.items():
        how = encs[name].how
        line, value = how.tf_lines(name, encs[name], spec)
        (sequence if how.feature_list else lines).append(line)
        returns.append(value)
    lines.append("}")
    if sequence:
        lines += ["sequence_features = {", *sequence, "}", "", "def decode(record):"]
        lines.append("    ex, seq = tf.io.parse_single_sequence_example(")
        lines.append("        record, feature_description, sequence_features")
        lines.append("    )")
    else:
        lines += ["", "def decode(record):"]
        lines.append("    ex = tf.io.parse_single_example(record, feature_description)")
    lines += ["    return {", *returns, "    }", ""]
    return lines
