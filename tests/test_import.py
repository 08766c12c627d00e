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


def _modules_after(code: str) -> set[str]:
    code += "\nimport sys; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_cli_help_and_import_load_no_numpy():
    """`dstore --help` and `import dstore` start in Python's own time: the library (numpy
    and up) loads with the first name used (README, Start-up)."""
    assert "numpy" not in _modules_after("import dstore; dstore.__version__")
    help_code = (
        "import contextlib, io\nfrom dstore.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])"
    )
    assert "numpy" not in _modules_after(help_code)
    assert "numpy" in _modules_after("import dstore; dstore.convert")


def test_lazy_names_and_bench_stays_the_function():
    code = (
        "import dstore\nfrom dstore.bench import harness\n"
        "assert callable(dstore.bench) and dstore.bench is harness.bench\n"
        "assert dstore.SchemaError.__module__ == 'dstore.errors'\n"
        "assert set(dstore.__all__) <= set(dir(dstore))\n"
        "from dstore import *\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
