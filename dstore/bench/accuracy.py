"""The accuracy probe's public names, in one place: tasks (:mod:`.tasks`), scores and
noise bands (:mod:`.scores`), features (:mod:`.features`) and the probe itself
(:mod:`.probe`)."""

from __future__ import annotations

from .features import image_features, is_image_batch, pixel_features, probe_matrix
from .probe import PROBE_ALPHA, ProbeData, run_probe, split_data
from .scores import Evaluate, ProbeResult, Score, band_points, load_evaluate, to_score
from .tasks import (
    LAYOUT_KINDS,
    PROBES,
    Task,
    check_labels,
    class_presence,
    find_task,
    labels_1d,
    layout_kind,
    require_sklearn,
    task_kind,
)

__all__ = [
    "LAYOUT_KINDS",
    "PROBES",
    "PROBE_ALPHA",
    "Evaluate",
    "ProbeData",
    "ProbeResult",
    "Score",
    "Task",
    "band_points",
    "check_labels",
    "class_presence",
    "find_task",
    "image_features",
    "is_image_batch",
    "labels_1d",
    "layout_kind",
    "load_evaluate",
    "pixel_features",
    "probe_matrix",
    "require_sklearn",
    "run_probe",
    "split_data",
    "task_kind",
    "to_score",
]
