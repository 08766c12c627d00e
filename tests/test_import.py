"""``import dstore`` stays light: no heavy backend is imported until used."""

from __future__ import annotations

import subprocess
import sys

HEAVY = [
    "h5py",
    "zarr",
    "numcodecs",
    "tensorflow",
    "torch",
    "sklearn",
    "matplotlib",
    "imagecodecs",
    "skimage",
    "tqdm",
]


def test_import_dstore_imports_no_backend():
    code = (
        "import sys, dstore\n"
        "dstore.available_codecs(); dstore.infer_codec('a.tfrecords')\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_npz_convert_imports_no_backend(tmp_path):
    code = (
        "import sys, numpy as np, dstore\n"
        f"np.savez({str(tmp_path / 'a.npz')!r}, x=np.arange(10))\n"
        f"dstore.convert({str(tmp_path / 'a.npz')!r}, {str(tmp_path / 'b.npz')!r})\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
