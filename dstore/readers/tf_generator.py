"""tf.data over formats TensorFlow cannot read itself: a generator of dstore's batches
in the reading order (storage order, a shuffle buffer or the global permutation,
sharded by rank), resumable by skipping what was consumed."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import SchemaError
from .plan import PERMUTATIONS, GlobalLayout, consumer_indices, drop_first
from .tf_fields import Post, _native, image_decoder, image_shape

__all__ = ["ReadOrder", "batched", "generator_dataset"]


@dataclasses.dataclass(frozen=True)
class ReadOrder:
    """The order a dataset reads its records in (checked once, up front)."""

    buffer: int  # shuffle buffer in records (0: none)
    is_global: bool  # a seeded order of the whole split: shuffle "global" or "block"
    seed: int
    epoch: int
    skip: int
    ordered: bool
    rank: int
    world_size: int
    #: the shuffle named ("global", "block"), or "" for a buffer or none
    kind: str = ""

    @classmethod
    def of(
        cls,
        shuffle: int | str,
        seed: int,
        epoch: int,
        skip: int,
        ordered: bool,
        rank: int | None,
        world_size: int | None,
    ) -> ReadOrder:
        is_global = shuffle in PERMUTATIONS
        if not is_global and (isinstance(shuffle, str) or shuffle < 0):
            raise ValueError(
                f"shuffle is a buffer size in records (>= 0), 'global' or 'block'; got {shuffle!r}"
            )
        buffer = 0 if is_global else int(shuffle)
        if skip < 0 or epoch < 0:
            raise ValueError(f"epoch and skip are counts (>= 0); got epoch={epoch}, skip={skip}")
        if skip and not (is_global or (ordered and buffer <= 1)):
            raise ValueError(
                "skip= resumes a fixed order: use shuffle='global' or 'block' (with its epoch=) or "
                "ordered=True without a shuffle buffer (a buffer's order depends on the "
                "records already read)"
            )
        _check_ranks(rank, world_size, is_global)
        kind = str(shuffle) if is_global else ""
        return cls(buffer, is_global, seed, epoch, skip, ordered, rank or 0, world_size or 1, kind)


def _check_ranks(rank: int | None, world_size: int | None, is_global: bool) -> None:
    """Refuse ``rank``/``world_size`` apart, out of range, or without a seeded order."""
    if (rank is None) != (world_size is None):
        raise ValueError("give rank= and world_size= together")
    if rank is not None and not is_global:
        raise ValueError("rank= and world_size= deal a shuffle='global' or 'block' epoch to ranks")
    if world_size is not None and rank is not None and not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")


def batched(source: Any, ds: Any, batch_size: int, drop_remainder: bool) -> Any:
    varying = [n for n in source.fields if not source.spec.fields[n].dense]
    # records of varying size batch into tf.RaggedTensor (strings stay a tf.string vector)
    if varying:
        return ds.ragged_batch(batch_size, drop_remainder=drop_remainder)
    return ds.batch(batch_size, drop_remainder=drop_remainder)


def generator_dataset(
    tf: Any, source: Any, order: ReadOrder, deterministic: bool, layout: GlobalLayout | None
) -> Any:
    """zarr, HDF5, npz: dstore's batched reader, range by range, unbatched into records.

    Fixed-shape fields are ``tf.TensorSpec``; strings, bytes and encoded
    images ``tf.string`` (images then decoded in a parallel map); ragged
    fields ``tf.RaggedTensorSpec`` from their values + row offsets (a record
    is then a tensor of varying first axis); raw images of varying size their
    pixels as a ragged row plus their shape, put back together per record."""
    from ..model import Bytes, Image, Ragged, String, StringList

    spec = source.spec
    signature: dict[str, Any] = {}
    convert: dict[str, Any] = {}
    post: dict[str, Post] = {}
    #: raw images of varying size: their pixels come flat, with their shape under this key
    shaped: dict[str, str] = {}
    for name in source.fields:
        field = spec.fields[name]
        kind = field.kind
        where = f"{source.path}: split {source.split!r}, field {name!r}"
        if field.dense:
            signature[name] = tf.TensorSpec((None, *field.shape), tf.as_dtype(_native(field.dtype)))
            convert[name] = lambda col: col.astype(_native(col.dtype), copy=False)
        elif isinstance(kind, (String, Bytes)) or (
            isinstance(kind, Image) and kind.encoding != "raw"
        ):
            signature[name] = tf.TensorSpec((None,), tf.string)
            convert[name] = lambda col: np.array(col.to_bytes_list(), dtype=object)
            if isinstance(kind, Image):
                post[name] = image_decoder(tf, kind, where)
        elif isinstance(kind, StringList):  # a record is a tf.string vector of its strings
            signature[name] = tf.RaggedTensorSpec(
                (None, None), tf.string, ragged_rank=1, row_splits_dtype=tf.int64
            )
            convert[name] = lambda col: tf.RaggedTensor.from_row_splits(
                tf.constant(np.array(col.values.to_bytes_list(), dtype=object), tf.string),
                tf.constant(col.offsets, tf.int64),
            )
        elif isinstance(kind, (Ragged, Image)):
            # a raw image of varying size travels as its flat pixels + its shape
            dtype = tf.as_dtype(_native(field.dtype))
            inner = kind.inner_shape if isinstance(kind, Ragged) else ()
            signature[name] = tf.RaggedTensorSpec(
                (None, None, *inner), dtype, ragged_rank=1, row_splits_dtype=tf.int64
            )
            convert[name] = lambda col, dtype=dtype: tf.RaggedTensor.from_row_splits(
                tf.constant(col.values.astype(_native(col.values.dtype), copy=False), dtype),
                tf.constant(col.offsets, tf.int64),
            )
            if isinstance(kind, Image):
                # a key no field has (field names never hold NUL)
                shaped[name] = f"{name}\0shape"
                signature[shaped[name]] = tf.TensorSpec(
                    (None, 2 if kind.channels == 0 else 3), tf.int64
                )
        else:
            raise SchemaError(
                f"{where} is {kind.describe()}, which to_tf_dataset does not read yet; "
                "use dstore.to_torch or dstore.open"
            )
    epochs = itertools.count()

    def columns(batch: dict[str, Any]) -> dict[str, Any]:
        out = {name: convert[name](batch[name]) for name in source.fields}
        for name, key in shaped.items():
            out[key] = np.asarray(batch[name].shapes, np.int64)
        return out

    def batches() -> Iterator[dict[str, Any]]:
        for batch in _epoch_batches(source, order, next(epochs), layout):
            yield columns(batch)

    ds = tf.data.Dataset.from_generator(batches, output_signature=signature).unbatch()
    if not post and not shaped:
        return ds

    @tf.autograph.experimental.do_not_convert
    def finish(rec: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name in source.fields:
            value = rec[name]
            if name in shaped:
                value = tf.reshape(value, rec[shaped[name]])
                value = tf.ensure_shape(value, image_shape(spec.fields[name].kind))
            elif name in post:
                value = post[name](value)
            out[name] = value
        return out

    return ds.map(finish, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)


def _epoch_batches(
    source: Any, order: ReadOrder, nth: int, layout: GlobalLayout | None
) -> Iterator[Any]:
    """The batches of the ``nth`` pass over the dataset (each pass is the next epoch)."""
    skip = order.skip if nth == 0 else 0
    if layout is not None:
        yield from _global_batches(source, order, order.epoch + nth, skip, layout)
        return
    ranges = list(source.ranges)
    rows = None
    if not source.random_access:  # a deflated npz: one forward pass, never re-entered
        rows = max((b - a for a, b in ranges), default=1)
        ranges = [(0, source.count)]
    elif order.buffer > 1:
        rng = np.random.default_rng([order.seed, nth])
        ranges = [ranges[i] for i in rng.permutation(len(ranges))]
    for a, b in drop_first(ranges, skip):
        yield from source.batches(a, b, rows)


def _global_batches(
    source: Any, order: ReadOrder, epoch: int, skip: int, layout: GlobalLayout
) -> Iterator[Any]:
    """This rank's share of epoch ``epoch``'s order after its first ``skip`` records, a
    window at a time (its records read together, handed out in the order) -- the same
    sequence as ``to_torch(shuffle=...)`` with one reading process per rank."""
    mine = consumer_indices(
        source.count, order.rank, order.world_size, seed=order.seed, epoch=epoch, layout=layout
    )
    for part in layout.windows(mine, skip):
        batch, _ = source.read_records(part)
        yield batch
