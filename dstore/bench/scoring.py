"""Accuracy impact per cell: the probe (or the user's ``evaluate``) on the records the
probe uses, as each cell reads them back, against the original's score.

Which records: :func:`probe_roles` picks, seeded, at most :data:`TRAIN_CAP` records
of the train split and :data:`TEST_CAP` of the test split (or a seeded 25% of the
train split's as a hold-out) among the measured ones, so the probe's time and memory
are bounded whatever the data's size; ``evaluate`` gets every split, at most
:data:`EVAL_CAP` records each. The probe only keeps their features
(:class:`~dstore.bench.probe.ProbeData`); ``evaluate`` gets them in memory.

The probe is deterministic: a cell whose probe records read back byte for byte as
another's (every lossless cell reads back the original's) gets that score without
training again (``probe_reused`` says whose), and a difference in accuracy can only
come from a difference in the data.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .probe import TEST, TRAIN, ProbeData
from .results import Cell
from .sample import SamplePlan
from .scan import concat_batches, gather
from .scores import Evaluate, Score, band_points, to_score
from .tasks import Task

__all__ = ["EVAL_CAP", "TEST_CAP", "TRAIN_CAP", "Scorer", "Timed", "noise_points", "probe_roles"]

#: Most records the probe trains on, and tests on (a seeded choice among the measured).
TRAIN_CAP, TEST_CAP = 2000, 1000
#: Most records per split a user's ``evaluate`` gets.
EVAL_CAP = 2000


@dataclass
class Timed:
    """A score with the seconds it took and the dtype the probe trained on."""

    score: Score
    seconds: float
    dtype: str
    chance: float = math.nan
    detail: str = ""

    @property
    def value(self) -> float:
        return self.score.value


def _capped(n: int, cap: int, rng: np.random.Generator) -> np.ndarray:
    """A bool mask of ``n`` choosing at most ``cap`` (seeded)."""
    mask = np.zeros(n, bool)
    mask[rng.permutation(n)[:cap]] = True
    return mask


def probe_roles(plan: SamplePlan, task: Task | None, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Per part, per split: each measured record's probe role (0: none, TRAIN, TEST)."""
    rng = np.random.default_rng([seed, 7])
    roles = [{s: np.zeros(len(ix), np.int8) for s, ix in part.items()} for part in plan.parts]
    sizes = {s: [len(part[s]) for part in plan.parts] for s in plan.counts}

    def assign(split: str, values: np.ndarray) -> None:
        pos = 0
        for j, n in enumerate(sizes[split]):
            roles[j][split][:] = values[pos : pos + n]
            pos += n

    if task is None:  # a user's evaluate: every split, capped
        for split, parts in sizes.items():
            assign(split, _capped(sum(parts), EVAL_CAP, rng).astype(np.int8))
        return roles
    n_train = sum(sizes[task.train])
    if task.test is None:  # a seeded hold-out of the train split
        order = rng.permutation(n_train)
        cut = int(n_train * 0.75)
        values = np.zeros(n_train, np.int8)
        values[order[:cut][:TRAIN_CAP]] = TRAIN
        values[order[cut:][:TEST_CAP]] = TEST
        assign(task.train, values)
        return roles
    assign(task.train, _capped(n_train, TRAIN_CAP, rng).astype(np.int8) * TRAIN)
    n_test = sum(sizes[task.test])
    assign(task.test, _capped(n_test, TEST_CAP, rng).astype(np.int8) * TEST)
    return roles


def noise_points(score: Score) -> float:
    """Twice the standard error (points) of a score; NaN: unknown."""
    if score.correct is not None and len(score.correct):
        var = float(np.var(score.correct))
        return 200 * math.sqrt(max(var, 1e-12) / len(score.correct))
    if score.n:
        p = score.value
        return 200 * math.sqrt(max(p * (1 - p), 1e-12) / score.n)
    return math.nan


class Scorer:
    """Scores the probe's records of a dataset's parts; remembers scores by the hash
    of those records (:func:`dstore.bench.scan.scan`)."""

    def __init__(
        self, task: Task | None, evaluate: Evaluate | None, roles: Sequence[dict[str, np.ndarray]]
    ) -> None:
        self.task, self.evaluate, self.roles = task, evaluate, list(roles)
        self.known: dict[str, tuple[Timed, str]] = {}  # hash -> (score, whose)
        self.base: Timed | None = None

    @property
    def fields(self) -> list[str]:
        """The fields whose bytes decide the score (hashed by the scan)."""
        if self.task is None:
            return []  # evaluate: every field (the scan hashes what is given)
        return [self.task.features, self.task.labels]

    def compute(self, files: Sequence[str], fmt: str) -> Timed:
        if self.evaluate is not None:
            return self._evaluate(files, fmt)
        assert self.task is not None
        task = self.task
        counts = {
            role: int(sum((r[s] == role).sum() for r in self.roles for s in r))
            for role in (TRAIN, TEST)
        }
        probe = ProbeData(task, counts)
        gather(
            files,
            fmt,
            self.roles,
            lambda role, _s, b: probe.add(role, b[task.features], b[task.labels]),
        )
        res = probe.result()
        return Timed(res.score, res.seconds, res.dtype, res.chance, res.detail)

    def _evaluate(self, files: Sequence[str], fmt: str) -> Timed:
        assert self.evaluate is not None
        parts: dict[str, list[Any]] = {}
        gather(files, fmt, self.roles, lambda _r, split, b: parts.setdefault(split, []).append(b))
        data = {split: concat_batches(batches) for split, batches in parts.items()}
        t = time.perf_counter()
        result = self.evaluate(data)
        seconds = time.perf_counter() - t
        return Timed(to_score(result, getattr(self.evaluate, "__name__", "evaluate")), seconds, "")

    def baseline(self, files: Sequence[str], probe_hash: str) -> Timed:
        """The original's score; a user's ``evaluate`` runs twice (the first pays its imports)."""
        base = self.compute(files, "npz")
        if self.evaluate is not None:
            base.seconds = self.compute(files, "npz").seconds
        self.base = base
        self.known[probe_hash] = (base, "the original's")
        return base

    def score_cell(
        self, cell: Cell, files: Sequence[str], fmt: str, probe_hash: str, name: str
    ) -> None:
        """Fill ``cell``'s accuracy, its difference to the original and the noise band."""
        base = self.base
        if base is None:
            return
        if probe_hash in self.known:
            scored, whose = self.known[probe_hash]
            cell.probe_reused = whose
        else:
            scored = self.compute(files, fmt)
            self.known[probe_hash] = (scored, name)
        cell.accuracy, cell.probe_s, cell.probe_dtype = scored.value, scored.seconds, scored.dtype
        cell.accuracy_delta = 100 * (cell.accuracy - base.value)
        cell.band = band_points(base.score, scored.score)
        cell.within_noise = (
            None if math.isnan(cell.band) else bool(abs(cell.accuracy_delta) <= cell.band)
        )
