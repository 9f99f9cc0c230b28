"""Compiling CUDA C++ for sm_90a with NVRTC inside a test (skipped where NVRTC is missing)."""
from __future__ import annotations

import pytest


def ptx_for_sm90a(text: str) -> str:
    """The PTX NVRTC makes of `text` for sm_90a; a compile error fails the test with NVRTC's
    log, a missing NVRTC skips it."""
    cudahost = pytest.importorskip("experts.cudahost")
    try:
        return cudahost.compile_source(text, name="candidate.cu", arch="sm_90a").ptx
    except cudahost.CompileError as exc:  # pragma: no cover - the failure message is the point
        pytest.fail(f"NVRTC: {exc}\n{exc.log[:3000]}")
    except (ImportError, OSError) as exc:
        pytest.skip(f"NVRTC is not available: {exc}")
