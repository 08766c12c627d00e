"""The state of a training reader: what it holds, and the checks a loaded one passes.

A state (``DstoreIterableDataset.state_dict()``) is a small JSON object:

- ``version``: 2 (1: states from before they named their dataset);
- ``dataset``: ``{"split", "count", "fingerprint", "version"}``: the split read, its
  record count, a digest of the split's schema, its stored field checksums and (a
  sharded folder with a manifest) each shard's record count and sha256, and the
  version of the dataset read (a state loaded into a reader of another version makes
  it read that one: a run resumed after an append reads the records it started on);
- ``seed``, ``shuffle``, ``epoch``: the plan every reading process derives;
- ``history``: for each earlier run of the epoch resumed on another number of
  processes, how many records each of its processes took (``shuffle="global"``);
- ``consumer``, ``consumers``, ``taken``: which reading process this is, of how
  many, and how many of the records it is dealt this epoch it has taken; or, in a
  state joined by :func:`merge_states`, ``consumed``: each process's ``taken``.

:func:`check_state` checks a state field by field against the reader it is
loaded into: anything malformed, impossible (a negative count, more records
than a process is dealt) or of another dataset, split, seed or shuffle is one
:class:`~dstore.errors.ReaderStateError` line naming the field. A version-1
state (no fingerprint) is checked for all the rest and loads with a warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ReaderStateError
from ..sources.versions import version_of
from .plan import PERMUTATIONS, GlobalLayout, consumer_ranges

__all__ = [
    "STATE_VERSION",
    "ReaderPlan",
    "check_state",
    "dataset_identity",
    "dataset_states",
    "merge_states",
]

STATE_VERSION = 2
#: states from before the fingerprint: loaded (checked for all but the dataset) with a warning
_UNNAMED = 1
_RUN_KEYS = ("version", "dataset", "seed", "shuffle", "epoch", "history")
_PROCESS_KEYS = (*_RUN_KEYS, "consumer", "consumers", "taken")
_MERGED_KEYS = (*_RUN_KEYS, "consumed")
_log = logging.getLogger("dstore")


def dataset_identity(reader: Any, split: str) -> dict[str, Any]:
    """What a state names its dataset by: the split, its record count, and a
    fingerprint of the split's schema, stored field checksums and listed shards."""
    schema = reader.schema
    spec = schema.splits[split]
    body: dict[str, Any] = {
        "split": split,
        "count": spec.count,
        "fields": {name: f.to_json() for name, f in spec.fields.items()},
        "checksums": schema.checksums.get(split, {}),
    }
    manifest = getattr(reader, "manifest", None)  # a sharded folder dstore wrote
    if isinstance(manifest, Mapping):
        shards = manifest["splits"][split]["shards"]
        body["shards"] = [[s.get("records"), s.get("sha256")] for s in shards]
    text = json.dumps(body, sort_keys=True, default=str)
    identity = {"split": split, "count": spec.count, "fingerprint": _digest(text)}
    return {**identity, "version": version_of(reader)}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class ReaderPlan:
    """What a reader's states must agree with: its dataset, seed, shuffle and ranges."""

    identity: dict[str, Any]
    seed: int
    shuffle: int | str
    ranges: Sequence[tuple[int, int]]
    streaming: bool
    #: how a seeded order of the whole split is dealt (``shuffle`` "global" or "block")
    layout: GlobalLayout | None = None

    @property
    def is_global(self) -> bool:
        """A seeded order of the whole split (``shuffle="global"`` or ``"block"``)."""
        return self.shuffle in PERMUTATIONS

    def dealt(self, remaining: int, consumer: int, consumers: int) -> int:
        """Records of a seeded order's ``remaining`` that process ``consumer`` is dealt."""
        layout = self.layout or GlobalLayout(remaining)
        return layout.share(remaining, consumer, consumers)

    def share(self, consumer: int, consumers: int, epoch: int, remaining: int) -> int:
        """Records reading process ``consumer`` of ``consumers`` is dealt in ``epoch``
        (of ``remaining`` left by earlier runs, for a seeded order of the whole split)."""
        if self.is_global:
            return self.dealt(remaining, consumer, consumers)
        mine = consumer_ranges(
            self.ranges,
            consumer,
            consumers,
            shuffle=int(self.shuffle) > 0,
            seed=self.seed,
            epoch=epoch,
            streaming=self.streaming,
        )
        return sum(b - a for a, b in mine)


def check_state(state: Any, plan: ReaderPlan) -> dict[str, Any]:
    """``state`` checked field by field against ``plan``, its numbers as ints; one
    :class:`ReaderStateError` line for the first field that cannot be."""
    version = _version(state)
    merged = "consumer" not in state
    _check_keys(state, version, merged)
    if version == _UNNAMED:
        _log.warning(
            "loading a reader state from before states named their dataset (version 1): "
            "its counts are checked against this dataset, not that it is the same dataset"
        )
    else:
        _check_dataset(state["dataset"], plan.identity)
    for key, expected in (("seed", plan.seed), ("shuffle", plan.shuffle)):
        value = state[key]
        if not _same(value, expected):
            raise ReaderStateError(
                f"the state is of {key}={_shown(value)}; this reader has {key}={expected!r}"
            )
    epoch = _count(state["epoch"], "epoch")
    history, remaining = _history(state["history"], plan)
    out: dict[str, Any] = {
        "version": STATE_VERSION,
        "dataset": plan.identity,
        "seed": plan.seed,
        "shuffle": plan.shuffle,
        "epoch": epoch,
        "history": history,
    }
    if merged:
        if not plan.is_global:
            raise ReaderStateError(
                "a merged state resumes shuffle='global' or 'block' readers only"
            )
        out["consumed"] = _run(state["consumed"], remaining, "consumed", plan)
        return out
    consumers = _count(state["consumers"], "consumers", lo=1)
    consumer = _count(state["consumer"], "consumer", hi=consumers - 1)
    share = plan.share(consumer, consumers, epoch, remaining)
    taken = _count(
        state["taken"],
        "taken",
        hi=share,
        what=f"the records reading process {consumer} of {consumers} is dealt in epoch {epoch}",
    )
    if taken and not plan.is_global and int(plan.shuffle) > 1:
        raise ReaderStateError(
            "a shuffle buffer cannot resume mid-epoch exactly (its order depends on the "
            "records already read); use shuffle=0 or shuffle='global'"
        )
    return {**out, "consumer": consumer, "consumers": consumers, "taken": taken}


def _version(state: Any) -> int:
    if not isinstance(state, Mapping):
        raise ReaderStateError(
            f"a reader state is the dict state_dict() or merge_states() returned; got "
            f"{type(state).__name__}"
        )
    version = state.get("version")
    if type(version) is not int or version not in (_UNNAMED, STATE_VERSION):
        raise ReaderStateError(
            f"not a dstore reader state ('version' is {_shown(version)}; this dstore reads "
            f"versions {_UNNAMED} and {STATE_VERSION}): {_shown(state)}"
        )
    return version


def _check_keys(state: Mapping[str, Any], version: int, merged: bool) -> None:
    keys = set(_MERGED_KEYS if merged else _PROCESS_KEYS)
    if version == _UNNAMED:
        keys.discard("dataset")
    missing = sorted(keys - set(state))
    unknown = sorted(map(_shown, set(state) - keys))
    if missing or unknown:
        what = [f"no {', '.join(missing)}"] if missing else []
        what += [f"unknown key(s) {', '.join(unknown)}"] if unknown else []
        kind = "a merged state (merge_states)" if merged else "a reading process's state"
        raise ReaderStateError(f"reader state: {'; '.join(what)} for {kind}")


def _check_dataset(named: Any, identity: Mapping[str, Any]) -> None:
    # "version" (which version of a dataset that grows): states before it lack it
    if not isinstance(named, Mapping) or set(named) | {"version"} != set(identity) | {"version"}:
        raise ReaderStateError(
            f"reader state: 'dataset' is {_shown(named)}, not "
            "{'split': ..., 'count': ..., 'fingerprint': ...}"
        )
    if not _same(named["split"], identity["split"]):
        raise ReaderStateError(
            f"the state is of split {_shown(named['split'])}; this reader reads split "
            f"{identity['split']!r}"
        )
    if not all(_same(named[k], identity[k]) for k in ("count", "fingerprint")):
        raise ReaderStateError(
            f"the state is of another dataset (split {identity['split']!r} of "
            f"{_shown(named['count'])} records, fingerprint {_shown(named['fingerprint'])}); "
            f"this one has {identity['count']} records, fingerprint {identity['fingerprint']} "
            "(its schema, field checksums or shards differ)"
        )


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and bool(a == b)


def _history(history: Any, plan: ReaderPlan) -> tuple[list[list[int]], int]:
    """The runs of the epoch before this one, and the records they left."""
    if not isinstance(history, list):
        raise ReaderStateError(f"reader state: 'history' is {_shown(history)}, not a list")
    if history and not plan.is_global:
        raise ReaderStateError(
            "reader state: 'history' lists earlier runs, which only shuffle='global' or "
            f"'block' readers have; this reader has shuffle={plan.shuffle!r}"
        )
    remaining = plan.identity["count"]
    runs = []
    for i, run in enumerate(history):
        runs.append(_run(run, remaining, f"history[{i}]", plan))
        remaining -= sum(runs[-1])
    return runs, remaining


def _run(counts: Any, remaining: int, name: str, plan: ReaderPlan) -> list[int]:
    """How many records each process of one run took, each at most what it was dealt."""
    if not isinstance(counts, list) or not counts:
        raise ReaderStateError(
            f"reader state: {name!r} is {_shown(counts)}, not a list of record counts "
            "(one per reading process)"
        )
    k = len(counts)
    return [
        _count(
            n,
            f"{name}[{c}]",
            hi=plan.dealt(remaining, c, k),
            what=f"the records reading process {c} of {k} was dealt",
        )
        for c, n in enumerate(counts)
    ]


def _count(value: Any, name: str, lo: int = 0, hi: int | None = None, what: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ReaderStateError(f"reader state: {name!r} is {_shown(value)}, not a whole number")
    n = int(value)
    if n < lo or (hi is not None and n > hi):
        bounds = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ReaderStateError(
            f"reader state: {name!r} is {n}; it must be in {bounds}"
            + (f" ({what})" if what else "")
        )
    return n


def _shown(value: Any) -> str:
    """A value of a state as one short line (whatever it holds)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ------------------------------------------------------------------ several processes


def merge_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One state from the states of every reading process of a run (each rank's
    DataLoader workers; find them with :func:`dataset_states`), which a reader with
    ``shuffle="global"`` (or ``"block"``) resumes from on any number of ranks and workers.

    Raises :class:`~dstore.errors.ReaderStateError` (a ``ValueError``) when a state is
    malformed, processes are missing or twice, or the states disagree."""
    if isinstance(states, (str, bytes, Mapping)) or not isinstance(states, Sequence) or not states:
        raise ReaderStateError(
            f"merge_states takes the states of every reading process of a run (a list); "
            f"got {_shown(states)}"
        )
    for st in states:
        version = _version(st)
        if "consumer" not in st:
            raise ReaderStateError("merge_states: a merged state cannot be merged again")
        _check_keys(st, version, merged=False)
    first = states[0]
    keys = ("version", "dataset", "seed", "shuffle", "epoch", "history", "consumers")
    if any(st.get(k) != first.get(k) for st in states for k in keys):
        raise ReaderStateError(
            "the states are of different runs (dataset, seed, shuffle, epoch or processes)"
        )
    consumers = _count(first["consumers"], "consumers", lo=1)
    taken: dict[int, int] = {}
    for st in states:
        consumer = _count(st["consumer"], "consumer", hi=consumers - 1)
        if consumer in taken:
            raise ReaderStateError(f"merge_states: two states of reading process {consumer}")
        taken[consumer] = _count(st["taken"], "taken")
    if len(taken) != consumers:
        missing = sorted(set(range(consumers)) - set(taken))
        raise ReaderStateError(f"states of reading processes {missing} of {consumers} are missing")
    merged = {k: first[k] for k in _RUN_KEYS if k in first}
    return {**merged, "consumed": [taken[c] for c in range(consumers)]}


def dataset_states(loader_state: Any) -> list[dict[str, Any]]:
    """The dstore reader states inside a ``StatefulDataLoader.state_dict()`` (one per
    worker, or the main process's), for :func:`merge_states`."""
    found: list[dict[str, Any]] = []

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            version = obj.get("version")
            if version in (_UNNAMED, STATE_VERSION) and "consumer" in obj and "taken" in obj:
                found.append(obj)
                return
            for v in obj.values():
                walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)

    walk(loader_state)
    return found
