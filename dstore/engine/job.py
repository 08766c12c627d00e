"""One conversion's settings as one frozen object, built once by each entry point.

:func:`dstore.convert`, :func:`dstore.save` and ``--per-source``
(:func:`dstore.api.per_source.write_per_source`) each turn their keyword arguments
into a :class:`ConvertJob` with :meth:`ConvertJob.build` and hand it down whole:
``write_dataset`` -> ``write_sharded`` -> the local or Dask shard loop. A
setting added here reaches every writer without a new keyword in five
signatures (a loose ``overwrite`` was once lost on the way to ``--per-source``).

Only the source, the destination and the output codec travel beside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UsageError
from ..model.schema import DEFAULT_BATCH_BYTES
from .dtypes import DtypePolicy, OnOverflow, parse_policy

if TYPE_CHECKING:
    from ..abc import Reader
    from ..output import Overwrite
    from .cast import BatchObserver, Progress

__all__ = ["ConvertJob", "SourceRef", "check_seed"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def check_seed(seed: Any) -> int:
    """``seed`` as the non-negative integer a shuffle at conversion takes, or one line."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageError(f"shuffle_seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A read-only copy: a caller changing its dict later cannot change the job."""
    return MappingProxyType(dict(mapping or {}))


@dataclasses.dataclass(frozen=True)
class SourceRef:
    """How a worker process opens the source itself.

    ``opener`` is the function that opens it (:func:`dstore.sources.open_reader`,
    given by the API): the engine sits below the sources and never imports them,
    and a module-level function pickles by name to a Dask worker."""

    path: str
    format: str | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    opener: Callable[..., Reader] | None = None

    def open(self) -> Reader:
        """The source, opened in this process."""
        if self.opener is None:
            raise ValueError(f"{self.path}: this source is streamed; no worker can reopen it")
        return self.opener(self.path, format=self.format, **dict(self.options))


@dataclasses.dataclass(frozen=True)
class ConvertJob:
    """How to convert: everything but the source, the destination and the output codec.

    Frozen: a step that needs another value (a Dask client connected for this run,
    the sources an output may not replace) derives a copy with :meth:`replace`."""

    # ---- writing
    #: the dtype policy every floating field goes through (``dtype``/``on_overflow``)
    policy: DtypePolicy = dataclasses.field(default_factory=DtypePolicy)
    #: replace an existing destination that the output format owns
    overwrite: Overwrite = False  # True, or "foreign": also delete files the format did not write
    #: finish an interrupted sharded output, keeping the shards it completed
    resume: bool = False
    #: bytes of decoded records per batch read, cast and written
    batch_bytes: int = DEFAULT_BATCH_BYTES
    #: called with (records written, records in all) after each batch (per shard on Dask)
    progress: Progress | None = None
    #: where shards are written: None on this machine, a ``dask.distributed.Client``
    #: (or a scheduler address, connected by :func:`dstore.convert` for the run)
    client: Any = None
    #: times Dask retries a failed shard task
    retries: int = 2
    #: write the dataset's cards into a folder output (croissant.json; the Hub's README.md
    #: for Parquet) as part of its commit (:mod:`dstore.card`)
    card: bool = True
    #: add the records after the destination's, as its next version (``dstore.api.append``)
    append: bool = False
    #: append a source whose content is already in the destination's history
    append_again: bool = False
    #: the versions the output's schema records (set by an append that rewrites its dataset)
    versions: tuple[Mapping[str, Any], ...] = ()
    #: the inputs: an output may never replace one, and a resume checks they did not change
    sources: tuple[str, ...] = ()
    #: how a Dask worker reopens the source (None: this process sends the records)
    source: SourceRef | None = None
    # ---- output format
    #: the output format's name (None: from the destination's extension)
    to: str | None = None
    #: the output format's options (``-o KEY=VALUE``), a layout's own keys included
    options: Mapping[str, Any] = dataclasses.field(default_factory=lambda: _EMPTY)
    # ---- reading
    #: the input format's name (None: from the source's name)
    from_format: str | None = None
    #: the input format's options (``--drop``, ``follow_links``)
    src_options: Mapping[str, Any] = dataclasses.field(default_factory=lambda: _EMPTY)
    #: a training library's feature layout to map to or from (:mod:`dstore.layouts`)
    layout: str | None = None
    #: keep encoded images encoded in formats that would decode them
    keep_encoded: bool = False
    #: write each split's records in this seed's permutation of the source's order (a
    #: shuffle at conversion time, :mod:`dstore.sources.permuted`; an append: the records
    #: appended); None: in the source's order
    shuffle_seed: int | None = None
    #: called with (1, files) after each file of a many-file source is scanned
    scan_progress: Progress | None = None
    #: sees each batch as written (``convert --check``); shards are then written on
    #: threads of this process, not in worker processes or on Dask
    observe: BatchObserver | None = None

    @classmethod
    def build(
        cls,
        *,
        dtype: str | Sequence[str] | DtypePolicy | None = None,
        on_overflow: OnOverflow = "error",
        follow_links: bool = False,
        options: Mapping[str, Any] | None = None,
        src_options: Mapping[str, Any] | None = None,
        sources: Sequence[str] = (),
        **settings: Any,
    ) -> ConvertJob:
        """The job of the public keyword arguments: ``dtype``/``on_overflow`` become the
        policy, ``follow_links`` an input option; every other keyword is a field."""
        policy = dtype if isinstance(dtype, DtypePolicy) else parse_policy(dtype, on_overflow)
        if settings.get("shuffle_seed") is not None:
            settings["shuffle_seed"] = check_seed(settings["shuffle_seed"])
        if follow_links:  # a reading choice: it travels with the source's options (Dask too)
            src_options = {**dict(src_options or {}), "follow_links": True}
        return cls(
            policy=policy,
            options=_frozen(options),
            src_options=_frozen(src_options),
            sources=tuple(sources),
            **settings,
        )

    def replace(self, **changes: Any) -> ConvertJob:
        """A copy with ``changes`` (field names); the mappings stay read-only."""
        for name in ("options", "src_options"):
            if name in changes:
                changes[name] = _frozen(changes[name])
        if "sources" in changes:
            changes["sources"] = tuple(changes["sources"])
        return dataclasses.replace(self, **changes)
