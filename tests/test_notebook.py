"""The notebook runs top to bottom (so it cannot rot)."""

from __future__ import annotations

import os

import pytest

# The whole module is slow: executes the notebooks with a Jupyter kernel (~100 s); `pytest -m "not slow"` leaves it out.
pytestmark = pytest.mark.slow

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("sklearn")

NOTEBOOK = os.path.join(os.path.dirname(__file__), "..", "notebooks", "choosing_a_format.ipynb")


def test_choosing_a_format_notebook_executes():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "recommendation:" in outputs
