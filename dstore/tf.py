"""``tf.data`` pipelines over TFRecords (extra ``tf``): the only module importing TensorFlow."""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import MissingDependencyError, SchemaError

__all__ = ["to_tf_dataset"]


def _tf() -> Any:
    try:
        import tensorflow as tf
    except ImportError as e:
        raise MissingDependencyError("to_tf_dataset", "tf", "tensorflow") from e
    return tf


def to_tf_dataset(path: str, split: str = "train", *, deterministic: bool = True) -> Any:
    """A ``tf.data.Dataset`` of ``{field: tensor}`` with the original dtypes and shapes.

    Parsing and PNG decoding run in parallel (``AUTOTUNE``) and the result is
    prefetched. Works on dstore directories and on TFRecords written by others.
    """
    tf = _tf()
    from .codecs.tfrecord import _DECODE_RAW_DTYPES, TFRecordReader

    reader = TFRecordReader(path)
    if split not in reader.schema.splits:
        raise SchemaError(f"{path}: no split {split!r}; splits: {', '.join(reader.schema.splits)}")
    spec = reader.schema.splits[split]
    encs = reader.encodings[split]
    files = [s.path for s in reader.shards[split]]
    compression = reader.tf_compression_types(split)

    description = {}
    for name, field in spec.fields.items():
        enc = encs[name]
        if enc.encoding == "raw" and field.dtype.newbyteorder("=").name not in _DECODE_RAW_DTYPES:
            raise SchemaError(
                f"{path}: split {split!r}, field {name!r} is {field.dtype}, which TensorFlow "
                "has no dtype for; read it with dstore.open"
            )
        if enc.encoding in ("png", "raw"):
            description[enc.feature] = tf.io.FixedLenFeature([], tf.string)
        else:
            dims = [] if field.shape == () else [int(np.prod(field.shape))]
            kind = tf.int64 if enc.encoding == "int64" else tf.float32
            description[enc.feature] = tf.io.FixedLenFeature(dims, kind)

    def decode(record: Any) -> dict[str, Any]:
        ex = tf.io.parse_single_example(record, description)
        out = {}
        for name, field in spec.fields.items():
            enc = encs[name]
            value = ex[enc.feature]
            native = field.dtype.newbyteorder("=")
            if enc.encoding == "png":
                channels = field.shape[2] if len(field.shape) == 3 else 1
                value = tf.io.decode_png(value, channels=channels, dtype=tf.as_dtype(native))
            elif enc.encoding == "raw":
                value = tf.io.decode_raw(
                    value, tf.as_dtype(native), little_endian=field.dtype.byteorder != ">"
                )
            elif native == np.uint64:
                value = tf.bitcast(value, tf.uint64)
            elif native != value.dtype.as_numpy_dtype:
                value = tf.cast(value, tf.as_dtype(native))
            out[name] = tf.reshape(value, field.shape)
        return out

    if len(set(compression)) <= 1:
        ds = tf.data.TFRecordDataset(files, compression_type=compression[0] if files else "")
    else:  # one TFRecordDataset reads one compression: chain them, file order kept
        ds = tf.data.TFRecordDataset(files[0], compression_type=compression[0])
        for f, c in zip(files[1:], compression[1:], strict=True):
            ds = ds.concatenate(tf.data.TFRecordDataset(f, compression_type=c))
    ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return ds.prefetch(tf.data.AUTOTUNE)
