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

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import MissingDependencyError, SchemaError
from ..model.precision import dequant_params
from ..registry import get_codec_class
from .plan import GLOBAL_WINDOW, check_skip, consumer_indices, drop_first, read_order
from .split import SplitSource

__all__ = ["PNG_DECODERS", "to_tf_dataset"]

Post = Callable[[Any], Any]

#: ``to_tf_dataset``'s ``png_decoder`` values
PNG_DECODERS = ("auto", "tensorflow")


def _tf() -> Any:
    try:
        import tensorflow as tf
    except ImportError as e:
        raise MissingDependencyError(
            "to_tf_dataset", "tf", "tensorflow", what="dstore.to_tf_dataset"
        ) from e
    return tf


def _native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=") if dtype.byteorder == ">" else dtype


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

    ``shuffle="global"`` (random-access storage only) makes each pass over the
    dataset one epoch: a permutation of all the split's records from
    ``(seed, epoch)``, the same on any machine and the same as ``to_torch``'s
    with one reading process; the first pass is epoch ``epoch``, the next
    ``epoch + 1`` and so on. ``rank``/``world_size`` deal the permutation
    round-robin, so the ranks together read each record once per epoch.

    Resuming mid-epoch: ``skip`` leaves out the first ``skip`` records of the
    first pass (this rank's share) without reading or decoding them. With
    ``shuffle="global"`` pass the epoch and the records taken
    (``steps * batch_size``) you saved; in storage order (``ordered=True``,
    no shuffle) ``skip`` alone. A shuffle buffer cannot resume exactly and
    refuses ``skip``.

    ``png_decoder="auto"`` decodes the PNGs of a dstore TFRecord directory
    written at ``png_level`` fast or fastest with dstore's own decoder (ISA-L's
    inflate and a numpy unfilter, in a ``tf.numpy_function``: 1.15x the tiles/s of
    a hand-written ``tf.io.decode_png`` pipeline, docs/benchmarks.md); the pixels are the
    same. ``"tensorflow"`` keeps every decode a TensorFlow op (a graph without
    Python, for the tf.data service or an exported input pipeline). Either way
    a PNG of another height or width than the manifest declares fails
    (``tf.errors.InvalidArgumentError``), never reshaped into it; dstore's
    decoder names the path, split and field in one line, and also refuses the
    other channel counts and bit depths that ``tf.io.decode_png`` converts.
    """
    if png_decoder not in PNG_DECODERS:
        raise ValueError(
            f"png_decoder must be one of {', '.join(PNG_DECODERS)}; got {png_decoder!r}"
        )
    tf = _tf()
    order = _ReadOrder.of(shuffle, seed, epoch, skip, ordered, rank, world_size)
    if deterministic is None:
        deterministic = ordered or order.is_global or order.buffer > 1
    source = SplitSource(path, split, fields, format=format)
    check_skip(order.skip, source.count, order.rank, order.world_size, order.is_global)
    if order.is_global:
        source.require_random_access("shuffle='global'")
    if get_codec_class(source.format).tensorflow_native and not order.is_global:
        own_png = png_decoder == "auto" and _writes_up_filtered_png(source.reader())
        ds = _tfrecord_dataset(
            tf, source, order, deterministic, batch_size, drop_remainder, own_png
        )
    else:
        ds = _generator_dataset(tf, source, order, deterministic)
        if order.buffer > 1:
            ds = ds.shuffle(order.buffer, seed=seed, reshuffle_each_iteration=True)
        if batch_size:
            ds = _batch(source, ds, batch_size, drop_remainder)
    return ds.prefetch(tf.data.AUTOTUNE)


@dataclasses.dataclass(frozen=True)
class _ReadOrder:
    """The order a dataset reads its records in (checked once, up front)."""

    buffer: int  # shuffle buffer in records (0: none)
    is_global: bool
    seed: int
    epoch: int
    skip: int
    ordered: bool
    rank: int
    world_size: int

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
    ) -> _ReadOrder:
        is_global = shuffle == "global"
        if not is_global and (isinstance(shuffle, str) or shuffle < 0):
            raise ValueError(
                f"shuffle is a buffer size in records (>= 0) or 'global'; got {shuffle!r}"
            )
        buffer = 0 if is_global else int(shuffle)
        if skip < 0 or epoch < 0:
            raise ValueError(f"epoch and skip are counts (>= 0); got epoch={epoch}, skip={skip}")
        if skip and not (is_global or (ordered and buffer <= 1)):
            raise ValueError(
                "skip= resumes a fixed order: use shuffle='global' (with its epoch=) or "
                "ordered=True without a shuffle buffer (a buffer's order depends on the "
                "records already read)"
            )
        if (rank is None) != (world_size is None):
            raise ValueError("give rank= and world_size= together")
        if rank is not None and not is_global:
            raise ValueError("rank= and world_size= deal a shuffle='global' epoch to ranks")
        if world_size is not None and rank is not None and not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
        return cls(buffer, is_global, seed, epoch, skip, ordered, rank or 0, world_size or 1)


def _batch(source: Any, ds: Any, batch_size: int, drop_remainder: bool) -> Any:
    varying = [n for n in source.fields if not source.spec.fields[n].dense]
    # records of varying size batch into tf.RaggedTensor (strings stay a tf.string vector)
    if varying:
        return ds.ragged_batch(batch_size, drop_remainder=drop_remainder)
    return ds.batch(batch_size, drop_remainder=drop_remainder)


def _decode_lossy(tf: Any, value: Any, lossy: Any, shape: tuple[int, ...], native: Any) -> Any:
    """Pixels of a dstore-encoded lossy image, as ``dstore.open`` decodes them."""
    channels = shape[2] if len(shape) == 3 else 1
    if lossy.format == "jpeg":  # the accurate IDCT: imagecodecs' (dstore.open's) pixels
        return tf.io.decode_jpeg(value, channels=channels, dct_method="INTEGER_ACCURATE")
    if lossy.format == "webp":
        return tf.io.decode_image(value, channels=channels, expand_animations=False)
    # JPEG XL: TensorFlow has no decoder; imagecodecs decodes inside the pipeline
    out = tf.numpy_function(
        lambda b: lossy.decode(bytes(b)).reshape(shape), [value], tf.as_dtype(native)
    )
    return tf.ensure_shape(out, shape)


# ------------------------------------------------------------------ images


def _image_decoder(tf: Any, kind: Any, where: str) -> Post:
    """Encoded bytes -> pixels ``(H, W, C)`` (``(H, W)`` for a 2-d kind) with TensorFlow's ops.

    The dtype is the kind's (uint16 PNGs stay uint16); channels are the kind's,
    or the file's own where the kind does not know them."""
    enc = kind.encoding
    two_d = kind.channels == 0
    channels = 1 if two_d else (kind.channels or 0)
    dtype = tf.as_dtype(_native(kind.dtype))
    op = {
        "raw": "decode_png",  # a raw image of varying size is stored as PNG
        "png": "decode_png",
        "jpeg": "decode_jpeg",
        "webp": "decode_webp",
        "jxl": "decode_jxl",
        "bmp": "decode_bmp",
        "gif": "decode_image",
    }.get(enc)
    if op is None or not hasattr(tf.io, op):
        raise SchemaError(
            f"{where} holds {enc} images, which TensorFlow {tf.__version__} cannot decode; "
            "read it with dstore.to_torch or dstore.open, or leave it out with fields="
        )
    decode = getattr(tf.io, op)
    if enc in ("raw", "png", "webp", "jxl"):

        def run(v: Any) -> Any:
            return decode(v, channels=channels, dtype=dtype)
    elif enc == "gif":

        def run(v: Any) -> Any:  # the first frame, as dstore's own reader gives
            return decode(v, channels=channels or None, expand_animations=False)
    else:

        def run(v: Any) -> Any:
            return decode(v, channels=channels)

    def image(v: Any) -> Any:
        img = run(v)
        if img.shape.rank == 4:  # decode_webp gives frames: a still image is the first
            img = img[0]
        if two_d:
            img = img[..., 0]
        return tf.ensure_shape(img, _image_shape(kind))

    return image


def _image_shape(kind: Any) -> tuple[int | None, ...]:
    """What TensorFlow knows of an image record's shape (None where it varies)."""
    return (
        (kind.height, kind.width)
        if kind.channels == 0
        else (kind.height, kind.width, kind.channels)
    )


# ------------------------------------------------------------------ TFRecord


def _tfrecord_field(
    tf: Any, source: Any, name: str, enc: Any, own_png: bool = False
) -> tuple[Any, Post]:
    """The parse spec of one field's feature, and what turns the parsed value into its record
    (``own_png``: fixed-size PNGs by dstore's decoder, :func:`_own_png_pixels`)."""
    from ..codecs.example.tf import DECODE_RAW_DTYPES as _DECODE_RAW_DTYPES
    from ..model import Bytes, Image, Ragged, String

    field = source.spec.fields[name]
    kind = field.kind
    where = f"{source.path}: split {source.split!r}, field {name!r}"
    native = _native(field.dtype)
    bf16 = native.name == "bfloat16"  # TensorFlow's bfloat16 is ml_dtypes'
    tdtype = tf.as_dtype(native) if native.kind in "biufc" or bf16 else None
    ragged = isinstance(kind, Ragged)
    shape = (-1, *field.shape) if ragged else field.shape
    string = tf.io.FixedLenFeature([], tf.string)

    if enc.encoding == "strings":  # a list of strings per record: a tf.string vector
        return tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64), lambda v: v
    if enc.encoding in ("bytes", "encoded") or (enc.encoding == "png" and not field.dense):
        if isinstance(kind, (String, Bytes)):
            return string, lambda v: v
        if isinstance(kind, Image):
            return string, _image_decoder(tf, kind, where)
        raise SchemaError(f"{where} is {kind.describe()} stored as bytes, which is not a record")
    if enc.encoding == "tensor":  # tf.io.serialize_tensor bytes (label-maker records)
        spec_shape = (None, *field.shape) if ragged else field.shape
        return string, lambda v: tf.ensure_shape(tf.io.parse_tensor(v, tdtype), spec_shape)
    if enc.encoding == "raw":
        if native.name not in _DECODE_RAW_DTYPES:
            raise SchemaError(
                f"{where} is {field.dtype}, which TensorFlow has no dtype for; "
                "read it with dstore.open"
            )
        little = field.dtype.byteorder != ">"
        return string, lambda v: tf.reshape(
            tf.io.decode_raw(v, tdtype, little_endian=little), shape
        )
    if enc.lossy is not None and field.dense:  # dstore's JPEG/WebP/JPEG XL: to its pixels
        lossy = enc.lossy
        return string, lambda v: tf.reshape(_decode_lossy(tf, v, lossy, shape, native), shape)
    if enc.encoding == "png" and own_png:
        return string, _own_png_pixels(tf, shape, native, where)
    if enc.encoding == "png":  # a fixed-size image: decoded straight to its shape
        channels = field.shape[2] if len(field.shape) == 3 else 1
        # its height and width checked, not only its size: (128, 32, 3) is not (64, 64, 3)
        decoded = (*field.shape[:2], channels)
        return string, lambda v: tf.reshape(
            tf.ensure_shape(tf.io.decode_png(v, channels=channels, dtype=tdtype), decoded),
            shape,
        )
    return _number_field(tf, enc, native, tdtype, shape, ragged)


def _writes_up_filtered_png(reader: Any) -> bool:
    """Whether a dstore manifest says its PNGs were written at ``png_level`` fast or fastest:
    fpng's rows (or UP-filtered rows for gray and 16-bit images), which dstore's decoder
    inflates with ISA-L and unfilters in numpy at 2.6x ``tf.io.decode_png``'s speed per
    tile (385 against 1,017 us on 256x256x3 photo tiles; zlib's inflate is most of the
    latter). Other PNGs -- TensorFlow's, zlib levels -- stay with TensorFlow's op."""
    from ..images.png import FPNG_LEVELS

    # a manifest edited by hand or by another tool may hold anything: then TensorFlow's op
    manifest = getattr(reader, "manifest", None)
    options = manifest.get("options") if isinstance(manifest, dict) else None
    level = options.get("png_level") if isinstance(options, dict) else None
    return isinstance(level, str) and level in FPNG_LEVELS


def _own_png_pixels(tf: Any, shape: tuple[int, ...], native: np.dtype, where: str) -> Post:
    """A fixed-size PNG's pixels by dstore's decoder, in a ``tf.numpy_function``: ISA-L and
    numpy let go of the GIL, so tf.data's parallel map decodes on every core.

    A record unlike the manifest fails as one line naming the field: the decoder's
    error comes back as a string that an ``Assert`` raises (an exception raised in a
    numpy_function reaches the user with TensorFlow's Python traceback appended)."""
    from ..images import png as _png

    height, width = shape[:2]
    channels = shape[2] if len(shape) == 3 else 1
    decoded = (height, width) if channels == 1 else (height, width, channels)
    declared = f"{native} {shape}"

    def checked(data: bytes) -> np.ndarray:
        header = _png.png_header(data)
        if header is None:
            raise ValueError(f"{len(data)} bytes that are not a PNG, not the {declared} PNG")
        w, h = header[:2]
        # before decoding: a header declaring millions of pixels is never allocated
        if (h, w) != (height, width):
            raise ValueError(
                f"a PNG of {h} rows of {w} pixels, not the {declared} its manifest declares"
            )
        try:
            img = _png.decode(data, "PNG")
        except Exception as e:
            raise ValueError(f"a PNG that does not decode ({e})") from e
        # the shape, not only the size: a (48, 64, 4) PNG must not pass as (64, 64, 3)
        if img.dtype != native or img.shape != decoded:
            raise ValueError(
                f"a PNG of {img.dtype} {img.shape}, not the {declared} its manifest declares"
            )
        return img.reshape(shape)

    def pixels(data: bytes) -> tuple[np.ndarray, bytes]:
        try:
            return checked(data), b""
        except Exception as e:  # noqa: BLE001 - any failure of a record: one line naming it
            reason = " ".join(str(e).split()) or type(e).__name__
            # no pixels: the Assert fails before anything reads them (and a hostile
            # manifest's declared shape is never allocated)
            return np.zeros(0, native), f"{where}: {reason}".encode()

    def post(v: Any) -> Any:
        out, error = tf.numpy_function(
            pixels, [v], (tf.as_dtype(native), tf.string), stateful=False
        )
        ok = tf.debugging.Assert(tf.equal(error, b""), [error])
        with tf.control_dependencies([ok]):
            return tf.ensure_shape(tf.identity(out), shape)

    return post


def _number_field(
    tf: Any, enc: Any, native: np.dtype, tdtype: Any, shape: tuple[int, ...], ragged: bool
) -> tuple[Any, Post]:
    """A numeric field stored as an int64 or float list feature: its parse spec and the
    cast (uint64 from its bit pattern) and reshape to the record."""
    wire = tf.int64 if enc.encoding == "int64" else tf.float32
    if ragged:  # a list of any length (empty where a record lacks the feature)
        feature = tf.io.RaggedFeature(wire, row_splits_dtype=tf.int64)
    else:
        feature = tf.io.FixedLenFeature([] if shape == () else [int(np.prod(shape))], wire)

    def number(v: Any) -> Any:
        if native == np.uint64:  # stored as the int64 bit pattern
            v = tf.bitcast(v, tf.uint64)
        elif tdtype != wire:
            v = tf.cast(v, tdtype)
        return tf.reshape(v, shape)

    return feature, number


def _dequantized(post: Post, quant: tuple[np.ndarray, np.ndarray]) -> Post:
    """``post``, then int8/uint8 codes (cast to float32 by ``post``) back to their values."""
    scale, offset = quant
    return lambda v: post(v) * scale + offset


def _tfrecord_dataset(
    tf: Any,
    source: Any,
    order: _ReadOrder,
    deterministic: bool,
    batch_size: int | None,
    drop_remainder: bool,
    own_png: bool = False,
) -> Any:
    shuffle, seed, ordered = order.buffer, order.seed, order.ordered
    reader = source.reader()
    encs = reader.encodings[source.split]
    files = [s.path for s in reader.shards[source.split]]
    compression = reader.tf_compression_types(source.split)  # per shard: may be mixed
    names = source.fields
    description: dict[str, Any] = {}
    post: dict[str, Post] = {}
    for name in names:
        description[encs[name].feature], post[name] = _tfrecord_field(
            tf, source, name, encs[name], own_png
        )
        quant = dequant_params(source.spec.fields[name])
        if quant is not None:  # int8/uint8 codes (cast to float32 by post) back to their values
            post[name] = _dequantized(post[name], quant)

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
        ds = _batch(source, ds, batch_size, drop_remainder)
    return ds


# ------------------------------------------------------------------ other formats


def _generator_dataset(tf: Any, source: Any, order: _ReadOrder, deterministic: bool) -> Any:
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
                post[name] = _image_decoder(tf, kind, where)
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
        for batch in _epoch_batches(source, order, next(epochs)):
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
                value = tf.ensure_shape(value, _image_shape(spec.fields[name].kind))
            elif name in post:
                value = post[name](value)
            out[name] = value
        return out

    return ds.map(finish, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)


def _epoch_batches(source: Any, order: _ReadOrder, nth: int) -> Iterator[Any]:
    """The batches of the ``nth`` pass over the dataset (each pass is the next epoch)."""
    skip = order.skip if nth == 0 else 0
    if order.is_global:
        yield from _global_batches(source, order, order.epoch + nth, skip)
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


def _global_batches(source: Any, order: _ReadOrder, epoch: int, skip: int) -> Iterator[Any]:
    """This rank's share of epoch ``epoch``'s permutation after its first ``skip``
    records: windows read in storage order (runs of consecutive records), each
    handed out as one batch in the permuted order -- the same sequence as
    ``to_torch(shuffle="global")`` with one reading process per rank."""
    from ..model import concat_columns, take_column

    kinds = source.kinds()
    mine = consumer_indices(
        source.count, order.rank, order.world_size, seed=order.seed, epoch=epoch
    )
    for part, runs in read_order(mine[skip:], GLOBAL_WINDOW):
        pieces: dict[str, list[Any]] = {name: [] for name in source.fields}
        for a, b in runs:
            for batch in source.batches(a, b):
                for name in source.fields:
                    pieces[name].append(batch[name])
        # the window's records came sorted by position; hand them out permuted
        where = np.searchsorted(np.sort(part), part)
        yield {
            name: take_column(concat_columns(kinds[name], pieces[name]), where)
            for name in source.fields
        }
