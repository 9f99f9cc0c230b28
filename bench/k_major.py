"""Times the k-major-operands rule on the KernelBench tier's fp32 GEMM starts (device).

For the square NN GEMM start (`bench/kernelbench/level1/1_...`) at N^3 and the batched start
(`level1/3_...`), and the irregular-shape start (`level1/8_...`, ragged K): the start as written, the rule's output (`passes.triton.layout`, applied at
every operand it takes), each of them under the generic autotune list the search composes the
rule with (`lineage.control.autotune_control`), the NT twin (`level1/17_...`, B given as (N, K))
as written and swept, and torch with TF32 allowed. Every row is the median of
`triton.testing.do_bench` around the module's `run` end to end (the rule's copy included), after
a first call that compiles and autotunes, with the output's error against fp32 torch. Triton's
`tl.dot` on fp32 is tf32 by default. Rows go to stdout and DIR/rows.jsonl; the kernels timed to
DIR/src/.

    python3 bench/k_major.py --out DIR [--n 4096] [--batched 128,512,1024,2048]
                             [--irregular 8205,2949,5921] [--dry]

For the irregular shape each kernel is also timed with its 2-D inputs first copied, inside the
timed call, into buffers whose rows start on 128 bytes ("pitched": what an aligned pitch is worth
for an operand the rule does not copy).

`--dry` writes the sources and checks the rule took them, without a GPU.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STARTS = ROOT / "bench/kernelbench/level1"
SQUARE = STARTS / "1_Square_matrix_multiplication_.py"
NT = STARTS / "17_Matmul_with_transposed_B.py"
BATCHED = STARTS / "3_Batched_matrix_multiplication.py"
IRREGULAR = STARTS / "8_Matmul_with_irregular_shapes_.py"


def rule_output(source: str) -> str:
    """`source` with k-major-operands applied at every operand it takes (the search's
    `lineage.moves.rule_moves`); exits 2 where it takes none."""
    import kir
    from lineage.moves import rule_moves

    made = rule_moves(kir.parse(source, "triton")).get("k-major-operands")
    if made is None:
        sys.exit("k-major-operands takes no operand of the start")
    return made[0].unparse()


def variants(start: Path, twin: Path | None) -> dict[str, str]:
    """Name -> source of every kernel timed for one start."""
    from lineage.control import autotune_control

    text = start.read_text()
    ruled = rule_output(text)
    out = {"start": text, "rule": ruled, "start+sweep": autotune_control(text),
           "rule+sweep": autotune_control(ruled)}
    if twin is not None:
        out["nt"] = twin.read_text()
        out["nt+sweep"] = autotune_control(out["nt"])
    return out


def load(path: Path):  # noqa: ANN201 — a module
    spec = importlib.util.spec_from_file_location(path.stem.replace("+", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn, reference, torch, triton) -> dict:  # noqa: ANN001
    """Median ms of `fn()` after one call, and its error against `reference`."""
    got = fn()
    torch.cuda.synchronize()
    err = ((got.float() - reference).abs().max() / reference.abs().max()).item()
    ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    return {"ms": round(ms, 4), "max_rel_err": float(f"{err:.3g}")}


def pitched(x, torch):  # noqa: ANN001, ANN201 — a tensor
    """A 2-D `x` copied into a buffer whose rows start on 128 bytes (a view of its columns)."""
    run = 128 // x.element_size()
    buf = torch.empty((x.shape[0], (x.shape[1] + run - 1) // run * run), device=x.device, dtype=x.dtype)
    buf[:, :x.shape[1]].copy_(x)
    return buf[:, :x.shape[1]]


def measure(problem: str, sources: dict[str, str], make_inputs, flops: float, out: Path,
            torch_fn, pitch: bool = False) -> list[dict]:  # noqa: ANN001
    import torch
    import triton

    (out / "src").mkdir(parents=True, exist_ok=True)
    a, b = make_inputs(torch)
    torch.backends.cuda.matmul.allow_tf32 = False
    reference = torch_fn(a, b).float()
    rows = []
    for name, source in [*sources.items(), ("torch-tf32", None)]:
        row = {"problem": problem, "kernel": name}
        try:
            if source is None:
                torch.backends.cuda.matmul.allow_tf32 = True
                row.update(timed(lambda: torch_fn(a, b), reference, torch, triton))
                torch.backends.cuda.matmul.allow_tf32 = False
            else:
                path = out / "src" / f"{problem}_{name.replace('+', '_')}.py"
                path.write_text(source)
                module = load(path)
                args = (a, b.transpose(-1, -2).contiguous()) if name.startswith("nt") else (a, b)
                row.update(timed(lambda: module.run(*args), reference, torch, triton))
                if pitch:
                    row["pitched"] = timed(lambda: module.run(*(pitched(x, torch) for x in args)),
                                           reference, torch, triton)
            row["tflops"] = round(flops / row["ms"] / 1e9, 1)
        except Exception as exc:  # noqa: BLE001 — a row says why it has no time
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--batched", default="128,512,1024,2048", help="batch,M,K,N")
    parser.add_argument("--irregular", default="8205,2949,5921", help="M,K,N")
    parser.add_argument("--dry", action="store_true")
    args = parser.parse_args()
    try:
        batch, m, k, n = (int(x) for x in args.batched.split(","))
        im, ik, in_ = (int(x) for x in args.irregular.split(","))
    except ValueError:
        print("--batched takes four integers (batch,M,K,N), --irregular three (M,K,N)", file=sys.stderr)
        return 2
    square, batched = variants(SQUARE, NT), variants(BATCHED, None)
    irregular = variants(IRREGULAR, None)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.dry:
        for problem, sources in (("square", square), ("batched", batched), ("irregular", irregular)):
            for name, source in sources.items():
                (args.out / f"{problem}_{name.replace('+', '_')}.py").write_text(source)
        print(json.dumps({"dry": True, "square": list(square), "batched": list(batched),
                          "irregular": list(irregular)}))
        return 0
    import torch

    size = args.n
    rows = measure("square", square, lambda t: (t.randn(size, size, device="cuda"),
                                                 t.randn(size, size, device="cuda")),
                   2.0 * size ** 3, args.out, torch.matmul)
    rows += measure("batched", batched, lambda t: (t.randn(batch, m, k, device="cuda"),
                                                   t.randn(batch, k, n, device="cuda")),
                    2.0 * batch * m * n * k, args.out, torch.bmm)
    rows += measure("irregular", irregular, lambda t: (t.randn(im, ik, device="cuda"),
                                                       t.randn(ik, in_, device="cuda")),
                    2.0 * im * ik * in_, args.out, torch.matmul, pitch=True)
    import triton

    meta = {"triton": triton.__version__, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(), "square_n": size, "batched": [batch, m, k, n],
            "irregular": [im, ik, in_]}
    with open(args.out / "rows.jsonl", "w") as fh:
        for row in [meta, *rows]:
            fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
