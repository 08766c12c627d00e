"""``tf.data`` pipelines over any dstore format (extra ``tf``): the only module importing TensorFlow.

TFRecord directories are read natively: one ``TFRecordDataset`` over all the
split's shards, Example parsing and decoding in the same parallel map, then
batching and prefetch -- the pipeline a TensorFlow user writes by hand, with
no Python run per record. zarr, HDF5 and npz go through
``Dataset.from_generator`` over dstore's own batched reader, with an
``output_signature`` from the schema.

Every kind reads as TensorFlow users expect it: fixed-shape fields as tensors
of their dtype and shape, ragged fields as records of varying first axis
(``tf.RaggedTensor`` once batched), strings and bytes as ``tf.string``, and
images -- raw or encoded (PNG, JPEG, WebP, JPEG XL, BMP, GIF) -- decoded to
pixels, a ``tf.RaggedTensor`` once batched when their size varies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..model.precision import dequant_params
from ..registry import get_codec_class
from .plan import check_skip
from .split import SplitSource
from .tf_fields import (
    PNG_DECODERS,
    Post,
    batch_decoded_png,
    dequantized,
    import_tf,
    tfrecord_field,
    writes_up_filtered_png,
)
from .tf_generator import ReadOrder, batched, generator_dataset

__all__ = ["PNG_DECODERS", "to_tf_dataset"]


def to_tf_dataset(
    path: str,
    split: str = "train",
    *,
    fields: Sequence[str] | None = None,
    batch_size: int | None = None,
    drop_remainder: bool = False,
    shuffle: int | str = 0,
    seed: int = 0,
    deterministic: bool | None = None,
    ordered: bool = False,
    format: str | None = None,
    epoch: int = 0,
    skip: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    png_decoder: str = "auto",
    version: int | None = None,
) -> Any:
    """A ``tf.data.Dataset`` of ``{field: tensor}`` with the original dtypes and shapes.

    ``batch_size`` batches inside the pipeline (before the prefetch, so tf.data
    fuses decoding and batching); without it the dataset yields records.
    ``shuffle`` is a shuffle buffer in records (the shard or range order is
    shuffled too), reshuffled each epoch from ``seed``. Works on dstore
    directories and on TFRecords written by others. TFRecord shards are read
    in parallel (records interleaved between shards, as
    ``num_parallel_reads=AUTOTUNE`` does); ``ordered=True`` gives storage order.
    ``deterministic`` (default: only when ``ordered`` or shuffling, so that a
    seed gives the same order every run) lets a record decoded early pass one
    still decoding; order is then not guaranteed, every record still comes once.

    ``shuffle="global"`` or ``"block"`` (random-access storage only) makes each
    pass over the dataset one epoch: a seeded order of all the split's records from
    ``(seed, epoch)`` (see ``to_torch``), the same on any machine and the same as
    ``to_torch``'s with one reading process; the first pass is epoch ``epoch``, the
    next ``epoch + 1`` and so on. ``rank``/``world_size`` deal the order
    round-robin, so the ranks together read each record once per epoch.

    Resuming mid-epoch: ``skip`` leaves out the first ``skip`` records of the
    first pass (this rank's share) without reading or decoding them. With
    ``shuffle="global"`` pass the epoch and the records taken
    (``steps * batch_size``) you saved; in storage order (``ordered=True``,
    no shuffle) ``skip`` alone (a shuffle buffer refuses it). ``version=N`` reads the
    dataset as it was at version N (default: the latest).

    ``png_decoder="auto"`` decodes the PNGs of a dstore TFRecord directory
    written at ``png_level`` fast or fastest with dstore's own decoder (ISA-L's
    inflate and a numpy unfilter, in a ``tf.numpy_function``, a batch per call with
    ``batch_size``: 1.26x the tiles/s of a hand-written ``tf.io.decode_png`` pipeline on
    photo tiles, 1.85x on satellite tiles, docs/benchmarks.md); the pixels are the
    same. ``"tensorflow"`` keeps every decode a TensorFlow op (a graph without
    Python, for the tf.data service or an exported input pipeline). Either way
    a PNG of another height or width than the manifest declares fails
    (``tf.errors.InvalidArgumentError``), never reshaped into it; dstore's
    decoder names the path, split and field in one line, and also refuses the
    other channel counts and bit depths that ``tf.io.decode_png`` converts.
    """
    if png_decoder not in PNG_DECODERS:
        raise ValueError(f"png_decoder must be one of {', '.join(PNG_DECODERS)}: {png_decoder!r}")
    tf = import_tf()
    order = ReadOrder.of(shuffle, seed, epoch, skip, ordered, rank, world_size)
    if deterministic is None:
        deterministic = ordered or order.is_global or order.buffer > 1
    source = SplitSource(path, split, fields, format=format, version=version)
    layout = None
    if order.is_global:
        source.require_random_access(f"shuffle={order.kind!r}")
        layout = source.layout(order.kind)
    check_skip(order.skip, source.count, order.rank, order.world_size, layout)
    if get_codec_class(source.format).tensorflow_native and layout is None:
        own_png = png_decoder == "auto" and writes_up_filtered_png(source.reader())
        ds = _tfrecord_dataset(
            tf, source, order, deterministic, batch_size, drop_remainder, own_png
        )
    else:
        ds = generator_dataset(tf, source, order, deterministic, layout)
        if order.buffer > 1:
            ds = ds.shuffle(order.buffer, seed=seed, reshuffle_each_iteration=True)
        if batch_size:
            ds = batched(source, ds, batch_size, drop_remainder)
    return ds.prefetch(tf.data.AUTOTUNE)


def _tfrecord_dataset(
    tf: Any,
    source: Any,
    order: ReadOrder,
    deterministic: bool,
    batch_size: int | None,
    drop_remainder: bool,
    own_png: bool = False,
) -> Any:
    shuffle, seed, ordered = order.buffer, order.seed, order.ordered
    reader = source.reader()
    encs = reader.encodings[source.split]
    files = reader.sized_paths(source.split)  # tf.data reads them: their sizes checked here
    compression = reader.tf_compression_types(source.split)  # per shard: may be mixed
    names = source.fields
    description: dict[str, Any] = {}
    post: dict[str, Post] = {}
    #: fields decoded a batch at a time, after batching (dstore's PNGs: one call per batch)
    later: dict[str, Post] = {}
    for name in names:
        description[encs[name].feature], post[name] = tfrecord_field(
            tf, source, name, encs[name], own_png
        )
        quant = dequant_params(source.spec.fields[name])
        if quant is not None:  # int8/uint8 codes (cast to float32 by post) back to their values
            post[name] = dequantized(post[name], quant)
        elif batch_size and batch_decoded_png(source, name, encs[name], own_png):
            later[name], post[name] = post[name], _as_parsed

    # Traced once, with Python control flow over the schema only: autograph would
    # spend about a second rewriting this function for nothing (measured: 0.93x of
    # the hand-written pipeline with it, at 7,000 tiles).
    @tf.autograph.experimental.do_not_convert
    def decode(record: Any) -> dict[str, Any]:
        # parse and decode in one map: tf.data runs it on all cores and fuses it with batch
        ex = tf.io.parse_single_example(record, description)
        return {name: post[name](ex[encs[name].feature]) for name in names}

    uniform = len(set(compression)) <= 1
    if ordered and not shuffle > 1:
        # the storage order, as numpy readers give it
        if uniform:
            ds = tf.data.TFRecordDataset(files, compression_type=compression[0] if files else "")
        else:  # one TFRecordDataset reads one compression: chain them, file order kept
            ds = tf.data.TFRecordDataset(files[0], compression_type=compression[0])
            for f, c in zip(files[1:], compression[1:], strict=True):
                ds = ds.concatenate(tf.data.TFRecordDataset(f, compression_type=c))
    elif uniform and not shuffle > 1:
        # shards read side by side keep the decoding map fed (measured: 0.55x without)
        ds = tf.data.TFRecordDataset(
            files,
            compression_type=compression[0] if files else "",
            num_parallel_reads=tf.data.AUTOTUNE,
        )
    else:
        pairs = tf.data.Dataset.from_tensor_slices((files, compression))
        if shuffle > 1:
            pairs = pairs.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        ds = pairs.interleave(
            lambda f, c: tf.data.TFRecordDataset(f, compression_type=c),
            cycle_length=min(len(files), 4),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
    if shuffle > 1:
        # the serialized records are shuffled, not the decoded ones: a buffer of
        # PNG bytes is a fraction of the memory of the same buffer of pixels
        ds = ds.shuffle(shuffle, seed=seed, reshuffle_each_iteration=True)
    if order.skip:  # storage order: the serialized records are passed over, never parsed
        ds = ds.skip(order.skip)
    ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    if batch_size:
        ds = batched(source, ds, batch_size, drop_remainder)
    if later:

        @tf.autograph.experimental.do_not_convert
        def decode_batch(batch: dict[str, Any]) -> dict[str, Any]:
            return {n: later[n](v) if n in later else v for n, v in batch.items()}

        # a Python call per batch, not per record: the crossing into Python and back
        # (tf.numpy_function) costs about as much as an ISA-L inflate of a small tile
        ds = ds.map(decode_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return ds


def _as_parsed(value: Any) -> Any:
    """A field's parsed value as it is (its decoding comes after batching)."""
    return value


# ------------------------------------------------------------------ other formats
