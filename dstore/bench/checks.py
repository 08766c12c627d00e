"""What ``dstore.bench`` checks before any work: the formats, counts and goal, the
loader, the probe's task and its labels -- each wrong value one line naming it."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import api
from ..errors import DstoreError, LabelError, MissingDependencyError, UsageError
from ..registry import available_codecs, get_codec_class
from .loader import LOADERS, LoaderRead
from .recommend import OBJECTIVES
from .sample import auto_sample
from .tasks import Task, check_labels, find_task, require_sklearn

__all__ = ["check_inputs", "check_loader", "find_checked_task", "sample_size"]


def check_inputs(
    formats: Sequence[str] | None,
    repeats: int,
    sample: int | str | None,
    objective: str,
    no_probe: dict[str, object] | None = None,
) -> list[str]:
    """Everything that can be wrong before any work: one DstoreError naming what and why."""
    for name, value in (no_probe or {}).items():
        if value is not None:
            raise UsageError(
                f"--no-probe measures no accuracy, so --{name} has nothing to do; drop one"
            )
    if formats:
        for fmt in formats:
            get_codec_class(fmt)  # unknown name or missing extra: one line naming it
        chosen = list(formats)
    else:
        chosen = [n for n, hint in available_codecs().items() if hint is None]
    if repeats < 1:
        raise UsageError(f"repeats must be >= 1. Got {repeats}.")
    if isinstance(sample, int) and sample < 0:
        raise UsageError(f"sample must be >= 1 record (0: every record). Got {sample}.")
    if isinstance(sample, str) and sample not in ("auto", "off"):
        raise UsageError(f"sample must be a number of records, auto or off. Got {sample!r}.")
    if objective not in OBJECTIVES:
        raise UsageError(f"objective must be one of {', '.join(OBJECTIVES)}. Got {objective!r}.")
    return chosen


def check_loader(loader: str | None, workers: int) -> LoaderRead | None:
    """The ``--read`` settings, checked (and the loader's library found) before any work."""
    if loader is None:
        return None
    if loader not in LOADERS:
        raise UsageError(f"--read must be one of {', '.join(LOADERS)}. Got {loader!r}.")
    if workers < 0:
        raise UsageError(f"--workers must be >= 0. Got {workers}.")
    if loader == "torch" and importlib.util.find_spec("torch") is None:
        raise MissingDependencyError("bench", "torch", "torch", what="dstore bench --read torch")
    if loader == "tf" and importlib.util.find_spec("tensorflow") is None:
        raise MissingDependencyError("bench", "tf", "tensorflow", what="dstore bench --read tf")
    return LoaderRead(loader, workers)


def find_checked_task(
    src: str,
    info: Any,
    features: str | None,
    labels: str | None,
    layout: str | None,
    warnings: list[str],
) -> Task | None:
    """The probe's task, its labels checked; None (and a warning) when none is recognisable."""
    try:
        task = find_task(info.schema, features, labels, layout)
    except LabelError as e:
        raise LabelError(f"{src}: {e}") from None
    except DstoreError as e:
        if features is not None or labels is not None or layout is not None:
            raise type(e)(f"{src}: {e}") from None
        warnings.append(f"no accuracy probe: {e}")
        return None
    require_sklearn()
    # The label values, a batch at a time (masks are as big as the tiles' pixels): a
    # label the probe cannot learn from is refused now, not after the first minutes.
    with api.open(src) as ds:
        for split in (task.train, task.test):
            if split is not None:
                batches = ds[split].iter_batches(fields=[task.labels])
                chunks = (np.asarray(b[task.labels]) for b in batches)
                check_labels(task, split, chunks, src)
    return task


def sample_size(sample: int | str | None, schema: Any) -> int | None:
    if sample in (None, "off", 0):
        return None
    if sample == "auto":
        return auto_sample(schema)
    return int(sample)
