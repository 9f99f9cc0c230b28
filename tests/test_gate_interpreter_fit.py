"""The interpret tier refuses, as unsupported, a Triton whose interpreter needs an older NumPy
than the machine has (`gate.worker.interpreter_unfit`), instead of blaming honest kernels."""
from __future__ import annotations

import pytest

from gate.worker import interpreter_unfit


@pytest.mark.parametrize(("triton", "numpy"), [("3.6.0", "2.5.2"), ("3.6.0", "2.3.0"),
                                               ("3.5.1", "2.4.6"), ("3.6.0+git1234", "2.3.1")])
def test_an_old_interpreter_with_a_new_numpy_is_refused_with_the_fix(triton: str, numpy: str) -> None:
    why = interpreter_unfit(triton, numpy)
    assert why is not None
    assert numpy in why and "numpy<2.3" in why and "device tier" in why


@pytest.mark.parametrize(("triton", "numpy"), [("3.6.0", "2.2.6"), ("3.9.0", "2.4.6"),
                                               ("3.7.0", "2.5.2"), ("4.0.0", "2.3.0"),
                                               ("", "2.5.2"), ("3.6.0", "")])
def test_a_fitting_pair_or_an_unknown_version_runs(triton: str, numpy: str) -> None:
    assert interpreter_unfit(triton, numpy) is None


def test_this_machines_interpreter_fits() -> None:
    """CI and the development machine run the interpret tier: their pair must fit."""
    import numpy
    import triton

    assert interpreter_unfit(triton.__version__, numpy.__version__) is None
