"""What Triton reaches on the KernelBench fp32 (TF32) GEMM shapes on Hopper, beside cuBLAS with
TF32 allowed, and what a Mish epilogue costs written three ways.

    python3 bench/tf32_ceiling.py OUT_DIR [--only nt8192,nn4096,bmm128] [--jobs 14] [--wall 225] [--dry] [--json]

Shapes (fp32 inputs; `tl.dot` on fp32 runs in TF32):

| op | product | B as stored |
|---|---|---|
| `nt8192` | x (1024, 8192) @ W^T, W (8192, 8192) + bias (the GEMM shared by the level-2 linear problems) | (N, K): K-major |
| `nn4096` | A @ B, 4096^3 (level-1 square product) | (K, N): N-major |
| `bmm128` | 128 products (512, 1024) @ (1024, 2048) (level-1 batched product) | (Z, K, N): N-major |

Every row is one hand-written kernel at one configuration, named
`<family> <b-form> <BM>x<BN>x<BK> w<warps> s<stages> [g1] [<epilogue>] [split2]` (g1: tiles in row-major order, not grouped):

| part | values |
|---|---|
| family | `ptr`: pointer loads, one output tile per program, grouped order (GROUP_M 8); `tma`: host tensor descriptors, a persistent grid (one program per SM) walking the tiles in grouped order, its tile loop flattened into the K loop; `tma-nested`: the same, the loops nested; `tma-grid`: the nested kernel with one program per tile |
| b-form | `kn`: B as stored (K, N), read as [BK, BN] tiles; `kn-trans`: B as stored, read as [BN, BK] tiles and `tl.trans`-ed before the dot; `kn-reg`: as `kn`, the tile rounded to TF32 in registers (`cvt.rna.tf32.f32`) before the dot; `kn-regi`: the same rounding on the bits (integer ops); `nk`: a (N, K) B (the weight as stored) read as [BN, BK] tiles, transposed before the dot; `nk-plain`: that B read as [BK, BN] tiles through its strides; `kcopy`: a K-major copy of B made inside the call (its copy kernel counts), then as `nk`; `kcopy-pre`: the same kernel on a copy made once outside the timed call |
| epilogue (nt8192) | none: the product alone; `bias`: + bias; `mish2-start`: mish twice through the level-2 start kernel's own `_mish` (`tl.log(1 + tl.exp)`, `tl.exp`); `mish2-libdevice`: libdevice `tanh(log1p(exp(v)))`; `mish2-exp2log2`: softplus and tanh through `tl.exp2` / `tl.log2`; `mish2-rational`: tanh(softplus(v)) = n / (n + 2), n = e^v (e^v + 2), one `tl.exp2` and one division; `mish2-approx`: the exp2/log2 form with the logarithm as the PTX `lg2.approx.f32` (`tl.log2` compiles to a libdevice routine); ` split2` after it: the epilogue and store run on the two [BM, BN/2] halves of the tile one after the other |

For the N-major shapes also the KernelBench start kernel as the search runs it, under the
generic autotune list (`lineage.control.autotune_control`): `start: control` as written,
`start: k-major-operands` and `start: tf32-round-operands` after that rule (each applied
wherever it takes the kernel), the autotuner's pick in `config`.

Beside them: `torch` (cuBLAS, TF32 allowed: the eager-TF32 bar), `torch-fp32`, `torch-linear`
(`F.linear` with bias) and `torch-mish2` (the level-2 model `mish(mish(linear(x)))`, eager,
TF32) for nt8192, `torch-kcopy` (the K-major copy of B alone) for the N-major shapes.

Timing as `bench/gemm_ceiling.py`: `triton.testing.do_bench` median of the whole call
(`e2e_us`, L2 flushed) and the GPU time of the call's kernels under `torch.profiler` with the
L2 flushed before each call (`kernel_us`). Every row carries its error against the fp32
product (TF32 off) and `ok` (relative Frobenius error under 5e-3); epilogue rows carry
`epilogue_us` (kernel time over the same configuration without epilogue) and `x_model_e2e`
(the `torch-mish2` call's time over the row's).

The device run goes in two phases: each variant compiled and run once in a child process of its
own (`--jobs` at once; a compile that fails or crashes is a row saying so), then each shape
timed in one child, in the order nt8192, nn4096, bmm128. Writes OUT_DIR/rows.jsonl,
OUT_DIR/records/<op>.json (store records: `bench/store.py ingest` reads them as the `case`
kind), OUT_DIR/tf32.md (the rows and a summary: the best kernel of each family and b-form per
shape against cuBLAS, and the epilogue costs); prints the summary (`--json`: the rows).
`--dry` (any machine, no GPU): the start variants' sources (OUT_DIR/src) and the rules each
took or refused, the configurations' shared memory, and every hand kernel code path (each
family, b-form and epilogue but those through libdevice or inline PTX, which the interpreter
lacks) run under the Triton interpreter on small shapes against torch. Needs triton 3.6 - 3.9.
Bad arguments or no GPU outside `--dry`: exit 2.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# gemm_ceiling turns the interpreter on for --dry before triton is first imported
from gemm_ceiling import (  # noqa: E402
    SMEM_LIMIT, TensorDescriptor, _programs, _slug, errors, kernel_us, load_source, probe_start,
    run_phases)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

try:
    from triton.language.extra import libdevice
except ImportError:  # pragma: no cover - older triton
    libdevice = None

# (batch, M, N, K, how B is stored)
SHAPES: dict[str, dict[str, Any]] = {
    "nt8192": {"BATCH": 1, "M": 1024, "N": 8192, "K": 8192, "b": "nk"},
    "nn4096": {"BATCH": 1, "M": 4096, "N": 4096, "K": 4096, "b": "kn"},
    "bmm128": {"BATCH": 128, "M": 512, "N": 2048, "K": 1024, "b": "kn"},
}
# The N-major shapes' start kernels, run as the search runs them: under the generic autotune
# list (`lineage.control.autotune_control`), as written and after each layout rule.
STARTS = {"nn4096": "kernelbench/level1/1_Square_matrix_multiplication_.py",
          "bmm128": "kernelbench/level1/3_Batched_matrix_multiplication.py"}
EPILOGUES = ("none", "bias", "mish2-start", "mish2-libdevice", "mish2-exp2log2", "mish2-rational",
             "mish2-approx")
LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@dataclass(frozen=True, slots=True)
class Variant:
    """One kernel at one configuration (see the module docstring for the parts)."""
    family: str
    bform: str
    bm: int
    bn: int
    bk: int
    warps: int
    stages: int
    epi: str = "none"
    group: int = 8
    split: int = 1

    @property
    def name(self) -> str:
        tail = ("" if self.group == 8 else f" g{self.group}") + ("" if self.epi == "none" else f" {self.epi}") \
            + ("" if self.split == 1 else f" split{self.split}")
        return f"{self.family} {self.bform} {self.bm}x{self.bn}x{self.bk} w{self.warps} s{self.stages}{tail}"

    @property
    def smem_bytes(self) -> int:
        """The operand ring of fp32 tiles, and where the tile loop is flattened the fp32 output
        tile staged beside it (sm_90 compiles of this kernel show it there, not sharing the
        ring's space as it does in the nested loop)."""
        ring = self.stages * (self.bm + self.bn) * self.bk * 4
        return ring + (self.bm * self.bn * 4 if self.family == "tma" else 0)


def _grid(family: str, bform: str, cfgs: tuple, epi: str = "none", group: int = 8) -> list[Variant]:
    return [Variant(family, bform, *c, epi=epi, group=group) for c in cfgs]


# The configurations: 128x256 / 256x128 tiles at 8 warps, BK 32 beside 64, 2-5 stages (the
# fp32 ring of a 128x256x64 tile is 96 KB a stage, so 2 fit; 128x256x32, 4; 128x128x32, 7).
# GROUP_M 8 but where a row says g1 (tiles in row-major order).
_WIDE = ((128, 256, 32, 8, 3), (256, 128, 32, 8, 3))
_PTR_FULL = ((128, 128, 32, 4, 4), (128, 128, 32, 8, 4), (128, 128, 64, 8, 3), (128, 256, 32, 8, 3),
             (128, 256, 32, 8, 4), (256, 128, 32, 8, 3), (256, 128, 32, 8, 4), (128, 256, 64, 8, 2),
             (64, 256, 32, 4, 4), (128, 128, 32, 8, 5), (64, 256, 32, 4, 5))
_TMA_FLAT = ((128, 128, 32, 8, 4), (128, 128, 32, 8, 5), (64, 256, 32, 4, 4))
_TMA_NESTED = ((128, 128, 64, 8, 3), (128, 256, 32, 8, 3), (128, 256, 32, 8, 4), (256, 128, 32, 8, 4),
               (128, 256, 64, 8, 2))
_EPI_AT = (("ptr", (128, 128, 32, 4, 4)), ("ptr", (128, 256, 32, 8, 3)), ("tma-nested", (128, 256, 32, 8, 4)))


def variants(op: str) -> list[Variant]:
    """Every kernel row of one shape."""
    out: list[Variant] = []
    if op == "nt8192":
        out += _grid("ptr", "nk", _PTR_FULL)
        out += _grid("ptr", "nk-plain", ((128, 128, 32, 4, 4), *_WIDE))
        out += _grid("ptr", "nk", _WIDE[:1], group=1)
        out += _grid("tma", "nk", _TMA_FLAT)
        out += _grid("tma-nested", "nk", _TMA_NESTED)
        out += _grid("tma-grid", "nk", ((128, 256, 32, 8, 4), (256, 128, 32, 8, 4)))
        for family, cfg in _EPI_AT:
            for epi in EPILOGUES[1:]:
                out.append(Variant(family, "nk", *cfg, epi=epi))
        for family, cfg in _EPI_AT[1:]:  # the 128x256 tiles: the epilogue in two halves
            for epi in ("bias", "mish2-start", "mish2-rational"):
                out.append(Variant(family, "nk", *cfg, epi=epi, split=2))
    elif op == "nn4096":
        out += _grid("ptr", "kn", ((128, 128, 32, 4, 4), (128, 128, 32, 8, 4), (128, 128, 64, 8, 3),
                                   *_WIDE, (128, 256, 64, 8, 2)))
        out += _grid("ptr", "kn-trans", ((128, 128, 32, 8, 4), *_WIDE))
        out += _grid("ptr", "kn-reg", ((128, 128, 32, 8, 4), *_WIDE, (128, 256, 32, 8, 4), (128, 128, 64, 8, 3)))
        out += _grid("ptr", "kn-regi", _WIDE[:1])
        out += _grid("tma-nested", "kn-reg", ((128, 256, 32, 8, 4), (256, 128, 32, 8, 4)))
        out += _grid("tma", "kn-reg", ((128, 128, 32, 8, 4),))
        out += _grid("ptr", "kcopy-pre", _WIDE[:1], group=1)
        for bform in ("kcopy", "kcopy-pre"):
            out += _grid("ptr", bform, ((128, 128, 32, 8, 4), *_WIDE))
            out += _grid("tma-nested", bform, ((128, 256, 32, 8, 4), (256, 128, 32, 8, 4)))
            out += _grid("tma", bform, ((128, 128, 32, 8, 4),))
        out += _grid("tma-nested", "kn", _WIDE)
    elif op == "bmm128":
        out += _grid("ptr", "kn", ((128, 128, 32, 8, 4), *_WIDE))
        out += _grid("ptr", "kn-trans", _WIDE)
        out += _grid("ptr", "kn-reg", ((128, 128, 32, 8, 4), *_WIDE))
        out += _grid("ptr", "kn-regi", _WIDE[:1])
        out += _grid("tma-nested", "kn-reg", ((128, 256, 32, 8, 4),))
        for bform in ("kcopy", "kcopy-pre"):
            out += _grid("ptr", bform, ((128, 256, 32, 8, 3),))
            out += _grid("tma-nested", bform, ((128, 256, 32, 8, 4),))
        out += _grid("tma-nested", "kn", ((128, 256, 32, 8, 3),))
    else:
        raise KeyError(op)
    return out


# -- the kernels --------------------------------------------------------------------------------
# mish as the level-2 start kernel writes it (`tl.log(1 + tl.exp(v))`, `tl.exp`), taken from it
_mish_start = load_source(Path(__file__).resolve().parent / "kernelbench" / "level2" / "29_Matmul_Mish_Mish.py")._mish


@triton.jit
def _mish_libdevice(v):
    sp = tl.where(v > 20.0, v, libdevice.log1p(libdevice.exp(tl.minimum(v, 20.0))))
    return v * libdevice.tanh(sp)


@triton.jit
def _mish_exp2log2(v):
    sp = tl.where(v > 20.0, v, tl.log2(1.0 + tl.exp2(tl.minimum(v, 20.0) * LOG2E)) * LN2)
    e = tl.exp2(sp * (-2.0 * LOG2E))
    return v * (1.0 - e) / (1.0 + e)


@triton.jit
def _lg2_approx(x):
    return tl.inline_asm_elementwise("lg2.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32,
                                     is_pure=True, pack=1)


@triton.jit
def _mish_approx(v):
    sp = tl.where(v > 20.0, v, _lg2_approx(1.0 + tl.exp2(tl.minimum(v, 20.0) * LOG2E)) * LN2)
    e = tl.exp2(sp * (-2.0 * LOG2E))
    return v * (1.0 - e) / (1.0 + e)


@triton.jit
def _mish_rational(v):
    # tanh(log(1 + t)) = ((1 + t)^2 - 1) / ((1 + t)^2 + 1) = n / (n + 2), n = t (t + 2), t = e^v
    t = tl.exp2(tl.minimum(v, 20.0) * LOG2E)
    n = t * (t + 2.0)
    return tl.where(v > 20.0, v, v * n / (n + 2.0))


@triton.jit
def _epilogue(acc, bias, rn, EPI: tl.constexpr):
    """EPI: index into EPILOGUES."""
    v = acc
    if EPI >= 1:
        v = v + tl.load(bias + rn)[None, :]
    if EPI == 2:
        v = _mish_start(_mish_start(v))
    if EPI == 3:
        v = _mish_libdevice(_mish_libdevice(v))
    if EPI == 4:
        v = _mish_exp2log2(_mish_exp2log2(v))
    if EPI == 5:
        v = _mish_rational(_mish_rational(v))
    if EPI == 6:
        v = _mish_approx(_mish_approx(v))
    return v


@triton.jit
def _finish(acc, c_rows, rn0, scn, bias, BN: tl.constexpr, EPI: tl.constexpr, SPLIT: tl.constexpr):
    """Store epilogue(acc) at c_rows ([BM, 1] row pointers) + columns rn0 + [0, BN): the whole
    tile at once, or when SPLIT is 2 as two [BM, BN / 2] halves, one after the other (fewer
    values live at once in the epilogue)."""
    if SPLIT == 2:
        lo, hi = tl.split(tl.permute(tl.reshape(acc, (acc.shape[0], 2, BN // 2)), (0, 2, 1)))
        rn = rn0 + tl.arange(0, BN // 2)
        tl.store(c_rows + rn[None, :] * scn, _epilogue(lo, bias, rn, EPI))
        rn = rn + BN // 2
        tl.store(c_rows + rn[None, :] * scn, _epilogue(hi, bias, rn, EPI))
    else:
        rn = rn0 + tl.arange(0, BN)
        tl.store(c_rows + rn[None, :] * scn, _epilogue(acc, bias, rn, EPI))


@triton.jit
def _tf32(x, ROUND: tl.constexpr):
    """x rounded to TF32 (nearest, ties away from zero) in registers: ROUND 1 through the PTX
    conversion, 2 on the bits (the same values; the interpreter runs only this one); 0: x."""
    if ROUND == 1:
        x = tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                      is_pure=True, pack=1)
    if ROUND == 2:
        x = ((x.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return x


@triton.jit
def _grouped(r, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    in_group = GROUP_M * tiles_n
    first_m = (r // in_group) * GROUP_M
    size_m = min(tiles_m - first_m, GROUP_M)
    return first_m + (r % in_group) % size_m, (r % in_group) // size_m


@triton.jit
def ptr_kernel(a, b, c, bias, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
               B_TRANS: tl.constexpr, B_ROUND: tl.constexpr, EPI: tl.constexpr,
               SPLIT: tl.constexpr):
    """C[z] = epilogue(A[z] @ B[z]), one output tile per program (axis 1: z); B's tile read as
    [BN, BK] and transposed when B_TRANS, else as [BK, BN], rounded to TF32 in registers as
    B_ROUND says (`_tf32`). M, N, K are tile multiples."""
    pm, pn = _grouped(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
    z = tl.program_id(1).to(tl.int64)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_p = a + z * sab + rm[:, None] * sam + rk[None, :] * sak
    if B_TRANS:
        b_p = b + z * sbb + rn[:, None] * sbn + rk[None, :] * sbk
    else:
        b_p = b + z * sbb + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        if B_TRANS:
            acc = tl.dot(tl.load(a_p), tl.trans(_tf32(tl.load(b_p), B_ROUND)), acc)
        else:
            acc = tl.dot(tl.load(a_p), _tf32(tl.load(b_p), B_ROUND), acc)
        a_p += BK * sak
        b_p += BK * sbk
    _finish(acc, c + z * scb + rm[:, None] * scm, pn * BN, scn, bias, BN, EPI, SPLIT)


@triton.jit
def _tma_tile(a_d, b_d, c, bias, t, M, N, K, scm, tiles_m, tiles_n, BM: tl.constexpr,
              BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, B_NK: tl.constexpr,
              B_ROUND: tl.constexpr, EPI: tl.constexpr, SPLIT: tl.constexpr):
    per_batch = tiles_m * tiles_n
    z = t // per_batch
    pm, pn = _grouped(t % per_batch, tiles_m, tiles_n, GROUP_M)
    om = pm * BM
    on = pn * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kk in range(0, K, BK):
        x = a_d.load([z * M + om, kk])
        if B_NK:
            acc = tl.dot(x, tl.trans(_tf32(b_d.load([z * N + on, kk]), B_ROUND)), acc)
        else:
            acc = tl.dot(x, _tf32(b_d.load([z * K + kk, on]), B_ROUND), acc)
    rows = z.to(tl.int64) * M + om + tl.arange(0, BM)
    _finish(acc, c + rows[:, None] * scm, on, 1, bias, BN, EPI, SPLIT)


@triton.jit
def tma_kernel(a_d, b_d, c, bias, BATCH, M, N, K, scm, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr, GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr,
               B_NK: tl.constexpr, B_ROUND: tl.constexpr, EPI: tl.constexpr, SPLIT: tl.constexpr,
               FLATTEN: tl.constexpr):
    """C = epilogue(A @ B) over batches stacked as rows: PROGRAMS programs walk the output tiles
    in grouped order, operands through 2-D descriptors (A (Z*M, K); B (Z*K, N), or (Z*N, K)
    when B_NK, its tile transposed before the dot), the tile loop flattened into the K loop
    when FLATTEN (the next tile's loads overlap this one's epilogue). M, N, K are tile multiples."""
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    for t in tl.range(tl.program_id(0), tiles_m * tiles_n * BATCH, PROGRAMS, flatten=FLATTEN):
        _tma_tile(a_d, b_d, c, bias, t, M, N, K, scm, tiles_m, tiles_n, BM, BN, BK, GROUP_M,
                  B_NK, B_ROUND, EPI, SPLIT)


def k_major(b: Any) -> Any:
    """A (.., N, K) contiguous copy of a (.., K, N) B."""
    return b.transpose(-1, -2).contiguous()


def hand_run(v: Variant) -> Any:
    """`run(a, b, bias)` of one variant: a (M, K) or (Z, M, K); b as the shape stores it, or its
    K-major copy for `kcopy-pre`; returns C (epilogue applied)."""
    epi = EPILOGUES.index(v.epi)
    nk_tile = v.bform in ("nk", "kn-trans", "kcopy", "kcopy-pre")
    b_round = {"kn-reg": 1, "kn-regi": 2}.get(v.bform, 0)

    def run(a: Any, b: Any, bias: Any) -> Any:
        a3 = a if a.dim() == 3 else a[None]
        batch, m, k = a3.shape
        if v.bform == "kcopy":
            b = k_major(b)
        b_nk = v.bform in ("nk", "nk-plain", "kcopy", "kcopy-pre")  # b is (.., N, K)
        n = b.shape[-2] if b_nk else b.shape[-1]
        if m % v.bm or n % v.bn or k % v.bk:
            raise ValueError(f"{v.name}: ({m}, {n}, {k}) is not a multiple of the tile")
        c3 = torch.empty((batch, m, n), device=a.device, dtype=torch.float32)
        bias_arg = bias if bias is not None else c3
        if v.family == "ptr":
            sbb = b.stride(0) if b.dim() == 3 else 0
            sbk, sbn = (b.stride(-1), b.stride(-2)) if b_nk else (b.stride(-2), b.stride(-1))
            grid = (triton.cdiv(m, v.bm) * triton.cdiv(n, v.bn), batch)
            ptr_kernel[grid](a3, b, c3, bias_arg, m, n, k, *a3.stride(), sbb, sbk, sbn, *c3.stride(),
                             BM=v.bm, BN=v.bn, BK=v.bk, GROUP_M=v.group, B_TRANS=nk_tile,
                             B_ROUND=b_round, EPI=epi, SPLIT=v.split, num_warps=v.warps, num_stages=v.stages)
        else:
            if TensorDescriptor is None:
                raise RuntimeError("this triton has no triton.tools.tensor_descriptor")
            if not b_nk and nk_tile:
                raise ValueError(f"{v.name}: descriptors read B's tile as stored")
            a_d = TensorDescriptor.from_tensor(a3.reshape(batch * m, k), [v.bm, v.bk])
            b2 = b.reshape(-1, b.shape[-1])
            b_d = TensorDescriptor.from_tensor(b2, [v.bn, v.bk] if b_nk else [v.bk, v.bn])
            tiles = triton.cdiv(m, v.bm) * triton.cdiv(n, v.bn) * batch
            programs = tiles if v.family == "tma-grid" else min(tiles, _programs())
            tma_kernel[(programs,)](a_d, b_d, c3, bias_arg, batch, m, n, k, c3.stride(1),
                                    BM=v.bm, BN=v.bn, BK=v.bk, GROUP_M=v.group, PROGRAMS=programs,
                                    B_NK=b_nk, B_ROUND=b_round, EPI=epi, SPLIT=v.split,
                                    FLATTEN=v.family == "tma",
                                    num_warps=v.warps, num_stages=v.stages)
        return c3 if a.dim() == 3 else c3[0]

    return run


# -- inputs, references, torch rows ------------------------------------------------------------
def make_inputs(op: str, device: str = "cuda", shape: dict | None = None, fill: bool = True) -> tuple:
    """(a, b as stored, bias or None); `fill=False`: uninitialized (compiles only)."""
    s = shape or SHAPES[op]
    lead = (s["BATCH"],) if s["BATCH"] > 1 else ()
    a_shape = (*lead, s["M"], s["K"])
    b_shape = (s["N"], s["K"]) if s["b"] == "nk" else (*lead, s["K"], s["N"])
    if not fill:
        return (torch.empty(a_shape, device=device), torch.empty(b_shape, device=device),
                torch.empty(s["N"], device=device) if s["b"] == "nk" else None)
    g = torch.Generator(device=device).manual_seed(1234)
    a = torch.randn(a_shape, generator=g, device=device)
    if s["b"] == "nk":  # a linear layer's weight and bias: uniform within 1/sqrt(K)
        bound = s["K"] ** -0.5
        b = (torch.rand(b_shape, generator=g, device=device) * 2 - 1) * bound
        bias = (torch.rand(s["N"], generator=g, device=device) * 2 - 1) * bound
        return a, b, bias
    return a, torch.randn(b_shape, generator=g, device=device), None


def _product(a: Any, b: Any, nk: bool) -> Any:
    return a @ (b.transpose(-1, -2) if nk else b)


def reference(op: str, inputs: tuple, epi: str, shape: dict | None = None) -> Any:
    """The fp32 product (TF32 off), with the bias and mish twice as `epi` says."""
    a, b, bias = inputs
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        out = _product(a, b, (shape or SHAPES[op])["b"] == "nk")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    if epi != "none":
        out = out + bias
    if epi.startswith("mish2"):
        out = torch.nn.functional.mish(torch.nn.functional.mish(out))
    return out


def torch_rows(op: str, inputs: tuple) -> dict[str, Any]:
    """Name -> the zero-argument call of each torch row of `op` (TF32 set by the caller)."""
    a, b, bias = inputs
    f = torch.nn.functional
    if SHAPES[op]["b"] == "nk":
        return {"torch": lambda: a @ b.t(), "torch-linear": lambda: f.linear(a, b, bias),
                "torch-mish2": lambda: f.mish(f.mish(f.linear(a, b, bias)))}
    return {"torch": (lambda: torch.bmm(a, b)) if a.dim() == 3 else (lambda: a @ b),
            "torch-kcopy": lambda: k_major(b)}


# -- the device run -----------------------------------------------------------------------------
def _by_name(op: str) -> dict[str, Variant]:
    return {v.name: v for v in variants(op)}


def start_sources(op: str) -> dict[str, dict[str, Any]]:
    """`start: <rules>` -> {"source", "rules": the rules applied, "refused": their reasons}: the
    shape's start kernel under the generic autotune list, as written ("control") and after
    `k-major-operands` or `tf32-round-operands`, each applied wherever it takes the kernel."""
    import kir  # noqa: PLC0415
    from lineage.control import autotune_control  # noqa: PLC0415
    from passes.base import Applied  # noqa: PLC0415
    from passes.triton.layout import KMajorOperands  # noqa: PLC0415
    from passes.triton.tf32_round import Tf32RoundOperands  # noqa: PLC0415

    if op not in STARTS:
        return {}
    start = (Path(__file__).resolve().parent / STARTS[op]).read_text()
    out = {"start: control": {"source": autotune_control(start), "rules": [], "refused": []}}
    for rule in (KMajorOperands(), Tf32RoundOperands()):
        ir, taken, refused = kir.parse(start, "triton"), 0, []
        for _ in range(8):  # one site at a time: each rewrite moves the others
            sites = [site for site in rule.sites(ir) if not site.present]
            results = [(site, rule.optimize(ir, site)) for site in sites]
            done = next((r for _, r in results if isinstance(r, Applied)), None)
            if done is None:
                refused = [f"{site.detail.get('operand')}: {getattr(r, 'reason', r)}" for site, r in results]
                break
            ir, taken = done.ir, taken + 1
        out[f"start: {rule.name}"] = {"source": autotune_control(ir.unparse()) if taken else None,
                                      "rules": [rule.name] * taken, "refused": refused}
    return out


def _start_run(op: str, name: str, out_dir: Path) -> Any:
    return load_source(out_dir / "src" / f"{op}__{_slug(name)}.py").run


def child_warm(op: str, name: str, out_dir: Path) -> int:
    """Compile and run one variant once on uninitialized inputs (a start kernel's autotuner
    included); status to warm/."""
    t0 = time.monotonic()
    status: dict[str, Any] = {"op": op, "variant": name}
    try:
        a, b, bias = make_inputs(op, fill=False)
        if name.startswith("start: "):
            _start_run(op, name, out_dir)(a, b)
        else:
            v = _by_name(op)[name]
            hand_run(v)(a, k_major(b) if v.bform == "kcopy-pre" else b, bias)
        torch.cuda.synchronize()
        status["ok"] = True
    except Exception as exc:
        status["error"] = f"{type(exc).__name__}: {exc}"[:500]
    status["seconds"] = round(time.monotonic() - t0, 1)
    (out_dir / "warm" / f"{op}__{_slug(name)}.json").write_text(json.dumps(status))
    return 0


def child_time(op: str, out_dir: Path) -> int:
    """Time torch and every variant of `op` that compiled, in this one process; a row each to
    rows.jsonl as it is measured."""
    import triton.testing  # noqa: PLC0415

    shape = SHAPES[op]
    inputs = make_inputs(op)
    a, b, bias = inputs
    b_pre = k_major(b) if shape["b"] == "kn" else None
    refs: dict[str, Any] = {}
    rows_path = out_dir / "rows.jsonl"
    base = {"op": op, "shape": shape}

    def ref(epi: str) -> Any:
        if epi not in refs:
            refs[epi] = reference(op, inputs, epi)
        return refs[epi]

    def emit(row: dict) -> None:
        with rows_path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"{op:7s} {row['variant']:44s} e2e {row.get('e2e_us', '-')!s:>9} us  kernel "
              f"{row.get('kernel_us', '-')!s:>9} us  x {row.get('x_torch_kernel', '-')!s:>6}  "
              f"{row.get('error', '')[:80]}", flush=True)

    def bench(fn: Any) -> float:
        return round(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3, 2)

    torch.backends.cuda.matmul.allow_tf32 = True
    timed: dict[str, dict] = {}
    for name, fn in torch_rows(op, inputs).items():
        row = {**base, "variant": name, "family": "torch", "e2e_us": bench(fn), "kernel_us": kernel_us(fn, 10)}
        epi = {"torch-linear": "bias", "torch-mish2": "mish2-start"}.get(name, "none")
        if name != "torch-kcopy":
            row.update(errors(fn(), ref(epi), "fp32"))
        timed[name] = row
        emit(row)
    torch.backends.cuda.matmul.allow_tf32 = False
    fn = torch_rows(op, inputs)["torch"]
    emit({**base, "variant": "torch-fp32", "family": "torch", "e2e_us": bench(fn),
          "kernel_us": kernel_us(fn, 10), **errors(fn(), ref("none"), "fp32")})
    torch.backends.cuda.matmul.allow_tf32 = True
    tc = timed["torch"]
    plain: dict[tuple, float] = {}
    warmed = _warmed(op, out_dir)
    for name, info in json.loads((out_dir / "src" / f"{op}.json").read_text()).items():
        row = {**base, "variant": name, "family": "start", "bform": name.split(": ")[1], "epi": "none"}
        if name not in warmed:
            emit({**row, "error": "; ".join(info["refused"]) or "not compiled (failed, crashed or cut)"})
            continue
        try:
            run = _start_run(op, name, out_dir)
            row.update(errors(run(a, b), ref("none"), "fp32"))
            row["e2e_us"] = bench(lambda: run(a, b))
            row["kernel_us"] = kernel_us(lambda: run(a, b), 10)
            row["config"] = "; ".join(f"{k}: {v.best_config}" for k, v in run.__globals__.items()
                                      if getattr(v, "best_config", None) is not None)
            row["x_torch_e2e"] = round(tc["e2e_us"] / row["e2e_us"], 3)
            row["x_torch_kernel"] = round(tc["kernel_us"] / row["kernel_us"], 3)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        emit(row)
    for v in variants(op):
        row = {**base, "variant": v.name, "family": v.family, "bform": v.bform, "epi": v.epi,
               "config": f"{v.bm}x{v.bn}x{v.bk} w{v.warps} s{v.stages}", "smem_bytes": v.smem_bytes}
        warm = out_dir / "warm" / f"{op}__{_slug(v.name)}.json"
        status = json.loads(warm.read_text()) if warm.is_file() else {"error": "not compiled (crashed or cut)"}
        if not status.get("ok"):
            emit({**row, "error": status.get("error", "")})
            continue
        try:
            run = hand_run(v)
            bb = b_pre if v.bform == "kcopy-pre" else b
            row.update(errors(run(a, bb, bias), ref(v.epi), "fp32"))
            row["e2e_us"] = bench(lambda: run(a, bb, bias))
            row["kernel_us"] = kernel_us(lambda: run(a, bb, bias), 10)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        if row.get("e2e_us"):
            row["x_torch_e2e"] = round(tc["e2e_us"] / row["e2e_us"], 3)
            if v.epi.startswith("mish2") and timed.get("torch-mish2", {}).get("e2e_us"):
                row["x_model_e2e"] = round(timed["torch-mish2"]["e2e_us"] / row["e2e_us"], 3)
        if row.get("kernel_us") and tc.get("kernel_us"):
            row["x_torch_kernel"] = round(tc["kernel_us"] / row["kernel_us"], 3)
            key = (v.family, v.bform, row["config"], v.group)
            if v.epi == "none":
                plain[key] = row["kernel_us"]
            elif key in plain:
                row["epilogue_us"] = round(row["kernel_us"] - plain[key], 2)
        emit(row)
    return 0


def _warmed(op: str, out_dir: Path) -> set[str]:
    """The variants of `op` whose warm-up ran."""
    out = set()
    for path in (out_dir / "warm").glob(f"{op}__*.json"):
        status = json.loads(path.read_text())
        if status.get("ok"):
            out.add(status["variant"])
    return out


def write_starts(ops: list[str], out_dir: Path) -> dict[str, dict]:
    """Each shape's start variants to OUT_DIR/src (their sources, and `<op>.json`: which rules
    each took or why not); {op: {variant: its record}}."""
    (out_dir / "src").mkdir(parents=True, exist_ok=True)
    report = {}
    for op in ops:
        meta = {}
        for name, info in start_sources(op).items():
            if info["source"] is not None:
                (out_dir / "src" / f"{op}__{_slug(name)}.py").write_text(info["source"])
                meta[name] = {"rules": info["rules"], "refused": info["refused"]}
            else:
                meta[f"{name} (refused)"] = {"rules": [], "refused": info["refused"]}
        (out_dir / "src" / f"{op}.json").write_text(json.dumps(meta, indent=1))
        report[op] = meta
    return report


def record(op: str, rows: list[dict], command: str) -> dict:
    """The store record of one shape (`bench/store.py`'s `case` kind), as gemm_ceiling's."""
    case = (f"Triton TF32 ceiling: {op} {json.dumps({k: v for k, v in SHAPES[op].items()})} "
            "(ms end to end, do_bench median; kernel alone: torch.profiler, L2 flushed)")
    timings: dict[str, dict] = {}
    for r in rows:
        if r.get("op") != op or not r.get("e2e_us"):
            continue
        timings[r["variant"]] = {"ms": round(r["e2e_us"] / 1e3, 5),
                                 "kernel_ms": round(r["kernel_us"] / 1e3, 5) if r.get("kernel_us") else None,
                                 "x_torch_e2e": r.get("x_torch_e2e"), "x_torch_kernel": r.get("x_torch_kernel"),
                                 "ok": r.get("ok")}
        if r.get("kernel_us"):
            timings[f"{r['variant']}: kernel alone"] = {"ms": round(r["kernel_us"] / 1e3, 5)}
    return {"case": case, "command": command, "timings": timings}


def summary(rows: list[dict]) -> str:
    """Per shape: cuBLAS TF32, the best correct kernel of each family / b-form (kernel time),
    and the epilogue costs."""
    lines = ["| op | what | best variant | kernel us | e2e us | x torch kernel | x torch e2e |",
             "|---|---|---|---:|---:|---:|---:|"]
    for op in SHAPES:
        mine = [r for r in rows if r.get("op") == op and r.get("kernel_us")]
        if not mine:
            continue
        for r in (r for r in mine if r["family"] == "torch"):
            lines.append(f"| {op} | {r['variant']} | - | {r['kernel_us']:.1f} | {r['e2e_us']} | - | - |")
        groups: dict[str, list[dict]] = {}
        for r in mine:
            if r["family"] != "torch" and r.get("ok") and r.get("epi", "none") in ("none", "bias"):
                groups.setdefault(f"{r['family']} {r['bform']}" + (" +bias" if r["epi"] == "bias" else ""),
                                  []).append(r)
            if r.get("epi", "").startswith("mish2") and r.get("ok"):
                groups.setdefault(r["epi"], []).append(r)
        for what, rs in sorted(groups.items()):
            r = min(rs, key=lambda x: x["kernel_us"])
            lines.append(f"| {op} | {what} | {r['variant']} | {r['kernel_us']:.1f} | {r['e2e_us']} | "
                         f"{r.get('x_torch_kernel', '-')} | {r.get('x_torch_e2e', '-')} |")
    epi = [r for r in rows if r.get("epilogue_us") is not None]
    if epi:
        lines += ["", "| epilogue row | kernel us | epilogue us (over the same kernel alone) | x torch-mish2 e2e | rel err |",
                  "|---|---:|---:|---:|---:|"]
        for r in epi:
            lines.append(f"| {r['variant']} | {r['kernel_us']:.1f} | {r['epilogue_us']} | "
                         f"{r.get('x_model_e2e', '-')} | {r.get('rel_err', float('nan')):.1e} |")
    return "\n".join(lines) + "\n"


def render(rows: list[dict]) -> str:
    lines = ["| op | variant | e2e us | kernel us | x torch e2e | x torch kernel | epilogue us | smem KB | rel err | ok | error |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append("| " + " | ".join(str(x) for x in (
            r["op"], r["variant"], r.get("e2e_us", "-"),
            round(r["kernel_us"], 2) if r.get("kernel_us") else "-", r.get("x_torch_e2e", "-"),
            r.get("x_torch_kernel", "-"), r.get("epilogue_us", "-"),
            r["smem_bytes"] // 1024 if "smem_bytes" in r else "-",
            f"{r['rel_err']:.1e}" if "rel_err" in r else "-", r.get("ok", "-"),
            (r.get("error") or "").replace("|", "/").replace("\n", " ")[:90])) + " |")
    return "\n".join(lines) + "\n"


# -- CPU checks -----------------------------------------------------------------------------------
SMALL: dict[str, dict[str, Any]] = {
    "nt8192": {"BATCH": 1, "M": 64, "N": 64, "K": 64, "b": "nk"},
    "nn4096": {"BATCH": 1, "M": 64, "N": 64, "K": 64, "b": "kn"},
    "bmm128": {"BATCH": 3, "M": 32, "N": 64, "K": 64, "b": "kn"},
}


def interpreter_paths(op: str) -> list[Variant]:
    """One small-tile variant per (family, b-form, epilogue, order, split) the shape's list
    holds; libdevice's epilogue and the inline PTX (rounding, approximate log) left out: the
    interpreter runs neither."""
    seen: dict[tuple, Variant] = {}
    for v in variants(op):
        if v.epi in ("mish2-libdevice", "mish2-approx") or v.bform == "kn-reg":
            continue
        seen.setdefault((v.family, v.bform, v.epi, v.group, v.split),
                        Variant(v.family, v.bform, 32, 32, 16, 4, 2, v.epi, v.group, v.split))
    return list(seen.values())


def interpreter_checks(ops: list[str]) -> list[dict]:
    """Every code path on small shapes (tile multiples) against torch on the CPU."""
    out = []
    for op in ops:
        shape = SMALL[op]
        torch.manual_seed(0)
        inputs = make_inputs(op, device="cpu", shape=shape)
        a, b, bias = inputs
        for v in interpreter_paths(op):
            try:
                got = hand_run(v)(a, k_major(b) if v.bform == "kcopy-pre" else b, bias)
                out.append({"op": op, "variant": v.name,
                            **errors(got, reference(op, inputs, v.epi, shape), "fp32")})
            except Exception as exc:
                out.append({"op": op, "variant": v.name, "ok": False,
                            "error": f"{type(exc).__name__}: {exc}"[:300]})
    return out


def dry(ops: list[str], out_dir: Path) -> dict:
    return {"starts": write_starts(ops, out_dir),
            "smem": {op: [{"variant": v.name, "smem_bytes": v.smem_bytes, "fits": v.smem_bytes <= SMEM_LIMIT}
                          for v in variants(op)] for op in ops},
            "interpreter": interpreter_checks(ops),
            "apis": {"host_descriptors": TensorDescriptor is not None, "libdevice": libdevice is not None}}


# -- the parent ---------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    started = probe_start(__doc__, list(SHAPES), argv, child_warm, child_time)
    if isinstance(started, int):
        return started
    args, ops, out_dir = started
    if not args.dry and not torch.cuda.is_available():
        print("error: no CUDA GPU (use --dry on a CPU machine)", file=sys.stderr)
        return 2
    if args.dry:
        report = dry(ops, out_dir)
        (out_dir / "dry.json").write_text(json.dumps(report, indent=1))
        if args.json:
            print(json.dumps(report, indent=1))
        else:
            for op, rs in report["smem"].items():
                for r in rs:
                    print(f"{op:7s} {r['variant']:44s} smem {r['smem_bytes']:>7} fits {r['fits']}")
            for op, meta in report["starts"].items():
                for name, info in meta.items():
                    print(f"{op:7s} {name:44s} rules {info['rules']} refused {info['refused']}")
            for r in report["interpreter"]:
                print(f"interpret {r['op']:7s} {r['variant']:44s} ok {r['ok']} {r.get('rel_err', r.get('error'))}")
            print("apis:", report["apis"])
        return 0 if all(r["ok"] for r in report["interpreter"]) else 1
    return device_run(ops, out_dir, args)


def device_run(ops: list[str], out_dir: Path, args: Any) -> int:
    t0 = time.monotonic()
    (out_dir / "records").mkdir(exist_ok=True)
    try:
        starts = write_starts(ops, out_dir)
    except Exception as exc:  # the hand kernels are timed without them
        print(f"start variants not built: {type(exc).__name__}: {exc}", flush=True)
        for op in ops:
            (out_dir / "src" / f"{op}.json").write_text("{}")
        starts = {op: {} for op in ops}
    # autotuned starts and epilogue variants (the longest compiles) first, so the pool drains evenly
    jobs = [(op, name) for op in ops for name in starts[op] if not name.endswith("(refused)")]
    jobs += sorted(((op, v.name) for op in ops for v in variants(op)), key=lambda j: "mish2" not in j[1])
    rows = run_phases(Path(__file__), out_dir, jobs, ops, args.wall, args.jobs, 0.5, t0)
    command = "python3 bench/tf32_ceiling.py " + " ".join(sys.argv[1:])
    for op in ops:
        (out_dir / "records" / f"{op}.json").write_text(json.dumps(record(op, rows, command), indent=1))
    head = (f"# TF32 GEMM ceiling on {torch.cuda.get_device_name()} (triton {triton.__version__}, "
            f"torch {torch.__version__}), {time.monotonic() - t0:.0f} s\n\n")
    (out_dir / "tf32.md").write_text(head + "## Summary\n\n" + summary(rows) + "\n## Rows\n\n" + render(rows))
    print(json.dumps(rows, indent=1) if args.json else summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
