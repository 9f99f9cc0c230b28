"""Compiling CUDA C++ for sm_90a with NVRTC inside a test (skipped where NVRTC is missing)."""
from __future__ import annotations

import pytest


def ptx_for_sm90a(text: str) -> str:
    """The PTX NVRTC makes of `text` for sm_90a; a compile error fails the test with NVRTC's
    log, a missing NVRTC skips it."""
    return _compiled(text).ptx


def spills_for_sm90a(text: str) -> dict[str, int]:
    """What ptxas reported for the one kernel of `text` compiled for sm_90a (`registers`,
    `stack_bytes`, `spill_stores`, `spill_loads`); skips where NVRTC gave no report (PTX only)."""
    used = next(iter(_compiled(text).resources().values()), None)
    if used is None:
        pytest.skip("no ptxas report (PTX only)")
    return used


def _compiled(text: str):  # noqa: ANN202
    cudahost = pytest.importorskip("experts.cudahost")
    try:
        return cudahost.compile_source(text, name="candidate.cu", arch="sm_90a")
    except cudahost.CompileError as exc:  # pragma: no cover - the failure message is the point
        pytest.fail(f"NVRTC: {exc}\n{exc.log[:3000]}")
    except (ImportError, OSError) as exc:
        pytest.skip(f"NVRTC is not available: {exc}")
