"""Batches to serialized ``tf.train.Example`` records, on threads or worker processes.

:class:`ExampleEncoder` holds each field's encoding (chosen in :mod:`.fields`) and
turns batches into the same bytes in every process; a format adds its framing.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Generator, Iterable
from typing import Any

from ...errors import SchemaError
from ...images.imagecodec import LossyImage
from ...images.pixels import image_libraries
from ...images.png import FPNG_LEVELS, png_encoder
from ...model import raw_record
from ...model.names import is_utf8_text
from ...model.schema import Batch, Schema, SerializedBatch
from ...parallel import default_workers
from ...sharding import encode_chunks
from ...sharding.processes import encoder_processes, unpickled
from .encodings import FieldEncoding
from .fields import batch_signature, choose_encoding
from .wire import encode_example, encode_sequence_example


class ExampleEncoder:
    """Records of ``schema`` -> serialized Examples, one field per feature.

    Holds only the schema, the field encodings and settings (no handles or
    threads), so it pickles to Dask workers; every process encodes the same
    bytes for the same records."""

    def __init__(
        self,
        schema: Schema,
        codec: str,
        *,
        renames: dict[str, str],
        images: set[str] | None,
        lossy: LossyImage | None,
        png_level: str,
        workers: int,
    ) -> None:
        self.schema = schema
        self.png_level = png_level
        self.workers = workers
        self.encodings: dict[str, dict[str, FieldEncoding]] = {}
        for split in schema.splits.values():
            if images is not None and (unknown := images - set(split.fields)):
                raise SchemaError(f"{codec}: images= names unknown field(s) {sorted(unknown)}")
            self.encodings[split.name] = {
                name: choose_encoding(spec, renames.get(name, name), images, lossy, codec)
                for name, spec in split.fields.items()
            }
            features = [e.feature for e in self.encodings[split.name].values()]
            for name, enc in self.encodings[split.name].items():
                # feature names are kept byte for byte, but a protobuf key is UTF-8 text
                if not is_utf8_text(enc.feature):
                    raise SchemaError(
                        f"{codec}: split {split.name!r}, field {name!r}: feature name {enc.feature!r} "
                        "is not valid Unicode text (a lone surrogate); rename it with -o rename=..."
                    )
            if len(set(features)) != len(features):
                raise SchemaError(f"{codec}: two fields map to the same feature name: {features}")

    @classmethod
    def from_options(cls, schema: Schema, codec: str, options: Any) -> ExampleEncoder:
        """The encoder a format's options ask for (``rename``, ``images``, the lossy
        ``image_codec``/``image_format`` and ``quality``, ``png_level``, ``workers``)."""
        return cls(
            schema,
            codec,
            renames=dict(options.rename),
            images=None if options.images is None else set(options.images),
            lossy=options.lossy(),
            png_level=str(options.png_level),
            workers=options.workers,
        )

    def libraries(self) -> dict[str, str]:
        """The image encoders (with versions) the records' bytes depend on."""
        every = [e for encs in self.encodings.values() for e in encs.values()]
        return image_libraries((e.lossy or e.encoding for e in every), self.png_level)

    def fields_json(self) -> dict[str, Any]:
        """The manifest's ``fields``: each field's feature name and encoding, per split."""
        return {
            split: {name: e.to_json() for name, e in encs.items()}
            for split, encs in self.encodings.items()
        }

    def encode(
        self,
        split: str,
        chunk: Batch,
        png: Any = None,
        frame: Callable[[bytes], bytes] | None = None,
    ) -> list[bytes]:
        """The records of ``chunk`` as serialized Examples, each through ``frame`` if given."""
        png = png or png_encoder(self.png_level)
        spec = self.schema.splits[split]
        encs = self.encodings[split]
        n = len(next(iter(chunk.values())))
        lists = {encs[name].feature for name in chunk if encs[name].how.feature_list}
        # records read as exactly the Example this loop would encode: kept as they are
        copies = None
        if isinstance(chunk, SerializedBatch) and chunk.signature == batch_signature(
            encs, spec, list(chunk)
        ):
            copies = chunk.records
        out = []
        for i in range(n):
            if copies is not None and (rec := copies[i]) is not None:
                out.append(rec if frame is None else frame(rec))
                continue
            feats = {
                encs[name].feature: encs[name].how.encode(
                    encs[name], spec.fields[name], raw_record(spec.fields[name].kind, col, i), png
                )
                for name, col in chunk.items()
            }
            if lists:  # fields read from feature lists: a SequenceExample, the rest its context
                context = {k: v for k, v in feats.items() if k not in lists}
                steps = {k: v for k, v in feats.items() if k in lists}
                rec = encode_sequence_example(context, steps)
            else:
                rec = encode_example(feats)
            out.append(rec if frame is None else frame(rec))
        return out

    def encode_batches(
        self,
        split: str,
        batches: Iterable[Batch],
        frame: Callable[[bytes], bytes] | None = None,
        records: int | None = None,
    ) -> Generator[list[bytes], None, None]:
        """Chunks of records encoded on all cores, in order: on threads, or in worker
        processes when fpng (which holds the GIL) has at least :data:`PROCESS_MIN_IMAGES`
        images of the ``records`` to encode and :data:`PROCESS_MIN_WORKERS` workers."""
        png = png_encoder(self.png_level)
        workers = self.workers or default_workers()
        fpng_images = (records or 0) * self.fpng_fields(split)
        # children already running serve any shard with fpng images; starting them pays
        # only for many, and only with cores to spare for them
        processes = (
            encoder_processes(workers, start=fpng_images >= PROCESS_MIN_IMAGES)
            if fpng_images and workers >= PROCESS_MIN_WORKERS
            else None
        )
        if processes is None:
            yield from encode_chunks(
                batches, lambda _, c: self.encode(split, c, png, frame), workers, "dstore-png"
            )
            return
        state = pickle.dumps(self, protocol=5)  # once per shard; each child unpickles it once
        yield from encode_chunks(
            batches,
            lambda _, c: processes.submit(_encode_in_child, state, split, c, frame).result(),
            2 * workers,  # one chunk in each child's hands while the next one is sent
            "dstore-png",
            ahead=1,  # chunks in flight hold their batch's pixels: as many as keep children busy
            chunk=PROCESS_CHUNK,
        )

    def fpng_fields(self, split: str) -> int:
        """Fields of ``split`` that fpng would encode (lossless PNG at the ``fast`` level)."""
        if self.png_level not in FPNG_LEVELS:
            return 0
        return sum(e.encoding == "png" and e.lossy is None for e in self.encodings[split].values())


#: PNG images a shard needs before its chunks go to worker processes: starting the
#: children (Python, numpy, dstore, fpng: about 0.5 s of CPU each) pays only then
PROCESS_MIN_IMAGES = 512
#: workers (``-o workers``, default one per core) a conversion needs before its PNG
#: chunks go to worker processes. On 2 cores they did not pay (issue #24, docs/
#: benchmarks.md): the converting process's own share -- reading the npz, sha256,
#: writing, and ~0.2 ms per tile of sending pixels and receiving records -- keeps
#: about one core busy, so two children add CPU work without adding a core, and
#: threads (fpng one at a time under the GIL) were as fast or faster, with 110 MB
#: less memory. With 3 or more the children get cores of their own (not measured).
PROCESS_MIN_WORKERS = 3
#: records per chunk sent to a worker process (a pickle of their pixels each way)
PROCESS_CHUNK = 8


def _encode_in_child(
    state: bytes, split: str, chunk: Batch, frame: Callable[[bytes], bytes] | None
) -> list[bytes]:
    """``ExampleEncoder.encode`` in a worker process, on the encoder pickled as ``state``."""
    encoder: ExampleEncoder = unpickled(state)
    return encoder.encode(split, chunk, None, frame)
