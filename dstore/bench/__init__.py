"""``dstore bench``: size, speed, memory, fidelity and accuracy impact of each format on your data.

:mod:`.plan` keeps the cells that change what is stored (formats x image choices x
dtype policies, :mod:`.grid`'s vocabulary); :mod:`.sample` picks the records (a
seeded, stratified sample of large data, extrapolated by :mod:`.extrapolate`);
:mod:`.harness` runs them (:mod:`.measure`, :mod:`.scan`, :mod:`.scoring`,
:mod:`.loader`), saving as it goes (:mod:`.progress`); :mod:`.recommend` judges
them against the input as it is; :mod:`.report` and :mod:`.plot` show them. The
accuracy probe is :mod:`.accuracy`'s (tasks, features, probe, noise bands);
:mod:`.examples` holds evaluation functions for ``--evaluate``. Needs the
``bench`` extra (scikit-learn for the probe, matplotlib for plots).
"""

from __future__ import annotations

from .harness import bench
from .plot import save_plot
from .report import save_report, to_markdown, to_text
from .results import BenchReport, Cell

__all__ = ["BenchReport", "Cell", "bench", "save_plot", "save_report", "to_markdown", "to_text"]
