"""The gate: compile, correctness, profile, anti-cheat checks, isolation and a verdict cache.

Public API (docs/INTERFACES.md, "gate"): `Tier`, `FailureKind`, `Verdict`, `Facts`,
`CompileFacts`, `Correctness`, `Timing`, `Case`, `load_case`, `list_cases`, `check`,
`check_file`, `check_many`, `CheckRequest`, `gpu_available`, `resolve_tier`, `prestart` (a
run's first worker started ahead of its first gate; later gates' workers start while the gate
before them runs), `prebuild` (a CUDA host's `load_inline` extension built ahead of its gate). Importing `gate` imports neither torch nor
triton: candidates run in worker processes, and the parent compares with numpy.
"""
from __future__ import annotations

from gate.cases import Case, case_beside, list_cases, load_case
from gate.check import CheckRequest, check, check_file, gpu_available, prebuild, resolve_tier
from gate.executor import check_many
from gate.runner import prestart
from gate.verdict import (CompileFacts, Correctness, Facts, FailureKind, SeedResult, Tier, Timing,
                          VariantTiming, Verdict)

__all__ = [
    "Case", "CheckRequest", "CompileFacts", "Correctness", "Facts", "FailureKind", "SeedResult",
    "Tier", "Timing", "VariantTiming", "Verdict", "check", "check_file", "check_many",
    "case_beside", "gpu_available", "list_cases", "load_case", "prebuild", "prestart", "resolve_tier",
]
