"""Scores and their noise: what the probe (or a user's ``evaluate``) returns, and the
noise band of a difference between two scores.

The noise band of a difference is twice its standard error: paired over the same
test examples when both sides give per-example correctness (the probe does; so
may a user's ``evaluate``), else the binomial one from ``(score, n)``; a bare
score has no band and its differences cannot be judged.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..model import Column

__all__ = ["Evaluate", "ProbeResult", "Score", "band_points", "load_evaluate", "to_score"]

#: ``evaluate(data)`` returns a score, ``(score, n)`` or per-example correctness.
#: Fixed-size fields are arrays; strings and ragged fields are VarColumns.
Evaluate = Callable[[Mapping[str, Mapping[str, Column]]], object]


@dataclass(frozen=True)
class Score:
    """An accuracy-like score and what is known about its noise.

    ``n`` is the number of test examples behind it (None: unknown), ``correct``
    the per-example correctness (None: not given). Without either, a difference
    between two scores cannot be told from noise.
    """

    value: float
    n: int | None = None
    correct: np.ndarray | None = None


@dataclass
class ProbeResult:
    accuracy: float
    seconds: float
    n_test: int
    # per test example (tile): 1 right, 0 wrong; a detection tile's Jaccard index and a
    # segmentation tile's pixel accuracy lie between (paired noise bands over tiles)
    correct: np.ndarray
    dtype: str  # the dtype the probe trained on
    chance: float = float("nan")  # the score of a constant guess learnt from the train split
    detail: str = ""  # what the probe learnt from, for the report (classes, pixels per tile)

    @property
    def stderr_points(self) -> float:
        p = self.accuracy
        return 100 * math.sqrt(max(p * (1 - p), 1e-12) / max(self.n_test, 1))

    @property
    def score(self) -> Score:
        return Score(self.accuracy, self.n_test, self.correct)


def to_score(result: object, name: str = "evaluate") -> Score:
    """What a user's ``evaluate`` returned -> a :class:`Score`, or one UsageError line.

    A number is a bare score; ``(score, n)`` a proportion of ``n`` examples; a 1-d
    array of booleans or 0/1 values the per-example correctness (its mean is the score).
    """
    if isinstance(result, (bool, np.bool_)):
        raise UsageError(f"{name} returned {result!r}; return a score, (score, n) or an array")
    if isinstance(result, (int, float, np.integer, np.floating)):
        return Score(float(result))
    if isinstance(result, tuple) and len(result) == 2:
        value, n = result
        if (
            isinstance(value, (int, float, np.integer, np.floating))
            and isinstance(n, (int, np.integer))
            and n > 0
            and 0 <= float(value) <= 1
        ):
            return Score(float(value), int(n))
        raise UsageError(
            f"{name} returned {result!r}; (score, n) needs a proportion 0..1 and a count n >= 1"
        )
    arr = np.asarray(result) if isinstance(result, (list, np.ndarray)) else None
    if arr is not None and arr.ndim == 1 and len(arr) and arr.dtype.kind in "biuf":
        correct = arr.astype(np.float64)
        if np.isin(correct, (0.0, 1.0)).all():
            return Score(float(correct.mean()), len(correct), correct)
    raise UsageError(
        f"{name} returned {type(result).__name__}; return a score, (score, n) or a 1-d array "
        "of per-example correctness (booleans or 0/1)"
    )


def band_points(base: Score, cell: Score) -> float:
    """Twice the standard error (accuracy points) of ``cell - base``; NaN: cannot be judged.

    Paired when both give per-example correctness over the same examples (a
    lossless cell then has a band of 0 and a delta of 0); else binomial from the
    counts; else NaN.
    """
    if (
        base.correct is not None
        and cell.correct is not None
        and len(base.correct) == len(cell.correct)
    ):
        n = len(base.correct)
        if n < 2:
            return float("nan")
        d = cell.correct - base.correct
        return 200 * float(d.std(ddof=1)) / math.sqrt(n)
    if base.n and cell.n:
        var = sum(p * (1 - p) / n for p, n in ((base.value, base.n), (cell.value, cell.n)))
        return 200 * math.sqrt(max(var, 0.0))
    return float("nan")


def load_evaluate(spec: str) -> Evaluate:
    """``MODULE:FUNCTION`` -> the function, MODULE imported from the working directory first.

    ``python -m`` puts the working directory on ``sys.path`` but console scripts
    (``dstore``) do not, so a user's ``my_eval.py`` beside their data would not be found.
    """
    module_name, sep, fn_name = spec.partition(":")
    if not sep or not module_name.strip() or not fn_name.strip():
        raise UsageError(f"evaluate must be MODULE:FUNCTION (e.g. my_eval:score). Got {spec!r}.")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise UsageError(
                f"evaluate {spec!r}: no module {e.name!r} in the working directory {cwd} "
                "or on the Python path"
            ) from None
        raise UsageError(f"evaluate {spec!r}: importing {module_name!r} failed: {e}") from e
    except Exception as e:  # the user's module failed while importing: name it in one line
        raise UsageError(
            f"evaluate {spec!r}: importing {module_name!r} failed: {type(e).__name__}: {e}"
        ) from e
    finally:
        if added:
            sys.path.remove(cwd)
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise UsageError(
            f"evaluate {spec!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) "
            f"has no function {fn_name!r}"
        )
    return fn
