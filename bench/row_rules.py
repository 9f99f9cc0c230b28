"""The CUDA style tier's row kernels before and after the row rules, against the copy bandwidth
measured in the same process.

    python3 bench/row_rules.py --out OUT_DIR            # on a GPU (sm_80+)
    python3 bench/row_rules.py --out OUT_DIR --dry      # rewrite + NVRTC compile only (CPU)

For cu_softmax_rows, cu_layernorm and cu_rmsnorm (bench/styles/cuda) the forms timed are: the
start; `old`, the rule chain the style tier's searches kept (d800e94 / 5306ee0: row caching and
vectorized loads for softmax and RMSNorm; warp shuffles, restrict, vectorized loads and launch
bounds for LayerNorm); and `row-registers` with 2, 4 and 8 vectors per thread, alone and with
warp shuffles and launch bounds after it (`regsK`, `regsK+shfl+lb`, `regsK+shfl+lbres`: the
resident minimum; `regsKh+shfl+lb`: option `hoist`, the weight / bias loaded with the row;
`tT.regsK...`: `launch-threads{threads=T}` first, the host's block made T by the rule;
`fit.[tT.]regs0...`: the rules as a search applies them, the case's shape in the context and
`row-registers` choosing the vectors that hold the row at the launch's block; `regs0r`: its
option `reuse`, softmax's exponentials kept for the write pass; `old+t128`,
`fit.shfl+t128+regs0+lb`, `fit.regs0+shfl+tT+lb`: `launch-threads` after steps a search
keeps first, the last re-fitting the row held in registers to the smaller block;
`fit.t128.cache.vec[+regs0[+shfl]]`, `fit.t128.vec+regs0+shfl`: the chain the searches kept,
then `row-registers` taking the row from the shared copy or the vectorized passes). A sweep of the launch's block size follows for the register forms (the
vectors set so that the row fits: `bB.regsK+shfl`; where the block is a `#define` of the start,
the start's own constant is edited with it, an experiment on the kernel rather than a rule).
Each rule is applied with the passes API, with the block the host launches. Each form runs
through a copy of the start's own host module with the rewritten source (layernorm's
`experts.cudahost` host, rmsnorm's NVRTC + cuda.bindings module holding its source) except the
load_inline softmax, whose device half is compiled here with NVRTC (C linkage) and launched as
its C++ wrapper launches it (`contiguous`, `empty_like`, `<<<rows, threads, threads * 4>>>`).

Every form is checked against the case's torch reference (per-dtype tolerance of the case),
then timed end to end with `triton.testing.do_bench(..., return_mode="median")` around its run
function, with the L2 flush between calls followed by a short GPU sleep so that the host's
launch time is not timed (as the gate does). The copy bandwidth is `dst.copy_(src)` of a
buffer of half the case's bytes (read + written: the bytes a row kernel moves once), timed the
same way before and after the forms; `of_copy` = copy ms / form ms with the faster copy. Writes
OUT_DIR/result.json, result.md and each form's source.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kir  # noqa: E402
from kir.embedded import cuda_unit  # noqa: E402
from passes import Applied, PassContext, pass_from_spec  # noqa: E402
from passes.cuda.recognize import launch_block  # noqa: E402

STYLES = ROOT / "bench" / "styles" / "cuda"
OLD = {"cu_softmax_rows": ["row-cache", "vectorize-global"],
       "cu_layernorm": ["warp-shuffle-reduce", "restrict-readonly", "vectorize-global", "launch-bounds"],
       "cu_rmsnorm": ["row-cache", "vectorize-global"]}
BLOCKS = {"cu_softmax_rows": (128, 256, 512, 1024), "cu_layernorm": (128, 256, 512, 1024),
          "cu_rmsnorm": (128, 256)}  # rmsnorm's tree slots are a static [256]
"""Block sizes swept; a block each start's kernel allows."""


def with_block(text: str, block: int) -> str:
    """`text` (a host module, or a load_inline source) with its launch's 256 threads set to
    `block` (the three starts' launches, as written)."""
    for pattern in (r"(const\s+int\s+threads\s*=\s*)256\b",              # load_inline wrapper
                    r"(cudahost\.launch\(_fn\[0\],\s*M,\s*)256\b",          # experts.cudahost
                    r"(cuLaunchKernel\([^,]+,\s*\w+,\s*1,\s*1,\s*)256\b"):  # cuda.bindings
        text = re.sub(pattern, rf"\g<1>{block}", text)
    return text


def materialize(unit: Any, text: str, block: int, where: Path) -> Path:
    """A copy in `where` of the start's host module (and `.cu`) holding kernel source `text`,
    its launch set to `block` threads; returns the path of the kernel's source there (what
    the rules parse, so that they read the launch's block from the host beside it)."""
    from kir import hostlaunch  # noqa: PLC0415

    where.mkdir(parents=True, exist_ok=True)
    host_text = unit.host_path.read_text()
    if unit.held is not None:
        host_text = unit.held.splice(text)
    host_text = hostlaunch.apply(with_block(host_text, block), text)
    host = where / unit.host_path.name
    host.write_text(host_text)
    if unit.held is None:
        (where / unit.source_path.name).write_text(text)
        return where / unit.source_path.name
    return host


def chain(source: str, path: Path, specs: list[str], block: int,
          ctx: PassContext | None = None) -> tuple[str, list[str]]:
    """`source` (at `path`, its host beside it) after each pass of `specs` acted at every open
    site it takes, and what each did (applied / the first refusal). `ctx`: the context the
    passes see (default: the arch and the host's block, no shape)."""
    ir = kir.parse(source, "cuda", path=path)
    ctx = ctx or PassContext(facts={"arch": "sm_90", "block_threads": block})
    log = []
    for spec in specs:
        p = pass_from_spec(spec)
        applied, why, options = 0, "", {}
        for _ in range(8):
            for site in [s for s in p.sites(ir) if not s.present]:
                result = p.optimize(ir, site, ctx)
                if isinstance(result, Applied):
                    ir, applied, options = result.ir, applied + 1, result.options
                    break
                why = why or getattr(result, "reason", "") or getattr(result, "error", "")
            else:
                break
        chosen = "" if not options or all(f"{k}={v}".lower() in spec.lower() for k, v in options.items()) \
            else " " + json.dumps(options)
        log.append(f"{spec}: applied {applied}{chosen}" if applied else f"{spec}: {why or 'no site'}")
    return ir.text, log


def vectors_for(case: Any, block: int) -> int:
    """The fewest 16-byte vectors per thread (a power of two) holding a row of the case."""
    shape = case.SHAPES["default"]
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    need = -(-shape["N"] // (16 // size * block))
    k = 1
    while k < need:
        k *= 2
    return k


def forms(name: str, case: Any, unit: Any, block: int, work: Path) -> dict[str, dict[str, Any]]:
    """Form name -> {"source", "log", "block", "edit"} (`edit`: the start's text edited for a
    block other than its own)."""
    source = unit.source
    path = materialize(unit, source, block, work / "start")
    out: dict[str, dict[str, Any]] = {"start": {"source": source, "log": [], "block": block}}
    text, log = chain(source, path, OLD[name], block)
    out["old"] = {"source": text, "log": log, "block": block}
    for k in (2, 4, 8):
        reg, held = f"row-registers{{vectors={k}}}", f"row-registers{{vectors={k},hoist=true}}"
        for label, specs in ((f"regs{k}", [reg]),
                             (f"regs{k}+shfl+lb", [reg, "warp-shuffle-reduce", "launch-bounds"]),
                             (f"regs{k}+shfl+lbres", [reg, "warp-shuffle-reduce",
                                                      "launch-bounds{resident=true}"]),
                             (f"regs{k}h+shfl+lb", [held, "warp-shuffle-reduce", "launch-bounds"])):
            text, log = chain(source, path, specs, block)
            out[label] = {"source": text, "log": log, "block": block}
    for b in BLOCKS[name]:
        k = vectors_for(case, b)
        start, edit = with_block(source, b), None  # a load_inline source launches the kernel itself
        if re.search(r"#define\s+NT\s+256\b", source) and b != 256:
            start, edit = re.sub(r"(#define\s+NT\s+)256\b", rf"\g<1>{b}", source), f"#define NT {b}"
        at = materialize(unit, start, b, work / f"b{b}")
        for label, specs in ((f"b{b}.regs{k}+shfl", [f"row-registers{{vectors={k}}}", "warp-shuffle-reduce"]),
                             (f"b{b}.regs{k}+shfl+lb", [f"row-registers{{vectors={k}}}", "warp-shuffle-reduce",
                                                         "launch-bounds"]),
                             (f"b{b}.regs{k}h+shfl+lb", [f"row-registers{{vectors={k},hoist=true}}",
                                                          "warp-shuffle-reduce", "launch-bounds"])):
            text, log = chain(start, at, specs, b)
            out[label] = {"source": text, "log": log, "block": b, "edit": edit}
    for t in (64, 128):  # the launch-threads rule: the host's block made smaller by the rule
        k = vectors_for(case, t)
        for label, specs in ((f"t{t}.regs{k}+shfl+lb", [f"launch-threads{{threads={t}}}",
                                                        f"row-registers{{vectors={k}}}",
                                                        "warp-shuffle-reduce", "launch-bounds"]),
                             (f"t{t}.regs{k}h+shfl+lb", [f"launch-threads{{threads={t}}}",
                                                         f"row-registers{{vectors={k},hoist=true}}",
                                                         "warp-shuffle-reduce", "launch-bounds"])):
            text, log = chain(source, path, specs, block)
            out[label] = {"source": text, "log": log, "block": launched(text, path, block),
                          "host_block": block}  # the host as written; the rule asks for the block
    # the rules as a search applies them: the case's shape in the context, `row-registers`
    # choosing its vectors to fit the row at the launch's block (`fit.`), `launch-threads` first
    # where the start holds its block in a constant or reads blockDim.x
    shaped = PassContext.for_case(str(STYLES / name), tier="device")
    for t in (None, 64, 128):
        lead = [f"launch-threads{{threads={t}}}"] if t else []
        for tail, regs, specs in (
                ("+shfl+lb", "row-registers", ["warp-shuffle-reduce", "launch-bounds"]),
                ("+shfl+lbres", "row-registers", ["warp-shuffle-reduce", "launch-bounds{resident=true}"]),
                ("+shfl", "row-registers", ["warp-shuffle-reduce"]),
                ("r+shfl+lb", "row-registers{reuse=true}", ["warp-shuffle-reduce", "launch-bounds"]),
                ("r+shfl+lbres", "row-registers{reuse=true}", ["warp-shuffle-reduce",
                                                              "launch-bounds{resident=true}"])):
            label = f"fit.{f't{t}.' if t else ''}regs0{tail}"
            text, log = chain(source, path, [*lead, regs, *specs], block, shaped)
            if "reuse=true}: applied" not in " ".join(log) and regs != "row-registers":
                continue  # nothing kept: the same form as without
            out[label] = {"source": text, "log": log, "block": launched(text, path, block),
                          "host_block": block}
    for label, specs in (  # the narrower launch after steps a search keeps first
            ("old+t128", [*OLD[name], "launch-threads{threads=128}"]),
            # the chain the style tier's searches kept (the own sweep's launch first, the row
            # cached, its passes vectorized), then the row held in registers from that state
            ("fit.t128.cache.vec", ["launch-threads{threads=128}", "row-cache", "vectorize-global"]),
            ("fit.t128.cache.vec+regs0", ["launch-threads{threads=128}", "row-cache", "vectorize-global",
                                          "row-registers"]),
            ("fit.t128.cache.vec+regs0+shfl", ["launch-threads{threads=128}", "row-cache",
                                               "vectorize-global", "row-registers", "warp-shuffle-reduce"]),
            ("fit.t128.vec+regs0+shfl", ["launch-threads{threads=128}", "vectorize-global",
                                         "row-registers", "warp-shuffle-reduce"]),
            ("fit.shfl+t128+regs0+lb", ["warp-shuffle-reduce", "launch-threads{threads=128}",
                                        "row-registers", "launch-bounds"]),
            # the row held in registers first: the narrower launch re-fits its vectors
            *((f"fit.regs0+shfl+t{t}+lb", ["row-registers", "warp-shuffle-reduce",
                                           f"launch-threads{{threads={t}}}", "launch-bounds"])
              for t in (64, 128))):
        text, log = chain(source, path, specs, block, shaped)
        out[label] = {"source": text, "log": log, "block": launched(text, path, block),
                      "host_block": block}
    return out


def launched(text: str, path: Path, default: int) -> int:
    """The block a form's launches use (a rule may have changed it), else `default`."""
    threads = launch_block(kir.parse(text, "cuda", path=path)).threads
    return threads or default


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_KERNEL = r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"


def kernel_name(text: str) -> str:
    """The first kernel `text` defines (past its `__launch_bounds__`)."""
    return re.search(_KERNEL + r"(\w+)", text).group(1)


def c_linkage(device: str, kernel: str) -> str:
    """`device` with `kernel` given C linkage (NVRTC mangles a C++ kernel's name)."""
    m = re.search(_KERNEL + rf"{kernel}\b", device)
    return device[:m.start()] + 'extern "C" ' + device[m.start():]


def runner(unit: Any, form: dict[str, Any], where: Path, label: str) -> Callable[..., Any]:
    """The form's run function: the start's host with the form's source (see the module)."""
    import torch  # noqa: PLC0415

    from experts import cudahost  # noqa: PLC0415
    from gate.hostforms import device_source, nvrtc_options  # noqa: PLC0415

    block, text = form["block"], form["source"]
    if "load_inline" in unit.host_path.read_text():
        kernel = kernel_name(text)
        compiled = cudahost.compile_source(c_linkage(device_source(text), kernel), name=f"{label}.cu",
                                           options=nvrtc_options(text))
        func = cudahost.get_function(compiled, kernel)

        def run(x: Any) -> Any:
            xc = x.contiguous()
            y = torch.empty_like(xc)
            cudahost.launch(func, xc.shape[0], block, block * 4, [xc, y, xc.shape[1]],
                            torch.cuda.current_stream())
            return y
        return run
    materialize(unit, text, form.get("host_block", block), where)
    module = _load(where / unit.host_path.name, f"kl_rows_{label}")
    return module.run


def _copy_ms(nbytes: int, do_bench: Any) -> float:
    import torch  # noqa: PLC0415

    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return float(do_bench(lambda: dst.copy_(src), warmup=25, rep=100, return_mode="median"))


def _gpu_lead() -> None:
    """The L2 flush between timed calls followed by ~100 us of GPU sleep: the host issues the
    next call while the GPU sleeps, so the events enclose the kernels (as the gate times)."""
    import torch  # noqa: PLC0415
    from triton import runtime  # noqa: PLC0415

    driver = runtime.driver.active
    flush = driver.clear_cache

    def clear_cache(cache: Any) -> None:
        flush(cache)
        torch.cuda._sleep(200_000)

    driver.clear_cache = clear_cache


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--dry", action="store_true", help="rewrite and compile with NVRTC only (no GPU)")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--forms", default="", help="a regular expression: time only the forms whose "
                    "label it matches (re.search)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import gate  # noqa: PLC0415

    names = [n for n in OLD if not args.only or n in args.only.split(",")]
    record: dict[str, Any] = {"command": " ".join(["python3", "bench/row_rules.py", *(argv or sys.argv[1:])]),
                              "cases": {}}
    timing = not args.dry
    if timing:
        import torch  # noqa: PLC0415
        from triton.testing import do_bench  # noqa: PLC0415

        _gpu_lead()
        record["gpu"] = torch.cuda.get_device_name()
    for name in names:
        t0 = time.time()
        case = gate.load_case(STYLES / name / "case.py")
        module = case.module()
        unit = cuda_unit(case.start_path())
        block = (launch_block(kir.parse(unit.source, "cuda", path=unit.source_path)).threads or 256)
        found = forms(name, module, unit, block, args.out / "work" / name / "rules")
        if args.forms:
            found = {k: v for k, v in found.items() if re.search(args.forms, k)}
        rec: dict[str, Any] = {"block": block, "forms": {}}
        record["cases"][name] = rec
        src_dir = args.out / name
        src_dir.mkdir(exist_ok=True)
        shape = dict(module.SHAPES["default"])
        for label, form in found.items():
            (src_dir / f"{label}.cu").write_text(form["source"])
            entry: dict[str, Any] = {"log": form["log"], "block": form["block"]}
            if form.get("edit"):
                entry["edit"] = form["edit"]
            rec["forms"][label] = entry
            if args.dry:
                from experts import cudahost  # noqa: PLC0415
                from gate.hostforms import device_source, nvrtc_options  # noqa: PLC0415

                try:
                    cudahost.compile_source(device_source(form["source"]), name=f"{label}.cu",
                                            arch="sm_90a", options=nvrtc_options(form["source"]))
                    entry["compiles"] = True
                except Exception as exc:  # noqa: BLE001 — one form failing must not lose the others
                    entry["compiles"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        if not timing:
            print(f"{name}: {len(found)} forms written and compiled ({time.time() - t0:.1f} s)", flush=True)
            continue
        inputs = module.make_inputs(shape, 1234, "cuda")
        ref = module.reference(*inputs)
        tol = case.tolerance_for(shape["dtype"])
        nbytes = int(module.bytes_moved(shape))
        rec["bytes"] = nbytes
        rec["copy_ms"] = [_copy_ms(nbytes, do_bench)]
        rec["reference_ms"] = float(do_bench(lambda: module.reference(*inputs), warmup=25, rep=100,
                                             return_mode="median"))
        for label, form in found.items():
            entry = rec["forms"][label]
            try:
                tag = re.sub(r"\W", "_", f"{name}_{label}")
                run = runner(unit, form, args.out / "work" / name / tag, tag)
                out = run(*inputs)
                torch.cuda.synchronize()
                err = float((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30))
                entry["rel_err"] = err
                entry["close"] = bool(torch.allclose(out.float(), ref.float(), atol=tol, rtol=tol))
                entry["ms"] = float(do_bench(lambda run=run: run(*inputs), warmup=25, rep=100,
                                             return_mode="median"))
            except Exception as exc:  # noqa: BLE001
                entry["error"] = f"{type(exc).__name__}: {exc}"
                entry["trace"] = traceback.format_exc()[-1500:]
            print(f"{name} {label}: {entry.get('ms')} ms close={entry.get('close')} "
                  f"{entry.get('error', '')}", flush=True)
        rec["copy_ms"].append(_copy_ms(nbytes, do_bench))
        copy = min(rec["copy_ms"])
        rec["copy_tbs"] = nbytes / copy * 1e-9
        rec["reference_of_copy"] = copy / rec["reference_ms"]
        for entry in rec["forms"].values():
            if entry.get("ms"):
                entry["of_copy"] = copy / entry["ms"]
        rec["wall_s"] = time.time() - t0
        (args.out / "result.json").write_text(json.dumps(record, indent=1))
    (args.out / "result.json").write_text(json.dumps(record, indent=1))
    (args.out / "result.md").write_text(table(record))
    print(table(record))
    return 0


def table(record: dict[str, Any]) -> str:
    lines = [f"Command: `{record['command']}`", ""]
    for name, rec in record["cases"].items():
        copy = min(rec.get("copy_ms") or [0]) or None
        lines += [f"## {name} (copy {copy} ms, torch {rec.get('reference_ms')} ms, "
                  f"torch of copy {rec.get('reference_of_copy')})", "",
                  "| form | block | ms | of copy | close | rel err | what the rules did |",
                  "|---|---:|---:|---:|---|---:|---|"]
        for label, e in rec["forms"].items():
            ms = f"{e['ms']:.4f}" if e.get("ms") else e.get("error", "")[:60]
            frac = f"{e['of_copy']:.3f}" if e.get("of_copy") else ""
            err = f"{e['rel_err']:.2g}" if "rel_err" in e else ""
            lines.append(f"| {label} | {e['block']} | {ms} | {frac} | {e.get('close', e.get('compiles', ''))} "
                         f"| {err} | {'; '.join(e['log'])}{' (' + e['edit'] + ')' if e.get('edit') else ''} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
