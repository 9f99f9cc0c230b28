"""Device probe: a persistent tile walk around a kernel whose K loop is split in two.

The persistent-grid rewrite (alone or bundled with tensor descriptors) of a triangular GEMM
whose K loop the causal-block-skip rule split into an unmasked run and a diagonal run gave
wrong tiles on an H200 at 4096 x 4096, while the interpret tier passes the same text at
multi-tile ragged shapes (tests/test_styles_split_loop_persist.py). This script rebuilds the
chain from the style start kernel with the shipped cards (deterministic rules, no sweep) and
runs each variant at the device shape for several block configurations and seeds against
torch, counting the wrong output tiles; variants isolate the cause:

- `split`: staged K loop, grouped order, block skip (not persistent; the control that
  passed);
- `split+persistent`, `split+persistent+tma`: the rejected rewrites;
- `single+persistent`: the same without the block skip (one K loop), persistent;
- `split+persistent, inner num_stages=1` / `outer num_stages=1`: the same text with the
  inner K loops or the tile walk marked not to be software-pipelined by Triton.

    . bench/wheels.sh && python3 bench/persist_split_loops.py OUTDIR

Writes OUTDIR/persist_split_loops.json and prints one line per run. Needs a CUDA GPU.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STYLE = ROOT / "bench" / "styles" / "nw_trmm_where"
CONFIGS = ((128, 256, 64, 8, 3), (64, 128, 64, 4, 3), (128, 64, 64, 4, 4), (64, 64, 64, 4, 3))
SEEDS = (0, 1, 2)
SIZE = 4096
# the device search's order: K loop staged, tiles grouped, then the K loop split
SPLIT = ("software-pipelining", "grouped-ordering", "causal-block-skip")


def _step(text: str, pass_name: str) -> str:
    """`text` rewritten by the first shipped Triton card of `pass_name` whose rule acts on it."""
    import kir
    from lineage.moves import feature_appears, materializations
    from lineage.shipped import open_library
    from passes.rewriter import DeterministicRewriter

    ir = kir.parse(text, "triton")
    for card in open_library(None)[0].cards():
        if card.pass_name != pass_name or ".triton." not in card.id:
            continue
        for made in materializations(card, ir, DeterministicRewriter(), None, sweeps=False,
                                     transplants=False):
            if made.ok and feature_appears(pass_name, ir, made.ir):
                return made.ir.unparse()
    raise SystemExit(f"no {pass_name} card acts on the kernel")


def _chain(*passes: str) -> str:
    text = (STYLE / "tri_where.py").read_text()
    for name in passes:
        text = _step(text, name)
    return text


def _unpipelined(text: str, depth: str) -> str:
    """`text` with its nested (`inner`) or outermost (`outer`) kernel loops written as
    `tl.range(..., num_stages=1)`."""
    indent = r" {8,}" if depth == "inner" else r" {4}"
    return re.sub(rf"(\n{indent}for \w+ in )(?:tl\.)?range\((.*?)(?:, num_stages=\d+)?\):",
                  r"\1tl.range(\2, num_stages=1):", text)


def _load(text: str, tag: str):
    path = Path(tempfile.mkdtemp()) / f"{tag}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"probe_{tag}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _configured(text: str, cfg: tuple) -> str:
    tm, tn, tk, warps, stages = cfg
    return re.sub(r"TM=32, TN=32, TK=32", f"TM={tm}, TN={tn}, TK={tk}, num_warps={warps}, "
                  f"num_stages={stages}", text)


def main(out: Path) -> None:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    split = _chain(*SPLIT)
    # the walk before the split: persistent-grid refuses a kernel whose loop the tile sets
    persistent = _chain(*SPLIT[:-1], "persistent-grid", SPLIT[-1])
    variants = {
        "split": split,
        "split+persistent": persistent,
        "split+persistent+tma": _step(persistent, "tma-descriptors"),
        "single+persistent": _chain(*SPLIT[:-1], "persistent-grid"),
        "split+persistent, inner num_stages=1": _unpipelined(persistent, "inner"),
        "split+persistent, outer num_stages=1": _unpipelined(persistent, "outer"),
    }
    (out / "variants").mkdir(exist_ok=True)
    rows = []
    for k, (name, text) in enumerate(variants.items()):
        (out / "variants" / f"{k}.py").write_text(f"# {name}\n{text}")
        for cfg in CONFIGS:
            mod = _load(_configured(text, cfg), f"v{k}_{'_'.join(map(str, cfg))}")
            for seed in SEEDS:
                g = torch.Generator(device="cuda").manual_seed(seed)
                a = torch.randn(SIZE, SIZE, generator=g, device="cuda").half()
                b = torch.randn(SIZE, SIZE, generator=g, device="cuda").half()
                ref = torch.matmul(torch.tril(a).float(), b.float())
                row = {"variant": name, "config": cfg, "seed": seed}
                try:
                    t0 = time.time()
                    c = mod.run(a, b).float()
                    torch.cuda.synchronize()
                    err = (c - ref).norm() / ref.norm()
                    bad = ((c - ref).abs() > 0.05 * ref.abs().max()).view(
                        SIZE // cfg[0], cfg[0], SIZE // cfg[1], cfg[1]).any(3).any(1)
                    row.update(rel_err=float(err), wrong_tiles=int(bad.sum()),
                               first_wrong=[list(map(int, t)) for t in bad.nonzero()[:4]],
                               s=round(time.time() - t0, 2))
                except Exception as exc:  # noqa: BLE001 - a compile failure is a result here
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                rows.append(row)
                print(json.dumps(row), flush=True)
    (out / "persist_split_loops.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: persist_split_loops.py OUTDIR", file=sys.stderr)
        sys.exit(2)
    main(Path(sys.argv[1]))
