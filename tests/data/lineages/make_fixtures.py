"""Writes the hand-built lineage fixtures of this folder (run from the repo root:
`.venv/bin/python tests/data/lineages/make_fixtures.py`). The JSON files are committed; this
script documents how they were made and keeps them consistent with docs/INTERFACES.md.

gemm.json   — case gemm, device tier (timed): naive -> tensor-core-dot -> software-pipelining
              -> autotune (expert), with rejected attempts (risk) and static facts. Its
              kernels are runnable `gemm` kernels (each passes the interpret-tier gate); the
              timings and facts are made up for the tests.
conv2d.json — case conv2d, interpret tier (untimed): naive -> tensor-core-dot ->
              software-pipelining (expert); its tensor-core-dot acts at the same locus
              signature after the same prior actions as gemm's, so lifting both into one
              library merges that card. (A stand-in kernel: its `run` does not follow the
              conv2d case's signature, so it is not gated as conv2d.)
"""
from __future__ import annotations

from pathlib import Path

import anchors
import kir
from lineage.graph import KernelState, Lineage, Transition
from lineage.retrieval import kernel_features

HERE = Path(__file__).resolve().parent

GEMM_NAIVE = '''import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = acc + tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def run(a, b):
    import torch
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    matmul_kernel[(M // 32, N // 32)](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c
'''
GEMM_DOT = GEMM_NAIVE.replace(
    "acc = acc + tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)",
    "acc = tl.dot(a, b, acc)")
GEMM_PIPE = GEMM_DOT.replace("for k in range(0, K, BLOCK_K):",
                             "for k in tl.range(0, K, BLOCK_K, num_stages=3):")
GEMM_EXPERT = GEMM_PIPE.replace(
    "@triton.jit\n",
    "@triton.autotune(configs=[triton.Config({'BLOCK_M': 32, 'BLOCK_N': 32, 'BLOCK_K': 32}, "
    "num_warps=4, num_stages=3), triton.Config({'BLOCK_M': 32, 'BLOCK_N': 32, 'BLOCK_K': 32}, "
    "num_warps=8, num_stages=3)], key=['M', 'N', 'K'])\n@triton.jit\n").replace(
    "matmul_kernel[(M // 32, N // 32)](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)",
    "matmul_kernel[lambda meta: (M // meta['BLOCK_M'], N // meta['BLOCK_N'])](a, b, c, M, N, K)")

CONV_NAIVE = '''import triton
import triton.language as tl


@triton.jit
def conv_kernel(x_ptr, w_ptr, y_ptr, P, C, KRS, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
                BLOCK_R: tl.constexpr):
    pid = tl.program_id(0)
    rp = pid * BLOCK_P + tl.arange(0, BLOCK_P)
    rc = tl.arange(0, BLOCK_C)
    rr = tl.arange(0, BLOCK_R)
    acc = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)
    for r in range(0, KRS, BLOCK_R):
        x = tl.load(x_ptr + rp[:, None] * KRS + (r + rr)[None, :])
        w = tl.load(w_ptr + (r + rr)[:, None] * C + rc[None, :])
        acc = acc + tl.sum(x.to(tl.float32)[:, :, None] * w.to(tl.float32)[None, :, :], axis=1)
    tl.store(y_ptr + rp[:, None] * C + rc[None, :], acc.to(tl.float16))


def run(x, w):
    import torch
    P, KRS = x.shape
    C = w.shape[1]
    y = torch.empty((P, C), device=x.device, dtype=x.dtype)
    conv_kernel[(P // 32,)](x, w, y, P, C, KRS, BLOCK_P=32, BLOCK_C=32, BLOCK_R=32)
    return y
'''
CONV_DOT = CONV_NAIVE.replace(
    "acc = acc + tl.sum(x.to(tl.float32)[:, :, None] * w.to(tl.float32)[None, :, :], axis=1)",
    "acc = tl.dot(x, w, acc)")
CONV_EXPERT = CONV_DOT.replace("for r in range(0, KRS, BLOCK_R):",
                               "for r in tl.range(0, KRS, BLOCK_R, num_stages=2):")


def _anchor(source: str, query: str) -> str:
    index = anchors.build_index(kir.parse(source, language="triton"))
    (match,) = index.query(query)
    return str(match.anchor.id)


def _features(source: str) -> list[dict[str, str]]:
    """What the registered passes find present in `source` (as `klineage induce` records)."""
    return [dict(f) for f in kernel_features(kir.parse(source, language="triton"))]


def _facts(registers: int, shared: int, mma: int) -> dict:
    """Static facts in the shape of `gate.Facts.to_json()`."""
    return {"target": "sm_90a", "max_registers": registers, "max_shared_bytes": shared,
            "spills": False, "instruction_classes": ["mma"] if mma else [],
            "compiles": [{"kernel": "matmul_kernel", "config": {}, "registers": registers,
                          "shared_bytes": shared, "local_bytes": 0, "spill_stores": 0,
                          "spill_loads": 0, "instructions": {"mma": mma, "ld.global": 4},
                          "sass": None, "compile_s": 0.5}]}


def _state(lin: Lineage, source: str, case: str, tier: str, ms: float | None, facts: dict,
           roles: frozenset[str]) -> str:
    ir = kir.parse(source, language="triton")
    verdict = {"ok": True, "tier": tier, "stage": "done", "failure_kind": None, "reason": "",
               "facts": facts, "correctness": {"max_rel_err": 1e-4}, "timing": None}
    timing = None
    if ms is not None:
        timing = {"candidate_ms": ms, "reference_ms": 1.0, "speedup": 1.0 / ms}
        verdict["timing"] = timing
    return lin.add_state(KernelState(
        source=source, language="triton", case=case, tier=tier,
        anchors=tuple(str(a.id) for a in anchors.build_index(ir).anchors),
        features=tuple(_features(source)), verdict=verdict, timing=timing, roles=roles))


def _step(lin: Lineage, src: str, dst: str, pass_name: str, category: str, anchor: str,
          case: str, tier: str, expert: str, step: int, options: dict | None = None,
          preconditions: tuple = ()) -> None:
    s_ms = (lin.node(src).get("timing") or {}).get("candidate_ms")
    d_ms = (lin.node(dst).get("timing") or {}).get("candidate_ms")
    delta = {"src_ms": s_ms, "dst_ms": d_ms, "ratio": s_ms / d_ms} if s_ms and d_ms else None
    lin.add_transition(Transition(
        src=src, dst=dst, pass_name=pass_name, category=category, anchor=anchor,
        options=options or {}, diff=({"action": "update", "anchor": anchor, "kind": "call"},),
        preconditions=preconditions, src_verdict={"ok": True, "tier": tier, "ms": s_ms},
        dst_verdict={"ok": True, "tier": tier, "ms": d_ms}, profile_delta=delta,
        backward={"pass": pass_name, "anchor": anchor, "options": options or {}},
        rederived_by="deterministic", case=case, language="triton", platform="cuda",
        expert=expert, step=step))


def gemm() -> Lineage:
    lin = Lineage()
    expert = "experts/gemm/gemm_triton.py"
    s0 = _state(lin, GEMM_NAIVE, "gemm", "device", 40.0, _facts(64, 0, 0),
                frozenset({"naive", "root"}))
    s1 = _state(lin, GEMM_DOT, "gemm", "device", 5.0, _facts(96, 16384, 8),
                frozenset())
    s2 = _state(lin, GEMM_PIPE, "gemm", "device", 4.0, _facts(104, 49152, 8),
                frozenset())
    s3 = _state(lin, GEMM_EXPERT, "gemm", "device", 3.6, _facts(128, 98304, 16),
                frozenset({"expert"}))
    pre = ({"expr": "dtype in {fp16, bf16}", "value": True, "facts": {"dtype": "fp16"}},
           {"expr": "BLOCK_K >= 16", "value": True, "facts": {"BLOCK_K": 32}})
    _step(lin, s0, s1, "tensor-core-dot", "compute & layout",
          _anchor(GEMM_NAIVE, 'loop >> assign[name="acc"]'), "gemm", "device", expert, 3,
          preconditions=pre)
    _step(lin, s1, s2, "software-pipelining", "staging & movement",
          _anchor(GEMM_DOT, "kernel > loop"), "gemm", "device", expert, 2, {"stages": 3})
    _step(lin, s2, s3, "autotune", "expression-level",
          _anchor(GEMM_PIPE, 'kernel[name="matmul_kernel"]'), "gemm", "device", expert, 1,
          {"pinned": "slice"})
    lin.record_rejection(s3, "tensor-core-dot", _anchor(GEMM_EXPERT, 'loop >> call[name="tl.dot"]'),
                         "correctness", "mismatch", "fp16 accumulate exceeds tolerance",
                         case="gemm", tier="device")
    lin.record_rejection(s2, "software-pipelining", _anchor(GEMM_PIPE, "kernel > loop"),
                         "compile", "resources", "shared memory 229376 B exceeds 232448 B limit",
                         case="gemm", tier="device")
    lin.add_run({"expert": expert, "case": "gemm", "tier": "device", "termination": "naive",
                 "steps": 3, "width": 1})
    return lin


def conv2d() -> Lineage:
    lin = Lineage()
    expert = "experts/conv2d/conv2d_triton.py"
    s0 = _state(lin, CONV_NAIVE, "conv2d", "interpret", None, {}, frozenset({"naive", "root"}))
    s1 = _state(lin, CONV_DOT, "conv2d", "interpret", None, {}, frozenset())
    s2 = _state(lin, CONV_EXPERT, "conv2d", "interpret", None, {}, frozenset({"expert"}))
    _step(lin, s0, s1, "tensor-core-dot", "compute & layout",
          _anchor(CONV_NAIVE, 'loop >> assign[name="acc"]'), "conv2d", "interpret", expert, 2,
          preconditions=({"expr": "dtype in {fp16, bf16}", "value": None, "facts": {}},))
    _step(lin, s1, s2, "software-pipelining", "staging & movement",
          _anchor(CONV_DOT, "kernel > loop"), "conv2d", "interpret", expert, 1, {"stages": 2})
    lin.add_run({"expert": expert, "case": "conv2d", "tier": "interpret",
                 "termination": "naive", "steps": 2, "width": 1})
    return lin


if __name__ == "__main__":
    gemm().save(HERE / "gemm.json")
    conv2d().save(HERE / "conv2d.json")
    print("wrote", HERE / "gemm.json", HERE / "conv2d.json")
