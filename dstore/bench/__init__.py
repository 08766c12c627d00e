"""``dstore bench``: size, speed, memory, fidelity and accuracy impact of each format on your data.

Formats x image encodings x dtype policies (:mod:`.grid`), measured by
:mod:`.harness` against the input as it is, the accuracy probe and noise bands
in :mod:`.accuracy`, tables, recommendation and plot in :mod:`.report`;
:mod:`.examples` holds evaluation functions for ``--evaluate``. Needs the
``bench`` extra (scikit-learn for the probe, matplotlib for plots).
"""

from __future__ import annotations

from .harness import bench
from .report import save_plot, save_report, to_markdown, to_text
from .results import BenchReport, Cell

__all__ = ["BenchReport", "Cell", "bench", "save_plot", "save_report", "to_markdown", "to_text"]
