"""A case module is imported once per process and text of its file: a process that gates
many runs (a standby worker imports the next gate's case while the previous gate runs) never
judges against a case file's earlier text."""
from __future__ import annotations

from pathlib import Path

import pytest

from gate.cases import import_case_module


def _case(path: Path, value: float) -> None:
    path.write_text(f"VALUE = {value!r}\n\n\ndef reference(x):\n    return x * VALUE\n")


def test_the_same_text_is_imported_once(tmp_path: Path) -> None:
    case = tmp_path / "case.py"
    _case(case, 2.0)
    assert import_case_module(case) is import_case_module(case)


def test_a_case_file_edited_since_its_import_is_imported_again(tmp_path: Path) -> None:
    case = tmp_path / "case.py"
    _case(case, 2.0)
    first = import_case_module(case)
    assert first.reference(3.0) == 6.0
    _case(case, 5.0)  # same path, same size, likely the same mtime second
    again = import_case_module(case)
    assert again is not first and again.reference(3.0) == 15.0
    assert first.reference(3.0) == 6.0  # the module a running gate holds is left as it was


def test_an_unreadable_case_file_is_a_one_line_error(tmp_path: Path) -> None:
    from kir.errors import BadInputError  # noqa: PLC0415

    with pytest.raises(BadInputError, match="cannot be read as a case module"):
        import_case_module(tmp_path / "missing" / "case.py")
