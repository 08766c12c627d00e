"""``import dstore`` stays light: no heavy backend is imported until used."""

from __future__ import annotations

import subprocess
import sys

from dstore.registry import registry

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
        "from dstore.check import run\n"
        "assert callable(dstore.check) and dstore.check is run.check\n"
        "assert dstore.SchemaError.__module__ == 'dstore.errors'\n"
        "assert set(dstore.__all__) <= set(dir(dstore))\n"
        "from dstore import *\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_info_of_an_npz_imports_only_what_it_reads(tmp_path):
    """`dstore info x.npz` (issue #27 §3.9): no backend, and none of the conversion engine,
    the sharding runner, the multi-file reader or the installed packages' entry points."""
    import numpy as np

    path = str(tmp_path / "small.npz")
    np.savez(path, x=np.zeros((10, 3)), y=np.arange(10))
    loaded = _modules_after(
        "import contextlib, io\nfrom dstore.cli import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main(['info', {path!r}]) == 0"
    )
    unneeded = {
        *HEAVY,
        *(m for entry in registry.values() for m in entry.requires),  # every format's library
        "dstore.api.convert",
        "dstore.engine.cast",
        "dstore.engine.run",
        "dstore.sources.many_files",
        "dstore.codecs.npz.writer",
        "importlib.metadata",
    }
    assert not unneeded & loaded, sorted(unneeded & loaded)


def test_api_functions_stay_functions_after_their_modules_import():
    """``dstore.api`` imports its names lazily; importing the submodule of the same name
    (dstore.api.convert) must not turn ``api.convert`` into a module."""
    code = (
        "import dstore.api.convert, dstore.api.info, dstore.api.verify, dstore.api.index\n"
        "from dstore import api\n"
        "assert all(callable(getattr(api, n)) for n in ('convert', 'info', 'verify', 'index'))\n"
        "assert set(api.__all__) <= set(dir(api)) and api.check.__module__ == 'dstore.api.verify'\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_convert_to_npz_imports_no_sharding(tmp_path):
    """A one-file output never loads the sharded-directory runner (issue #27 §3.9)."""
    src = tmp_path / "small.json"
    src.write_text('[{"x": [1.0, 2.0], "y": 1}, {"x": [3.0, 4.0], "y": 0}]')
    loaded = _modules_after(
        "import contextlib, io\nfrom dstore.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['convert', {str(src)!r}, {str(tmp_path / 'o.npz')!r}]) == 0"
    )
    assert not {"dstore.engine.run", "dstore.sources.many_files", *HEAVY} & loaded


def test_to_tf_dataset_without_tensorflow_names_the_function_not_a_format(tmp_path):
    """#27: the MissingDependencyError for to_tf_dataset called it 'the to_tf_dataset format'."""
    code = (
        "import sys; sys.modules['tensorflow'] = None\n"
        "import dstore\n"
        "try:\n"
        "    dstore.to_tf_dataset('x.tfrecords')\n"
        "except dstore.MissingDependencyError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    assert out.startswith("dstore.to_tf_dataset needs 'tensorflow'"), out
    assert "format" not in out
