"""What Triton reaches on the held-out GEMMs on Hopper, beside cuBLAS, and which of it the
search's space holds.

    python3 bench/gemm_ceiling.py OUT_DIR [--only mm1024,bmm,sq4096] [--jobs 14] [--wall 225] [--dry] [--json]

Operators: `mm1024` (C = A @ B, 1024^3 fp16) and `bmm` (16 products of 1024^3 bf16), inputs
from their held-out case modules (bench/heldout/<op>/case.py, the first shape); `sq4096` (the
KernelBench level-1 square product: 4096^3 fp32 drawn by `torch.rand`, `tl.dot` in TF32). Each
operator is timed as:

| family | what runs |
|---|---|
| `torch` | `torch.matmul` / `torch.bmm` (cuBLAS; TF32 allowed for sq4096, `torch-fp32` beside it) |
| `start` | the held-out start kernel as written |
| `control` | the start under the generic autotune list (`lineage.control.autotune_control`) |
| `rules` | the start after the library's rules (`passes.registry.get_pass`, each applied wherever it takes the kernel, in the order named) under the same list |
| `hand` | a persistent TMA kernel written here (`ceiling_kernel`: tensor descriptors built on the host or in the kernel, grouped order, a tile loop over `tl.range` flattened or warp-specialized; split-K for mm1024), one row per configuration |

Where the start ties one constexpr to several dot dimensions (bmm's `BLOCK`), the rules' rows
take the generic list through `lineage.transfer.untied_for` (as the search's tile cards do),
and `control-untied` shows the start so; `control` keeps the control's own list.

Timing: `triton.testing.do_bench` median (L2 flushed) of the whole call (`e2e_us`), and the GPU
time of the call's kernels under `torch.profiler` with the L2 flushed before each call
(`kernel_us`). Every row carries its error against torch (fp32 products for sq4096): max
absolute, relative Frobenius, and `ok` under a per-dtype bound (`REL_BOUND`).

The device run goes in two phases so that compiles (the bulk of the time) run in parallel:
each variant is first compiled and run once in a child process of its own (`--jobs` at once;
a variant whose compile fails or crashes is a row saying so), then each operator is timed in
one child, sequentially, from the compile cache. Writes OUT_DIR/src/*.py (every variant's
source), OUT_DIR/rows.jsonl, OUT_DIR/ceiling.md; prints the table (`--json`: the rows).
`--dry` (any machine, no GPU): writes the sources, reports which rules each recipe applied and
what refused, the shared memory of every hand configuration, and runs each hand-kernel code
path under the Triton interpreter on small shapes against torch. Needs triton 3.6 - 3.9.
Bad arguments or no GPU outside `--dry`: exit 2.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if "--dry" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

try:  # host-side descriptors (triton >= 3.4)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older triton
    TensorDescriptor = None

HAS_DEVICE_DESC = hasattr(tl, "make_tensor_descriptor")
RANGE_KW = set(getattr(tl.range.__init__, "__code__", None).co_varnames) if hasattr(tl, "range") else set()
HAS_WS = "warp_specialize" in RANGE_KW

OPS = {
    "mm1024": {"case": "bench/heldout/mm1024", "start": "bench/heldout/mm1024/mm_naive.py"},
    "bmm": {"case": "bench/heldout/bmm", "start": "bench/heldout/bmm/bmm_start.py"},
    "sq4096": {"case": None, "start": "bench/kernelbench/level1/1_Square_matrix_multiplication_.py",
               "shape": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp32"}},
}
# The library's Triton GEMM rules, in the orders a lineage composes them.
RECIPES: dict[str, tuple[str, ...]] = {
    "grouped": ("grouped-ordering",),
    "tma": ("tma-descriptors",),
    "grouped+persistent": ("grouped-ordering", "persistent-grid"),
    "grouped+persistent+tma": ("grouped-ordering", "persistent-grid", "tma-descriptors"),
    "tma+grouped+persistent": ("tma-descriptors", "grouped-ordering", "persistent-grid"),
}
# Entries a Hopper GEMM list has beside the generic one (`lineage.control.DOT_CONFIGS`, BK 32 at
# 4 stages but for 128x256x64): a 64-wide K step (128-byte rows of 16-bit operands, the widest
# swizzle) at 4-5 stages. Shared memory of 16-bit operands, stages x (BM + BN) x BK x 2 bytes:
# 128x128x64 s4 128 KB, 128x64x64 s4 96 KB, 64x128x64 s5 120 KB, 128x256x64 s4 192 KB (all under
# the 227 KB an sm_90 block may use; twice that for fp32, where the autotuner drops those over).
HOPPER_ENTRIES = ((128, 128, 64, 8, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 5), (128, 256, 64, 8, 4))
# Relative Frobenius error a correct kernel stays under, by the inputs' dtype (fp32: TF32 dot).
REL_BOUND = {"fp16": 2e-3, "bf16": 1e-2, "fp32": 5e-3}
SMEM_LIMIT = 232448  # bytes of shared memory a block may use on sm_90
# Hand configurations: (BM, BN, BK, warps, stages, options). Options: host descriptors unless
# "device"; the output stored through a descriptor unless "ptr"; the tile loop flattened
# unless "nested"; "ws": warp-specialized tile loop; "splitk2": split-K by 2 (not persistent).
HAND_16 = (
    (128, 256, 64, 8, 3, ()),
    (128, 256, 64, 8, 4, ("ptr",)),
    (128, 128, 64, 8, 4, ()),
    (128, 128, 64, 4, 4, ()),
    (128, 64, 64, 4, 4, ()),
    (64, 128, 64, 4, 5, ()),
    (128, 128, 64, 8, 4, ("device",)),
    (128, 128, 64, 8, 4, ("nested",)),
    (128, 128, 64, 8, 3, ("ws",)),
    (128, 256, 64, 8, 3, ("ws",)),
)
HAND_32 = (
    (128, 128, 32, 8, 4, ()),
    (128, 128, 32, 4, 5, ()),
    (128, 256, 32, 8, 3, ("ptr",)),
    (256, 128, 32, 8, 3, ("ptr",)),
    (128, 128, 64, 8, 3, ("ptr",)),
    (128, 128, 32, 8, 4, ("device",)),
    (128, 128, 32, 8, 3, ("ws",)),
)
SPLITK = ((128, 128, 64, 8, 4, ("splitk2",)), (64, 128, 64, 4, 4, ("splitk2",)))


def hand_configs(op: str) -> list[tuple]:
    dtype = shape_of(op)["dtype"]
    out = list(HAND_32 if dtype == "fp32" else HAND_16)
    if op == "mm1024":
        out += list(SPLITK)
    return out


def config_name(cfg: tuple) -> str:
    bm, bn, bk, w, s, opts = cfg
    return f"{bm}x{bn}x{bk} w{w} s{s}" + "".join(f" {o}" for o in opts)


def smem_bytes(cfg: tuple, elem: int, out_elem: int) -> int:
    """Shared memory of one hand configuration: the operand ring (stages x (A tile + B tile))
    plus the output tile where it is stored through a descriptor."""
    bm, bn, bk, _, s, opts = cfg
    ring = s * (bm * bk + bk * bn) * elem
    return ring + (0 if ("ptr" in opts or "splitk2" in opts) else bm * bn * out_elem)


# -- the hand-written kernel ------------------------------------------------------------------
@triton.jit
def _tile(a_d, b_d, c_d, c, t, M, N, scb, scm, scn, tiles_m, tiles_n, per_batch, k_steps,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
          RANK3: tl.constexpr, STORE_DESC: tl.constexpr):
    bidx = t // per_batch
    r = t % per_batch
    in_group = GROUP_M * tiles_n
    first_m = (r // in_group) * GROUP_M
    size_m = min(tiles_m - first_m, GROUP_M)
    om = (first_m + (r % in_group) % size_m) * BM
    on = ((r % in_group) // size_m) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kk in range(k_steps):
        ok = kk * BK
        if RANK3:
            x = a_d.load([bidx, om, ok]).reshape(BM, BK)
            y = b_d.load([bidx, ok, on]).reshape(BK, BN)
        else:
            x = a_d.load([om, ok])
            y = b_d.load([ok, on])
        acc = tl.dot(x, y, acc)
    if STORE_DESC:
        if RANK3:
            c_d.store([bidx, om, on], acc.to(c_d.dtype).reshape(1, BM, BN))
        else:
            c_d.store([om, on], acc.to(c_d.dtype))
    else:
        rm = om + tl.arange(0, BM)
        rn = on + tl.arange(0, BN)
        tl.store(c + bidx * scb + rm[:, None] * scm + rn[None, :] * scn,
                 acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def ceiling_kernel(a, b, c_d, c, BATCH, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                   PROGRAMS: tl.constexpr, DEVICE_DESC: tl.constexpr, RANK3: tl.constexpr,
                   STORE_DESC: tl.constexpr, FLATTEN: tl.constexpr, WS: tl.constexpr):
    """C[z] = A[z] @ B[z]: a persistent grid of PROGRAMS programs walks the output tiles of
    every product in grouped order, each tile's operands read through tensor descriptors (built
    on the host, or here when DEVICE_DESC), its K loop pipelined by the compiler."""
    if DEVICE_DESC:
        if RANK3:
            a_d = tl.make_tensor_descriptor(a, shape=[BATCH, M, K], strides=[sab, sam, sak],
                                            block_shape=[1, BM, BK])
            b_d = tl.make_tensor_descriptor(b, shape=[BATCH, K, N], strides=[sbb, sbk, sbn],
                                            block_shape=[1, BK, BN])
            o_d = tl.make_tensor_descriptor(c, shape=[BATCH, M, N], strides=[scb, scm, scn],
                                            block_shape=[1, BM, BN])
        else:
            a_d = tl.make_tensor_descriptor(a, shape=[M, K], strides=[sam, sak], block_shape=[BM, BK])
            b_d = tl.make_tensor_descriptor(b, shape=[K, N], strides=[sbk, sbn], block_shape=[BK, BN])
            o_d = tl.make_tensor_descriptor(c, shape=[M, N], strides=[scm, scn], block_shape=[BM, BN])
    else:
        a_d = a
        b_d = b
        o_d = c_d
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_batch = tiles_m * tiles_n
    k_steps = tl.cdiv(K, BK)
    if WS:
        for t in tl.range(tl.program_id(0), per_batch * BATCH, PROGRAMS, warp_specialize=True):
            _tile(a_d, b_d, o_d, c, t, M, N, scb, scm, scn, tiles_m, tiles_n, per_batch, k_steps,
                  BM, BN, BK, GROUP_M, RANK3, STORE_DESC)
    else:
        for t in tl.range(tl.program_id(0), per_batch * BATCH, PROGRAMS, flatten=FLATTEN):
            _tile(a_d, b_d, o_d, c, t, M, N, scb, scm, scn, tiles_m, tiles_n, per_batch, k_steps,
                  BM, BN, BK, GROUP_M, RANK3, STORE_DESC)


@triton.jit
def splitk_kernel(a_d, b_d, w, M, N, K, swm, swn, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr, GROUP_M: tl.constexpr, SPLIT: tl.constexpr):
    """One output tile's share of K (program axis 1 picks the share), added into the fp32 `w`."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    in_group = GROUP_M * tiles_n
    first_m = (pid // in_group) * GROUP_M
    size_m = min(tiles_m - first_m, GROUP_M)
    om = (first_m + (pid % in_group) % size_m) * BM
    on = ((pid % in_group) // size_m) * BN
    k_steps = tl.cdiv(K, BK)
    share = tl.cdiv(k_steps, SPLIT)
    lo = tl.program_id(1) * share
    hi = min(lo + share, k_steps)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kk in range(lo, hi):
        acc = tl.dot(a_d.load([om, kk * BK]), b_d.load([kk * BK, on]), acc)
    rm = om + tl.arange(0, BM)
    rn = on + tl.arange(0, BN)
    tl.atomic_add(w + rm[:, None] * swm + rn[None, :] * swn, acc,
                  mask=(rm[:, None] < M) & (rn[None, :] < N), sem="relaxed")


@triton.jit
def cast_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n).to(dst.dtype.element_ty), mask=offs < n)


def _scratch(size: int, alignment: int, stream: Any) -> Any:
    return torch.empty(size, dtype=torch.int8, device="cuda" if torch.cuda.is_available() else "cpu")


_PROGRAMS: dict[int, int] = {}


def _programs() -> int:
    if not torch.cuda.is_available():
        return 4
    index = torch.cuda.current_device()
    if index not in _PROGRAMS:
        _PROGRAMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _PROGRAMS[index]


def hand_run(cfg: tuple) -> Any:
    """`run(a, b)` of one hand configuration (rank-2 or rank-3 inputs)."""
    bm, bn, bk, warps, stages, opts = cfg
    device_desc, store_desc = "device" in opts, "ptr" not in opts

    def run(a: Any, b: Any) -> Any:
        if TensorDescriptor is None and not device_desc:
            raise RuntimeError("this triton has no triton.tools.tensor_descriptor")
        rank3 = a.dim() == 3
        a3, b3 = (a, b) if rank3 else (a[None], b[None])
        batch, m, k = a3.shape
        n = b3.shape[2]
        c3 = torch.empty((batch, m, n), device=a.device, dtype=a.dtype)
        c = c3 if rank3 else c3[0]
        if "splitk2" in opts:
            return _splitk(a, b, c, bm, bn, bk, warps, stages)
        if device_desc:
            triton.set_allocator(_scratch)
            args = (a, b, None, c)
        else:
            def desc(t: Any, block: list[int]) -> Any:
                return TensorDescriptor.from_tensor(t, block if rank3 else block[1:])
            args = (desc(a, [1, bm, bk]), desc(b, [1, bk, bn]),
                    desc(c, [1, bm, bn]) if store_desc else None, c)
        tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn) * batch
        programs = min(tiles, _programs())
        ceiling_kernel[(programs,)](
            *args, batch, m, n, k, *a3.stride(), *b3.stride(), *c3.stride(),
            BM=bm, BN=bn, BK=bk, GROUP_M=8, PROGRAMS=programs, DEVICE_DESC=device_desc,
            RANK3=rank3, STORE_DESC=store_desc, FLATTEN="nested" not in opts, WS="ws" in opts,
            num_warps=warps, num_stages=stages)
        return c

    return run


def _splitk(a: Any, b: Any, c: Any, bm: int, bn: int, bk: int, warps: int, stages: int) -> Any:
    m, k = a.shape
    n = b.shape[1]
    w = torch.zeros((m, n), device=a.device, dtype=torch.float32)
    a_d = TensorDescriptor.from_tensor(a, [bm, bk])
    b_d = TensorDescriptor.from_tensor(b, [bk, bn])
    splitk_kernel[(triton.cdiv(m, bm) * triton.cdiv(n, bn), 2)](
        a_d, b_d, w, m, n, k, w.stride(0), w.stride(1), BM=bm, BN=bn, BK=bk, GROUP_M=8, SPLIT=2,
        num_warps=warps, num_stages=stages)
    cast_kernel[(triton.cdiv(m * n, 4096),)](w, c, m * n, BLOCK=4096, num_warps=8)
    return c


# -- sources of the start, control and rule variants (CPU) -------------------------------------
def shape_of(op: str) -> dict:
    spec = OPS[op]
    if spec["case"] is None:
        return dict(spec["shape"])
    return dict(next(iter(_case(op).SHAPES.values())))


def _case(op: str) -> Any:
    import importlib.util  # noqa: PLC0415

    path = ROOT / OPS[op]["case"] / "case.py"
    spec = importlib.util.spec_from_file_location(f"ceiling_case_{op}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def applied(source: str, names: tuple[str, ...], ctx: Any) -> tuple[Any, list[dict]]:
    """The start after each rule of `names` in turn, applied at every open site it takes
    (`lineage.moves.rule_moves` does the same per rule), and per rule how many sites it took
    and the refusals at the others."""
    import kir  # noqa: PLC0415
    from passes.base import Applied  # noqa: PLC0415
    from passes.registry import get_pass  # noqa: PLC0415

    ir = kir.parse(source, "triton")
    log = []
    for name in names:
        rule, taken, refused = get_pass(name)(), 0, []
        for _ in range(8):
            step, refused = None, []
            for site in (s for s in rule.sites(ir) if not s.present):
                result = rule.optimize(ir, site, ctx)
                if isinstance(result, Applied):
                    step = result
                    break
                refused.append(f"{site.anchor}: {getattr(result, 'reason', result)}")
            if step is None:
                break
            ir, taken = step.ir, taken + 1
        log.append({"rule": name, "sites_taken": taken, "refused": refused[:3]})
    return ir, log


def swept(ir: Any, entries: tuple | None = None) -> tuple[str, str]:
    """`ir` under the generic autotune list (`entries`: another list of (m, n, k, warps,
    stages)): through `untied_for` where its dot kernel ties one constexpr to several
    dimensions, else as `autotune_control` writes it; and which."""
    import kir  # noqa: PLC0415
    from lineage.control import DOT_CONFIGS, autotune_control  # noqa: PLC0415
    from lineage.transfer import untied_for  # noqa: PLC0415
    from passes.triton.roles import SweepRefusal, joint_config, sweep_edit  # noqa: PLC0415

    for name, cfg in joint_config(ir).items():
        if not cfg.dot:
            continue
        configs = [{"m": m, "n": n, "k": k, "num_warps": w, "num_stages": s}
                   for m, n, k, w, s in (entries or DOT_CONFIGS)]
        untied = untied_for(ir, name, configs)
        if entries is None and untied.unparse() == ir.unparse():
            break
        if "group" in joint_config(untied)[name].by_role():
            configs = [{**c, "group": 8} for c in configs]
        made = sweep_edit(untied, name, configs)
        if isinstance(made, SweepRefusal):
            raise ValueError(made.reason)
        edits, _ = made
        new = untied.apply(kir.Edit(kir.Span(e.start, e.end), e.text) for e in edits)
        how = "generic list" if entries is None else f"generic list + {len(entries) - len(DOT_CONFIGS)} Hopper entries"
        return new.unparse(), how + (", untied" if untied.unparse() != ir.unparse() else "")
    return autotune_control(ir.unparse()), "generic list"


def build(op: str) -> dict[str, dict]:
    """Variant name -> {"source", "family", "rules", "list", "log"} or {"refused"}."""
    from passes.base import PassContext  # noqa: PLC0415

    start = (ROOT / OPS[op]["start"]).read_text()
    if OPS[op]["case"] is not None:
        ctx = PassContext.for_case(str(ROOT / OPS[op]["case"]), tier="device")
    else:
        ctx = PassContext(facts={"arch": "sm_90", "platform": "cuda", **shape_of(op)})
    import kir  # noqa: PLC0415
    from lineage.control import autotune_control  # noqa: PLC0415

    out: dict[str, dict] = {"start": {"source": start, "family": "start", "rules": [], "list": "as written"}}
    out["control"] = {"source": autotune_control(start), "family": "control", "rules": [],
                      "list": "generic list (autotune_control)"}
    untied_text, how = swept(kir.parse(start, "triton"))
    if how.endswith("untied"):
        out["control-untied"] = {"source": untied_text, "family": "control", "rules": [], "list": how}
    from lineage.control import DOT_CONFIGS  # noqa: PLC0415

    added = tuple(e for e in HOPPER_ENTRIES if e not in DOT_CONFIGS)
    text, how = swept(kir.parse(start, "triton"), DOT_CONFIGS + added)
    out["control+hopper"] = {"source": text, "family": "control", "rules": [], "list": how}
    for name, names in RECIPES.items():
        ir, log = applied(start, names, ctx)
        missing = [step["rule"] for step in log if not step["sites_taken"]]
        if missing:
            out[f"rules:{name}"] = {"refused": f"{', '.join(missing)} took no site",
                                    "family": "rules", "rules": list(names), "log": log}
            continue
        try:
            text, how = swept(ir)
        except Exception as exc:  # a list the control cannot write is a row, not the end
            out[f"rules:{name}"] = {"refused": f"sweep: {type(exc).__name__}: {exc}"[:300],
                                    "family": "rules", "rules": list(names), "log": log}
            continue
        out[f"rules:{name}"] = {"source": text, "family": "rules", "rules": list(names),
                                "list": how, "log": log}
    return out


def structure(text: str) -> dict:
    return {"persistent": "tl.num_programs(0)" in text, "flattened": "flatten=True" in text,
            "descriptors": text.count("tl.make_tensor_descriptor("),
            "descriptor_loads": text.count("_desc.load(["), "descriptor_store": "_desc.store([" in text,
            "autotune_configs": text.count("triton.Config(")}


# -- device side ------------------------------------------------------------------------------
def make_inputs(op: str, device: str = "cuda", shape: dict | None = None) -> tuple:
    shape = shape or shape_of(op)
    if OPS[op]["case"] is not None:
        return _case(op).make_inputs(shape, 1234, device)
    g = torch.Generator(device=device).manual_seed(1234)
    return (torch.rand(shape["M"], shape["K"], generator=g, device=device),
            torch.rand(shape["K"], shape["N"], generator=g, device=device))


def reference(op: str, inputs: tuple) -> Any:
    a, b = inputs
    if a.dtype == torch.float32:
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            return torch.matmul(a, b)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old
    return torch.bmm(a, b) if a.dim() == 3 else torch.matmul(a, b)


def errors(out: Any, ref: Any, dtype: str) -> dict:
    d = out.float() - ref.float()
    rel = float(d.norm() / ref.float().norm().clamp_min(1e-30))
    return {"max_abs_err": float(d.abs().max()), "rel_err": rel, "ok": rel < REL_BOUND[dtype]}


def load_source(path: Path) -> Any:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_").replace("+", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def callables(op: str, out_dir: Path) -> dict[str, Any]:
    """Variant -> its `run`, for every variant whose source was written and hand config."""
    found: dict[str, Any] = {}
    meta = json.loads((out_dir / "src" / f"{op}.json").read_text())
    for name, info in meta.items():
        if "file" in info:
            found[name] = ("file", out_dir / "src" / info["file"])
    # warp-specialized loops last: a hang there costs only what comes after it
    for cfg in sorted(hand_configs(op), key=lambda c: "ws" in c[5]):
        found[f"hand:{config_name(cfg)}"] = ("hand", cfg)
    return found


def runner(kind: str, what: Any) -> Any:
    if kind == "file":
        return load_source(what).run
    return hand_run(what)


def kernel_us(fn: Any, calls: int = 20) -> float | None:
    """GPU time (us) per call of the kernels `fn` launches, the L2 flushed before each call
    (bench/kernel_time.py; the flush's kernel is left out of the sum)."""
    from bench import kernel_time  # noqa: PLC0415

    return kernel_time.kernel_us(fn, calls, flush=True)


def child_warm(op: str, variant: str, out_dir: Path) -> int:
    """Compile and run one variant once (its autotuner included); status to warm/."""
    t0 = time.monotonic()
    status: dict[str, Any] = {"op": op, "variant": variant}
    try:
        kind, what = callables(op, out_dir)[variant]
        fn = runner(kind, what)
        inputs = make_inputs(op)
        fn(*inputs)
        torch.cuda.synchronize()
        status["ok"] = True
    except Exception as exc:
        status["error"] = f"{type(exc).__name__}: {exc}"[:500]
    status["seconds"] = round(time.monotonic() - t0, 1)
    (out_dir / "warm" / f"{op}__{_slug(variant)}.json").write_text(json.dumps(status))
    return 0


def child_time(op: str, out_dir: Path) -> int:
    """Time every variant of `op` that compiled, in this one process; a row each to rows.jsonl."""
    import triton.testing  # noqa: PLC0415

    shape = shape_of(op)
    inputs = make_inputs(op)
    ref = reference(op, inputs)
    rows_path = out_dir / "rows.jsonl"

    def emit(row: dict) -> None:
        with rows_path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"{row['op']:7s} {row['variant']:42s} e2e {row.get('e2e_us', '-')!s:>9} us  "
              f"kernel {row.get('kernel_us', '-')!s:>9} us  {row.get('error', '')[:80]}", flush=True)

    def bench(fn: Any) -> float:
        return round(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3, 2)

    a, b = inputs
    torch_fn = (lambda: torch.bmm(a, b)) if a.dim() == 3 else (lambda: torch.matmul(a, b))
    base = {"op": op, "shape": shape}
    tf32 = a.dtype == torch.float32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    row = {**base, "variant": "torch", "family": "torch", "e2e_us": bench(torch_fn),
           "kernel_us": kernel_us(torch_fn), **errors(torch_fn(), ref, shape["dtype"])}
    emit(row)
    torch_e2e, torch_kernel = row["e2e_us"], row["kernel_us"]
    if tf32:
        torch.backends.cuda.matmul.allow_tf32 = False
        emit({**base, "variant": "torch-fp32", "family": "torch", "e2e_us": bench(torch_fn),
              "kernel_us": kernel_us(torch_fn), **errors(torch_fn(), ref, shape["dtype"])})
        torch.backends.cuda.matmul.allow_tf32 = True
    meta = json.loads((out_dir / "src" / f"{op}.json").read_text())
    for variant, (kind, what) in callables(op, out_dir).items():
        info = meta.get(variant, {"family": "hand", "rules": []})
        row = {**base, "variant": variant, "family": info["family"], "rules": info.get("rules", []),
               "list": info.get("list", "")}
        warm = out_dir / "warm" / f"{op}__{_slug(variant)}.json"
        status = json.loads(warm.read_text()) if warm.is_file() else {"error": "not compiled (crashed or cut)"}
        if not status.get("ok"):
            emit({**row, "error": status.get("error", "")})
            continue
        try:
            fn = runner(kind, what)
            out = fn(*inputs)
            row.update(errors(out, ref, shape["dtype"]))
            row["e2e_us"] = bench(lambda: fn(*inputs))
            row["kernel_us"] = kernel_us(lambda: fn(*inputs))
            if kind == "hand":
                row["config"] = variant[len("hand:"):]
            for tuner in (v for v in getattr(fn, "__globals__", {}).values()
                          if getattr(v, "best_config", None) is not None):
                row["config"] = str(tuner.best_config)
                row["configs_us"] = sorted(
                    (round(1e3 * (t[0] if isinstance(t, (list, tuple)) else t), 2), str(c))
                    for c, t in (getattr(tuner, "configs_timings", None) or {}).items())
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        if row.get("e2e_us"):
            row["x_torch_e2e"] = round(torch_e2e / row["e2e_us"], 3)
        if row.get("kernel_us") and torch_kernel:
            row["x_torch_kernel"] = round(torch_kernel / row["kernel_us"], 3)
        emit(row)
    return 0


def _slug(variant: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in variant)


# -- the parent ---------------------------------------------------------------------------------
def write_sources(ops: list[str], out_dir: Path) -> dict[str, dict]:
    (out_dir / "src").mkdir(parents=True, exist_ok=True)
    report = {}
    for op in ops:
        made = build(op)
        meta = {}
        for name, info in made.items():
            entry = {k: v for k, v in info.items() if k != "source"}
            if "source" in info:
                entry["file"] = f"{op}__{_slug(name)}.py"
                (out_dir / "src" / entry["file"]).write_text(info["source"])
                entry["structure"] = structure(info["source"])
            meta[name] = entry
        (out_dir / "src" / f"{op}.json").write_text(json.dumps(meta, indent=1))
        report[op] = meta
    return report


def dry(ops: list[str], out_dir: Path) -> dict:
    """Sources, rules applied, hand configurations' shared memory, and every hand-kernel code
    path run under the interpreter on small shapes against torch."""
    report = {"variants": write_sources(ops, out_dir), "hand": {}, "apis": {
        "host_descriptors": TensorDescriptor is not None, "device_descriptors": HAS_DEVICE_DESC,
        "warp_specialize": HAS_WS}}
    for op in ops:
        shape = shape_of(op)
        elem = 4 if shape["dtype"] == "fp32" else 2
        rows = []
        for cfg in hand_configs(op):
            rows.append({"config": config_name(cfg), "smem_bytes": smem_bytes(cfg, elem, elem),
                         "fits": smem_bytes(cfg, elem, elem) <= SMEM_LIMIT})
        report["hand"][op] = rows
    report["interpreter"] = interpreter_checks()
    return report


def interpreter_checks() -> list[dict]:
    """Each code path of the hand kernels at 16-32 wide tiles on small shapes with partial tiles
    (TMA-aligned strides), against torch on the CPU; fp16 both (the interpreter reads bf16
    through a tensor descriptor as garbage, pointer loads or not)."""
    small = [("mm1024", {"M": 80, "N": 48, "K": 72, "dtype": "fp16"}),
             ("bmm", {"BATCH": 3, "M": 40, "N": 56, "K": 48, "dtype": "fp16"})]
    paths = [(32, 32, 16, 4, 2, ()), (32, 16, 16, 4, 2, ("ptr",)), (16, 32, 16, 4, 2, ("device",)),
             (32, 32, 16, 4, 2, ("nested",)), (32, 32, 16, 4, 2, ("ws",)),
             (32, 16, 16, 4, 2, ("splitk2",))]
    out = []
    for op, shape in small:
        g = torch.Generator().manual_seed(0)
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[shape["dtype"]]
        if "BATCH" in shape:
            a = torch.randn(shape["BATCH"], shape["M"], shape["K"], generator=g).to(dt)
            b = torch.randn(shape["BATCH"], shape["K"], shape["N"], generator=g).to(dt)
        else:
            a = torch.randn(shape["M"], shape["K"], generator=g).to(dt)
            b = torch.randn(shape["K"], shape["N"], generator=g).to(dt)
        ref = (a.float() @ b.float())
        for cfg in paths:
            if "splitk2" in cfg[5] and a.dim() == 3:
                continue
            try:
                got = hand_run(cfg)(a, b)
                out.append({"op": op, "config": config_name(cfg), **errors(got, ref, shape["dtype"])})
            except Exception as exc:
                out.append({"op": op, "config": config_name(cfg), "ok": False,
                            "error": f"{type(exc).__name__}: {exc}"[:300]})
    return out


def render(rows: list[dict]) -> str:
    lines = ["| op | variant | family | e2e us | kernel us | x torch e2e | x torch kernel | autotuner's pick | rel err | ok | error |",
             "|---|---|---|---:|---:|---:|---:|---|---:|---|---|"]
    for r in rows:
        lines.append("| " + " | ".join(str(x) for x in (
            r["op"], r["variant"], r.get("family", ""), r.get("e2e_us", "-"),
            round(r["kernel_us"], 2) if r.get("kernel_us") else "-", r.get("x_torch_e2e", "-"),
            r.get("x_torch_kernel", "-"), (r.get("config") or "")[:70],
            f"{r['rel_err']:.1e}" if "rel_err" in r else "-", r.get("ok", "-"),
            (r.get("error") or "").replace("|", "/")[:90])) + " |")
    return "\n".join(lines) + "\n"


def run_phases(script: Path, out_dir: Path, jobs: list[tuple[str, str]], ops: list[str],
               wall: float, n_jobs: int, compile_share: float, t0: float) -> list[dict]:
    """The device run's two phases for `script` (this file, or a probe built like it): each
    (op, variant) of `jobs` compiled and run once by `script OUT_DIR --child warm` (`n_jobs` at
    once, until `compile_share` of `wall` has passed since `t0`), then each op timed by
    `script OUT_DIR --child time`, one after the other, up to the wall; a row saying so for an
    op whose timing child fails, is cut or never starts. Returns OUT_DIR/rows.jsonl's rows."""
    (out_dir / "warm").mkdir(parents=True, exist_ok=True)
    rows_path = out_dir / "rows.jsonl"
    rows_path.write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    me = [sys.executable, str(script.resolve()), str(out_dir)]
    compile_wall = max(30.0, wall * compile_share)

    def warm(job: tuple[str, str]) -> None:
        left = compile_wall - (time.monotonic() - t0)
        if left <= 5:
            return
        try:
            subprocess.run(me + ["--child", "warm", "--op", job[0], "--variant", job[1]], env=env,
                           timeout=left, capture_output=True)
        except subprocess.TimeoutExpired:
            pass

    def note(op: str, error: str) -> None:
        with rows_path.open("a") as fh:
            fh.write(json.dumps({"op": op, "variant": "-", "error": error}) + "\n")

    print(f"phase 1: compiling {len(jobs)} variants, {n_jobs} at once", flush=True)
    with ThreadPoolExecutor(n_jobs) as pool:
        list(pool.map(warm, jobs))
    print(f"phase 1 done in {time.monotonic() - t0:.0f} s", flush=True)
    for op in ops:
        left = wall - (time.monotonic() - t0)
        if left <= 5:
            note(op, "not timed: out of time")
            continue
        try:
            done = subprocess.run(me + ["--child", "time", "--op", op], env=env, timeout=left)
            if done.returncode:
                note(op, f"timing child exited {done.returncode}")
        except subprocess.TimeoutExpired:
            note(op, "timing cut at the wall")
    return [json.loads(ln) for ln in rows_path.read_text().splitlines() if ln.strip()]


def probe_parser(doc: str, ops: list[str]) -> argparse.ArgumentParser:
    """The options of a two-phase probe (this file's, or one built like it): OUT_DIR, --only
    (default: all of `ops`), --jobs, --wall, --dry, --json, and the children's own."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--only", default=",".join(ops))
    ap.add_argument("--jobs", type=int, default=14, help="compiles at once (phase 1)")
    ap.add_argument("--wall", type=float, default=225.0, help="seconds for the whole run")
    ap.add_argument("--dry", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=("warm", "time"), help=argparse.SUPPRESS)
    ap.add_argument("--op", help=argparse.SUPPRESS)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    return ap


def probe_start(doc: str, known: list[str], argv: list[str] | None, warm: Any,
                time_op: Any) -> int | tuple[Any, list[str], Path]:
    """A probe's arguments read (`probe_parser`): in a child, what `warm(op, variant, out_dir)`
    or `time_op(op, out_dir)` returns; on bad arguments 2 (one line on stderr); else (args,
    the ops asked for, OUT_DIR made)."""
    try:
        args = probe_parser(doc, known).parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    out_dir = Path(args.out_dir)
    if args.child == "warm":
        return warm(args.op, args.variant, out_dir)
    if args.child == "time":
        return time_op(args.op, out_dir)
    ops = [o for o in args.only.split(",") if o]
    bad = [o for o in ops if o not in known]
    if bad or args.jobs < 1 or args.wall <= 0:
        print(f"error: unknown operator {', '.join(bad)} (have: {', '.join(known)})" if bad
              else "error: --jobs and --wall must be positive", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    return args, ops, out_dir


def main(argv: list[str] | None = None) -> int:
    started = probe_start(__doc__, list(OPS), argv, child_warm, child_time)
    if isinstance(started, int):
        return started
    args, ops, out_dir = started
    if args.dry:
        report = dry(ops, out_dir)
        (out_dir / "dry.json").write_text(json.dumps(report, indent=1))
        if args.json:
            print(json.dumps(report, indent=1))
        else:
            for op, meta in report["variants"].items():
                for name, info in meta.items():
                    print(f"{op:7s} {name:32s} {info.get('refused') or info.get('structure')}"
                          + (f"  rules: {[(s['rule'], s['sites_taken']) for s in info.get('log', [])]}"
                             if info.get("log") else ""))
            for op, rows in report["hand"].items():
                for r in rows:
                    print(f"{op:7s} hand {r['config']:32s} smem {r['smem_bytes']:>7} fits {r['fits']}")
            for r in report["interpreter"]:
                print(f"interpret {r['op']:7s} {r['config']:28s} ok {r['ok']} {r.get('rel_err', r.get('error'))}")
            print("apis:", report["apis"])
        return 0
    if not torch.cuda.is_available():
        print("error: no CUDA GPU (use --dry on a CPU machine)", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    write_sources(ops, out_dir)
    # the longest compiles (autotuned lists) first, so the pool drains evenly
    cost = {op: json.loads((out_dir / "src" / f"{op}.json").read_text()) for op in ops}
    jobs = sorted(((op, v) for op in ops for v in callables(op, out_dir)),
                  key=lambda j: -cost[j[0]].get(j[1], {}).get("structure", {}).get("autotune_configs", 1))
    rows = run_phases(Path(__file__), out_dir, jobs, ops, args.wall, args.jobs, 0.55, t0)
    text = render(rows)
    (out_dir / "ceiling.md").write_text(
        f"# GEMM ceiling on {torch.cuda.get_device_name()} (triton {triton.__version__}, "
        f"torch {torch.__version__}), {time.monotonic() - t0:.0f} s\n\n" + text)
    print(json.dumps(rows, indent=1) if args.json else text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
