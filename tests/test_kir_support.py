"""Shared helpers for the kir / anchors / diff tests (no tests of its own).

Imported as `test_kir_support` (pytest puts tests/ on sys.path).
"""
from __future__ import annotations

import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "tests" / "data" / "kernels"
EXAMPLES = ROOT / "experts" / "examples"
SITE = Path(sysconfig.get_paths()["purelib"])

CORPUS = sorted(KERNELS.glob("*")) + sorted(EXAMPLES.glob("*.py"))
TRITON_CORPUS = [p for p in CORPUS if p.suffix == ".py"]
CUDA_CORPUS = [p for p in CORPUS if p.suffix in (".cu", ".cuh")]


def real_triton_files(limit: int = 40) -> list[Path]:
    """Triton modules installed in the venv: Triton's own language and inductor templates."""
    found: list[Path] = []
    for rel in ("torch/_inductor/kernel", "triton/language", "triton/ops", "triton/tools"):
        d = SITE / rel
        if d.is_dir():
            found += sorted(p for p in d.rglob("*.py") if p.stat().st_size > 200)
    return found[:limit]


def real_cuda_headers(per_dir: int = 25) -> list[Path]:
    """CUDA/C++ headers installed from PyPI (ATen .cuh, nvidia-* include dirs), at most
    `per_dir` from each folder, `.cuh` (device code) first."""
    found: list[Path] = []
    for rel in ("torch/include/ATen/native/cuda", "torch/include/ATen/cuda",
                "torch/include/c10/cuda", "nvidia/cuda_nvrtc/include", "nvidia/cu13/include"):
        d = SITE / rel
        if d.is_dir():
            files = sorted((p for p in d.rglob("*") if p.suffix in (".cuh", ".h", ".hpp")
                            and p.stat().st_size > 200), key=lambda p: (p.suffix != ".cuh", p))
            found += files[:per_dir]
    return found
