"""The library speaks its keywords, the command line its flags (dstore/cli/words.py)."""

from __future__ import annotations

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.cli.words import FLAGS, cli_words


@pytest.mark.parametrize(("library", "flag"), sorted(FLAGS.items()))
def test_every_keyword_becomes_its_flag(library: str, flag: str) -> None:
    assert cli_words(f"x: {library} y") == f"x: {flag} y"


def test_drop_is_translated_only_where_it_says_how_to_leave_fields_out() -> None:
    assert cli_words("a.npz: leave them out with drop='meta' drop='ids'") == (
        "a.npz: leave them out with --drop meta --drop ids"
    )
    # an option's own value named in an error stays as the user wrote it
    assert cli_words("drop='train/nope': no such field") == "drop='train/nope': no such field"


def test_an_existing_output_says_overwrite_to_each(tmp_path, capsys) -> None:
    """The same refusal: ``overwrite=True`` to a library caller, ``--overwrite`` on the
    command line; neither side sees the other's words."""
    src, dst = tmp_path / "a.npz", tmp_path / "b.npz"
    np.savez(src, x_train=np.arange(6, dtype=np.int32))
    dst.write_bytes(b"not mine")
    with pytest.raises(dstore.OutputExistsError) as err:
        dstore.convert(src, dst)
    assert "overwrite=True" in str(err.value) and "--overwrite" not in str(err.value)
    assert main(["convert", str(src), str(dst)]) == 2
    line = capsys.readouterr().err.strip()
    assert "--overwrite" in line and "overwrite=True" not in line
    assert len(line.splitlines()) == 1


def test_a_library_caller_is_told_resume_true_not_the_flag(tmp_path) -> None:
    src = tmp_path / "a.npz"
    np.savez(src, x_train=np.arange(6, dtype=np.int32))
    with pytest.raises(dstore.DstoreError) as err:
        dstore.convert(src, tmp_path / "b.npz", resume=True)
    assert "resume=True" in str(err.value) and "--resume" not in str(err.value)


def test_a_source_appended_twice_is_refused_with_the_flag_on_the_command_line(
    tmp_path, capsys
) -> None:
    """``append_again=True`` to a library caller, ``--append-again`` to the command line."""
    src, dst = tmp_path / "a.npz", tmp_path / "d.tfrecords"
    np.savez(src, x_train=np.arange(6, dtype=np.int32))
    dstore.convert(src, dst)
    more = tmp_path / "more.npz"
    np.savez(more, x_train=np.arange(6, 12, dtype=np.int32))
    dstore.convert(more, dst, append=True)
    with pytest.raises(dstore.AppendError) as err:
        dstore.convert(more, dst, append=True)
    assert "append_again=True" in str(err.value) and "--append-again" not in str(err.value)
    assert main(["convert", str(more), str(dst), "--append"]) == 2
    line = capsys.readouterr().err.strip()
    assert "use --append-again" in line and "append_again=True" not in line, line
    assert "version 2" in line and len(line.splitlines()) == 1
