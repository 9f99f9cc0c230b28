"""Users' tiled GEMM kernels before and after `gemm-schedule`, against cuBLAS, in one process.

    python3 bench/gemm_schedule.py --out OUT_DIR            # on a GPU (sm_80+)
    python3 bench/gemm_schedule.py --out OUT_DIR --dry      # rewrite + NVRTC compile only (CPU)
    python3 bench/gemm_schedule.py --out OUT_DIR --starts cu_mm_reg1d,cu_mm_bt --forms reach

The starts: the tutorial 2-D block-tiling GEMM (tests/data/microkernels/blocktile_bf16.cu)
with a C++ wrapper beside it that launches it on a (N / 128, M / 128) grid of 256 threads, as a
load_inline source holds it, and every GEMM of the CUDA style tier (bench/styles/cuda/cu_mm_*:
a `.cu` with its host module, or a host module holding the kernel's source as a string — CuPy
RawKernel, load_inline). For each, the rule is applied with the block the host launches; the
rewritten kernel replaces the start's source in a copy of its host module, so the start and
the rewrite run through the same host code, except where the host would build a C++ extension
per form (load_inline) and for the tutorial: there the device half is compiled with NVRTC (the
kernel given C linkage, as a C++ name is mangled) and launched here with the dynamic shared
memory the source's own `<<<...>>>` launch passes, after the limit its wrapper raises. All are
checked against the case's reference, then cuBLAS (torch.matmul), the start and the rule's
forms are timed with `triton.testing.do_bench(..., return_mode="median")` (cuBLAS again last;
the better of the two cuBLAS times is the reference): +mma and +mma_bk16 (32- and 16-deep
slices), +mma_deep (64-deep slices, four slots of dynamic shared memory); on sm_90a +wgmma,
+wgmma_overlap (one K step's MMAs in flight), +wgmma_wide (128x256 tiles), and the deep wgmma
forms +wgmma_deep3, +wgmma_deep, +wgmma_deep5 (3, 4, 5 slots of 128x128x64 slices) and
+wgmma_deep_wide3, +wgmma_deep_wide (3, 4 slots of 128x256x64 slices), +wgmma_deep_ws3 and
+wgmma_deep_ws (3, 4 slots; specialized warps: one warpgroup fills the ring). The deep forms edit
the launch in the kernel's own source (load_inline, the tutorial's wrapper), or ask the start's
Python host module for it (CuPy RawKernel, experts.cudahost and cuLaunchKernel hosts: the copy of
the host the form runs through gets the launch edits, `kir.hostlaunch`); elsewhere they are
refused with the reason. Starts whose forms include deep ones are measured first; `--budget`
seconds after the start no further start is begun (30 s later, no further form is timed; 150 s
later the run stops, exit code 3, with what it measured written: each form's time is written
as it is measured, `partial_ms`). Writes result.json,
result.md and the rewritten sources. `--dry` also checks that each kernel launched here is
found by its plain name in the PTX and that each deep form's launch passes its bytes after
raising the limit (a hosted form: that its host is asked for the bytes and its launch is edited),
and records each form's registers and spills. `--starts` and `--forms` (FORMS' names; `reach`:
the rule's `Pass.reach` forms) choose what is rewritten and timed; `--rounds R` times cuBLAS
and every form R times in turn and keeps each one's median (the start is timed once).
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kir  # noqa: E402
from passes import PassContext, get_pass  # noqa: E402
from passes.cuda.recognize import launch_block  # noqa: E402

TUTORIAL = ROOT / "tests" / "data" / "microkernels" / "blocktile_bf16.cu"
TUTORIAL_HOST = """
// the host half, as a load_inline source holds it beside its kernel
void launch_blocktile(int M, int N, int K, float alpha, const __nv_bfloat16* A,
                      const __nv_bfloat16* B, float beta, __nv_bfloat16* C) {
  dim3 grid((N + 127) / 128, (M + 127) / 128);
  sgemm_blocktile<<<grid, 256>>>(M, N, K, alpha, A, B, beta, C);
}
"""
STYLES = ROOT / "bench" / "styles" / "cuda"


def embedded(py_text: str) -> tuple[str, tuple[int, int]] | None:
    """The CUDA source a host module holds as a string literal, and the literal's span."""
    tree = ast.parse(py_text)
    lines = py_text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                "__global__" in node.value:
            a = starts[node.lineno - 1] + node.col_offset
            b = starts[node.end_lineno - 1] + node.end_col_offset
            return node.value, (a, b)
    return None


FORMS = {"wgmma_deep_wide_tma_c4": {"wgmma": True, "deep": True, "wide": True, "producer": True,
                                    "tma": True, "consumers": 4},
         "wgmma_deep_wide_tma_c4s4": {"wgmma": True, "deep": True, "wide": True,
                                      "producer": True, "tma": True, "consumers": 4, "stages": 4},
         "wgmma_deep_wide_tma": {"wgmma": True, "deep": True, "wide": True, "producer": True,
                                 "tma": True},
         "wgmma_deep_wide_tma3": {"wgmma": True, "deep": True, "wide": True, "producer": True,
                                  "tma": True, "stages": 3},
         "wgmma_deep_wide_tma_x": {"wgmma": True, "deep": True, "wide": True, "producer": True,
                                   "tma": True, "exchange": True},
         "wgmma_deep_wide_tma_c4_x": {"wgmma": True, "deep": True, "wide": True,
                                      "producer": True, "tma": True, "consumers": 4,
                                      "exchange": True},
         "wgmma_deep_tma_pp": {"wgmma": True, "deep": True, "wide": False, "producer": True,
                               "tma": True, "pingpong": True},
         "wgmma_deep_tma_pp6": {"wgmma": True, "deep": True, "wide": False, "producer": True,
                                "tma": True, "pingpong": True, "stages": 6},
         "wgmma_deep_wide_tma_r": {"wgmma": True, "deep": True, "wide": True, "producer": True,
                                   "tma": True, "registers": True},
         "wgmma_deep_wide_tma_c4_r": {"wgmma": True, "deep": True, "wide": True,
                                      "producer": True, "tma": True, "consumers": 4,
                                      "registers": True},
         "wgmma_deep_wide_p": {"wgmma": True, "deep": True, "wide": True, "producer": True},
         "wgmma_deep_p": {"wgmma": True, "deep": True, "producer": True},
         "wgmma_deep_wide_p3": {"wgmma": True, "deep": True, "wide": True, "producer": True,
                                "stages": 3},
         "mma": {}, "mma_bk16": {"bk": 16}, "mma_deep": {"deep": True},
         "wgmma": {"wgmma": True},
         "wgmma_overlap": {"wgmma": True, "overlap": True},
         "wgmma_wide": {"wgmma": True, "wide": True},
         "wgmma_deep3": {"wgmma": True, "deep": True, "stages": 3},
         "wgmma_deep": {"wgmma": True, "deep": True},
         "wgmma_deep5": {"wgmma": True, "deep": True, "stages": 5},
         "wgmma_deep_wide3": {"wgmma": True, "deep": True, "wide": True, "stages": 3},
         "wgmma_deep_wide": {"wgmma": True, "deep": True, "wide": True},
         "wgmma_deep_ws3": {"wgmma": True, "deep": True, "specialize": True, "stages": 3},
         "wgmma_deep_ws": {"wgmma": True, "deep": True, "specialize": True}}
"""The rule's forms timed: mma.sync on 32- and 16-deep slices and on 64-deep slices in dynamic
shared memory (any sm_80+); wgmma (sm_90a) on 128x128 tiles (K steps one after another, or
overlapping), on 128x256 tiles, and the deep forms (64-deep 128-byte swizzled slices in 3 to 5
slots of dynamic shared memory, one K step in flight) on both tiles, the last two with
specialized warps (one warpgroup fills the ring, the others multiply; mbarriers hand the slots
over). First, +wgmma_deep_wide_tma_c4: the TMA form below on a block of two warpgroups with two
more that multiply (four 64x128 warpgroups over the 128x256 tile, each half of them running the
kernel's body for its half of the tile as a block of the launch's size; refused on other
blocks): 3 slots and one exchange of whole blocks the halves take in turn; +..._c4s4: 4 slots
and an exchange of row chunks per half. Then (timed first on a start whose launch is in its own source, refused elsewhere): the
TMA forms (+wgmma_deep_wide_tma, 4 slots, and +wgmma_deep_wide_tma3, 3 slots: the producer form
below with each slot filled by one thread's TMA copies from tensor maps the launch passes, built
here as the source's own launch builds them; `_x`: where the kernel's threads each hold one
output and run as virtual threads, their products passed through the exchange in shared memory
instead of the body run once per cell of the fragments, as the rule did before that; `_pp`, `_pp6` (4 or 6 slots): 128x128
tiles, each of the two multiplying warpgroups holding a whole one and taking the block's tiles in
turn with the other, so that one writes its tile while the other multiplies (refused where the
body does not run once per cell); `_r`: the
body run once per cell of the thread's own fragment registers, where the rule otherwise stages
each warp's fragments through a slab of shared memory and runs it for the slab's cells in row
order, so that the user's stores coalesce), then the producer forms, whose launch grows by a warpgroup that only fills the ring, so that the launch's
own warpgroups all multiply (+wgmma_deep_wide_p: 128x256 tiles, two 64x256 warpgroups, 4 slots;
+wgmma_deep_p: 128x128 tiles; +wgmma_deep_wide_p3: 3 slots and a whole-block exchange)."""
SM90_FORMS = tuple(f for f in FORMS if f.startswith("wgmma"))


def rewrite(source: str, block: tuple[int, int, int] | None, arch: str, form: str = "mma",
            path: Path | None = None) -> tuple[str, dict] | str:
    """The rule's output in `form` and its site's detail, or its refusal; `path`: where the
    source is (a `.cu` with its host module beside it, or the host module holding it), so that
    the deep forms can ask that host for their launch."""
    rule = get_pass("gemm-schedule").from_options(
        {"block": f"{block[0]}x{block[1]}" if block else "", **FORMS[form]})
    ir = kir.parse(source, "cuda", path=str(path) if path is not None else None)
    sites = [s for s in rule.sites(ir) if not s.present]
    if not sites:
        return "gemm-schedule finds no site"
    if "refused" in sites[0].detail:
        return f"gemm-schedule refused: {sites[0].detail['refused']}"
    result = rule.optimize(ir, sites[0], PassContext(facts={"arch": arch}))
    if not result.ok:
        return f"gemm-schedule refused: {getattr(result, 'reason', result)}"
    return result.ir.text, dict(sites[0].detail)


def style_starts() -> list[dict[str, Any]]:
    """Each CUDA style GEMM: its case, start source, host text and how to rebuild the host."""
    out = []
    for case_dir in sorted(STYLES.glob("cu_mm_*")):
        case = _load(case_dir / "case.py", f"kl_case_{case_dir.name}")
        start = case_dir / case.START
        if start.suffix == ".cu":
            host = start.with_suffix(".py")
            out.append({"name": case_dir.name, "case": case, "source": start.read_text(),
                        "host": host, "host_text": host.read_text(), "kind": "cu"})
        else:
            text = start.read_text()
            found = embedded(text)
            if found is None:
                continue
            out.append({"name": case_dir.name, "case": case, "source": found[0], "host": start,
                        "host_text": text, "kind": "py", "span": found[1]})
    return out


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def rebuilt_host(start: dict[str, Any], text: str, where: Path) -> Path:
    """A copy of the start's host module in `where` whose kernel source is `text`."""
    from kir import hostlaunch  # noqa: PLC0415

    where.mkdir(parents=True, exist_ok=True)
    host = where / start["host"].name
    if start["kind"] == "cu":
        # the launches edited as the source's host-launch line asks (the deep forms)
        host.write_text(hostlaunch.apply(start["host_text"], text))
        (where / start["host"].with_suffix(".cu").name).write_text(text)
    else:
        a, b = start["span"]
        host_text = start["host_text"]
        rebuilt = host_text[:a] + repr(text) + host_text[b:]
        # an extension built under the start's name would be the start's again in this process
        rebuilt = re.sub(r"\bname\s*=\s*([\"'])(\w+)\1", rf"name=\1\2_{where.name}\1", rebuilt)
        host.write_text(hostlaunch.apply(rebuilt, text))
    return host


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--dry", action="store_true", help="rewrite and compile only (no GPU)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="times each form and cuBLAS this many times in turn (the start once); "
                         "each time is the median over the rounds")
    ap.add_argument("--budget", type=float, default=200.0,
                    help="seconds after which no further start is measured")
    ap.add_argument("--starts", default="",
                    help="comma-separated starts to measure (tutorial_blocktile, cu_mm_*; "
                         "default: all)")
    ap.add_argument("--forms", default="",
                    help="comma-separated forms to apply (names of FORMS; 'reach': the rule's "
                         "fullest forms, Pass.reach; default: all)")
    args = ap.parse_args(argv)
    try:
        chosen = chosen_forms(args.forms)
    except ValueError as exc:
        print(f"gemm_schedule: {exc}", file=sys.stderr)
        return 2
    wanted = {n for n in args.starts.split(",") if n}
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.time()
    arch = "sm_90a"
    if not args.dry:
        from experts import cudahost  # noqa: PLC0415

        arch = cudahost.default_arch()
    ctx_arch = "sm_90" if arch.startswith("sm_9") else arch.rstrip("a")
    record: dict[str, Any] = {"size": args.size, "arch": arch, "starts": {}}
    work = Path(tempfile.mkdtemp(prefix="kl_gemm_schedule_"))
    entries: dict[str, dict[str, Any]] = {}
    # the tutorial start (no host module: launched here)
    forms = [f for f in chosen if arch.startswith("sm_90") or f not in SM90_FORMS]
    if not wanted or "tutorial_blocktile" in wanted:
        entries["tutorial_blocktile"] = {"source": TUTORIAL.read_text() + TUTORIAL_HOST,
                                         "block": (256, 1, 1)}
    for start in style_starts():
        if wanted and start["name"] not in wanted:
            continue
        block = launch_block(kir.parse(start["source"], "cuda"), host=start["host_text"]).dims
        entries[start["name"]] = {"source": start["source"], "block": block, "start": start}
    missing = wanted - set(entries)
    if missing:
        print(f"gemm_schedule: no start named {', '.join(sorted(missing))}", file=sys.stderr)
        return 2
    for name, e in entries.items():
        (args.out / f"{name}.start.cu").write_text(e["source"])
        e["forms"], refused = {}, {}
        where = None
        if "start" in e:  # its file: the deep forms ask its host module for their launch
            where = (e["start"]["host"].with_suffix(".cu") if e["start"]["kind"] == "cu"
                     else e["start"]["host"])
        for form in forms:
            got = rewrite(e["source"], e["block"], ctx_arch, form, where)
            if isinstance(got, str):
                refused[form] = got
                print(f"{name} +{form}: {got}", flush=True)
                continue
            e["forms"][form] = got
            (args.out / f"{name}.gemm_schedule.{form}.cu").write_text(got[0])
            print(f"{name} +{form}: rewritten ({got[1]})", flush=True)
        record["starts"][name] = {"block": e["block"], "refused": refused,
                                  "site": next((d for _, d in e["forms"].values()), None)}
    # the starts with deep forms first (the budget may end the run), the rest as listed
    entries = dict(sorted(entries.items(), key=lambda kv: not any(
        FORMS[f].get("deep") for f in kv[1]["forms"])))
    if args.dry:
        return _dry(args, entries, record)
    # a kernel that never finishes must not hold the GPU: what was measured is on disk already
    watchdog = threading.Timer(args.budget + 150, _give_up, (args.out,))
    watchdog.daemon = True
    watchdog.start()
    _measure(args, entries, record, work, began)
    watchdog.cancel()
    return 0


def chosen_forms(spec: str) -> list[str]:
    """The forms `--forms` names, in FORMS' order ("reach": the rule's `Pass.reach` forms);
    every form where `spec` is empty. ValueError for an unknown name."""
    if not spec:
        return list(FORMS)
    names: set[str] = set()
    for name in (n.strip() for n in spec.split(",") if n.strip()):
        if name == "reach":
            reach = [dict(r) for r in get_pass("gemm-schedule").reach]
            names |= {f for f, options in FORMS.items() if options in reach}
        elif name in FORMS:
            names.add(name)
        else:
            raise ValueError(f"unknown form {name!r} (reach, {', '.join(FORMS)})")
    return [f for f in FORMS if f in names]


def _give_up(out: Path) -> None:
    print(f"gemm_schedule: still running 150 s past the budget; stopping (results so far in "
          f"{out / 'result.json'})", flush=True)
    os._exit(3)


def direct(e: dict[str, Any]) -> bool:
    """Whether a start is launched here (the tutorial, a host building a C++ extension)."""
    return "start" not in e or "load_inline" in e["start"]["host_text"]


def direct_source(text: str, kernel: str) -> str:
    """The device half of `text` (`gate.hostforms.device_source`) with `kernel` given C
    linkage, so that `cuModuleGetFunction` finds it by its plain name (NVRTC mangles a C++
    kernel's name)."""
    from gate.hostforms import device_source  # noqa: PLC0415
    from passes.cuda._c import CSource, functions  # noqa: PLC0415

    device = device_source(text)
    fn = next(f for f in functions(CSource(kir.parse(device, "cuda")))
              if f.is_kernel and f.name == kernel)
    head = max(device.rfind(c, 0, fn.name_start) for c in ";}") + 1
    at = device.find("__global__", head, fn.name_start)
    if at < 0 or re.search(r'extern\s*"C"', device[head:fn.name_start]):
        return device
    return device[:at] + 'extern "C" ' + device[at:]


def host_launch(text: str, kernel: str) -> tuple[int, int]:
    """(the dynamic shared memory the source's own `<<<...>>>` launches of `kernel` pass, the
    limit its host half raises for it first); (0, 0) for a source that launches it elsewhere."""
    from gate.hostforms import chevron_launches, dynamic_shared_limits  # noqa: PLC0415

    passed = [c.shared_bytes or 0 for calls in chevron_launches(text).values()
              for c in calls if c.kernel == kernel]
    return max(passed, default=0), dynamic_shared_limits(text).get(kernel) or 0


def launched_block(text: str, kernel: str, default: tuple[int, int, int]
                   ) -> tuple[int, int, int]:
    """The block the source's own `<<<grid, dim3(x, y, z), ...>>>` launches of `kernel` pass
    (the producer forms of gemm-schedule write it so: the launch's block and a warpgroup),
    else `default` (the block the start's host launches)."""
    from gate.hostforms import _split_top  # noqa: PLC0415

    found = set()
    for m in re.finditer(rf"\b{re.escape(kernel)}\s*<<<(.*?)>>>", text, re.S):
        config = _split_top(m.group(1))
        block = re.fullmatch(r"dim3\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)",
                             config[1].strip()) if len(config) > 1 else None
        if block is not None:
            found.add(tuple(int(v) for v in block.groups()))
    return found.pop() if len(found) == 1 else default


def persistent_grid(text: str, kernel: str, grid: tuple[int, int, int], func: Any,
                    block: tuple[int, int, int], shared: int) -> tuple[int, int, int]:
    """The grid the source's own launches of `kernel` would launch for `grid`: where they pass
    it through gemm-schedule's `kl_gs_grid` (a persistent grid), one row of as many blocks as the
    device holds at once (its SMs times the kernel's occupancy), as that helper computes it;
    else `grid`."""
    if not re.search(rf"\b{re.escape(kernel)}\s*<<<\s*kl_gs_grid\(", text):
        return grid
    from cuda.bindings import driver as drv  # noqa: PLC0415

    err, dev = drv.cuCtxGetDevice()
    err2, sms = drv.cuDeviceGetAttribute(
        drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
    err3, per = drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        func, block[0] * block[1] * block[2], shared)
    if int(err) or int(err2) or int(err3) or sms <= 0 or per <= 0:
        return grid
    most = int(sms) * int(per)
    return (max(most // grid[2], 1), 1, grid[2]) if grid[0] * grid[1] * grid[2] > most else grid


def schedule_facts(text: str, kernel: str) -> dict[str, Any] | None:
    """What gemm-schedule recorded in `kernel` of `text` (its `// gemm-schedule: {...}` line),
    or None where the kernel is not in the rule's form."""
    from passes.cuda._gemm_text import MARK  # noqa: PLC0415

    for line in text.splitlines():
        at = line.find(MARK + "{")
        if at >= 0 and f'"kernel": {json.dumps(kernel)}' in line and '"launch"' not in line:
            return json.loads(line[at + len(MARK):])
    return None


def tensor_maps(facts: dict[str, Any], names: list[str], args: list[Any]) -> Any:
    """The TMA form's `kl_gs_maps` argument for a launch passing `args` for the kernel's
    parameters `names`: both operands' tensor maps encoded with the driver's
    cuTensorMapEncodeTiled as the source's own launch encodes them, `ok` only where both were
    (else the kernel fills the ring with cp.async): the host helper's encoding
    (`kir.hostlaunch`), passed by value (`getPtr`)."""
    from kir import hostlaunch  # noqa: PLC0415

    helpers = hostlaunch.helpers()
    tma = {"dtype": facts["dtype"], "params": [[n, 8] for n in names], "maps": facts["tma"]}
    return helpers["_KlHostBytes"](helpers["_kl_host_maps"](tma, list(args)))


def launch_args(text: str, kernel: str, args: list[Any]) -> list[Any]:
    """The arguments a launch of `kernel` in `text` passes for `args` (the start's): those, and
    for gemm-schedule's TMA form the tensor maps after them."""
    facts = schedule_facts(text, kernel)
    if not facts or "tma" not in facts:
        return list(args)
    from gate.hostforms import device_source  # noqa: PLC0415
    from passes.cuda._tree import Scope  # noqa: PLC0415
    from passes.cuda.recognize import _parameter_names  # noqa: PLC0415

    ir = kir.parse(device_source(text), "cuda")
    names = _parameter_names(ir, Scope(ir).functions[kernel])
    return list(args) + [tensor_maps(facts, names, args)]


def _dry(args: argparse.Namespace, entries: dict[str, dict[str, Any]], record: dict[str, Any]
         ) -> int:
    """Every form compiled with NVRTC for sm_90a (as the GPU would load it, for the starts
    launched here), and the deep forms' launch edits read back."""
    from experts import cudahost  # noqa: PLC0415
    from gate.hostforms import device_source, nvrtc_options  # noqa: PLC0415
    from kir import hostlaunch  # noqa: PLC0415

    failed = []
    for name, e in entries.items():
        for form, (text, detail) in e["forms"].items():
            kernel = detail["kernel"]
            here = direct(e)
            compiled = cudahost.compile_source(
                direct_source(text, kernel) if here else device_source(text),
                name=f"{name}_{form}.cu", arch="sm_90a", options=nvrtc_options(text) if here else ())
            ptx = compiled.ptx
            count = ptx.count("wgmma.mma_async" if form.startswith("wgmma") else "mma.sync")
            rec = record["starts"][name]
            rec[f"ptx_{form}"] = count
            use = next(iter(compiled.resources().values()), {})
            rec[f"resources_{form}"] = use
            line = (f"compiled {name} +{form}: {count} {form} instructions, "
                    f"{use.get('registers')} registers, {use.get('spill_stores')} bytes spilled")
            if direct(e) and f".entry {kernel}(" not in ptx:
                failed.append(f"{name} +{form}: no entry named {kernel} in the PTX")
            asked = {d.kernel: d for d in hostlaunch.directives(text)}
            if FORMS[form].get("deep") and kernel in asked:  # launched by its host module
                d = asked[kernel]
                rec[f"launch_{form}"] = d.to_json()
                line += (f"; its host is asked for {d.shared_bytes} bytes, block "
                         f"{d.block or d.block_from}, arch {d.arch}, tma maps "
                         f"{(d.tma or {}).get('maps')}")
                if not 48 * 1024 < d.shared_bytes:
                    failed.append(f"{name} +{form}: the host is asked for {d.shared_bytes} bytes")
                block = d.block or d.block_from or (0, 0, 0)
                bound = min(65536 // max(block[0] * block[1] * block[2], 1), 255) // 8 * 8
                if "setmaxnreg.inc" in ptx and use.get("registers") != bound:
                    failed.append(f"{name} +{form}: {use.get('registers')} registers, not the "
                                  f"{bound} setmaxnreg assumes")
                if FORMS[form].get("tma") and ("cp.async.bulk.tensor" not in ptx or not d.tma):
                    failed.append(f"{name} +{form}: no TMA copies, or no maps asked of the host")
                host = rebuilt_host(e["start"], text, Path(tempfile.mkdtemp()) / form)
                if f"_kl_host_launch({json.dumps(kernel)}" not in host.read_text():
                    failed.append(f"{name} +{form}: the host's launch was not edited")
            elif FORMS[form].get("deep"):
                passed, limit = host_launch(text, kernel)
                rec[f"launch_{form}"] = {"shared_bytes": passed, "limit": limit}
                line += f"; its launch passes {passed} bytes after raising the limit to {limit}"
                if FORMS[form].get("producer"):
                    block = launched_block(text, kernel, (0, 0, 0))
                    rec[f"block_{form}"] = block
                    line += f", block {block[0]}x{block[1]}x{block[2]}"
                    # setmaxnreg.inc waits for registers the block holds: it must start with
                    # the most its bounds allow, as the rewrite assumed
                    threads = block[0] * block[1] * block[2]
                    bound = min(65536 // max(threads, 1), 255) // 8 * 8
                    if "setmaxnreg.inc" in ptx and use.get("registers") != bound:
                        failed.append(f"{name} +{form}: {use.get('registers')} registers, not the "
                                      f"{bound} setmaxnreg assumes")
                if FORMS[form].get("tma"):
                    copies = ptx.count("cp.async.bulk.tensor")
                    rec[f"tma_{form}"] = copies
                    line += f", {copies} TMA copies"
                    if not copies or "kl_gs_tma_maps(" not in text:
                        failed.append(f"{name} +{form}: no TMA copies, or no launch building "
                                      "their maps")
                if not (48 * 1024 < passed <= limit):
                    failed.append(f"{name} +{form}: the launch passes {passed} bytes, limit {limit}")
            print(line, flush=True)
    record["failed"] = failed
    (args.out / "result.json").write_text(json.dumps(record, indent=2, default=str))
    for why in failed:
        print(f"FAILED {why}", flush=True)
    return 1 if failed else 0


def _measure(args: argparse.Namespace, entries: dict[str, dict[str, Any]], record: dict[str, Any],
             work: Path, began: float) -> None:
    import torch
    from triton.testing import do_bench

    from experts import cudahost

    record["device"] = torch.cuda.get_device_name()
    s = args.size
    rows = []
    for name, e in entries.items():
        if not e["forms"]:
            continue
        left = args.budget - (time.time() - began)
        if left <= 0:
            record["starts"][name]["skipped"] = "time budget spent"
            continue
        # a C++ build per form is minutes: launched here from what the rule read
        e["direct"] = "start" in e and direct(e)
        try:
            runs, inputs, reference = _runs(name, e, s, work, cudahost)
            times: dict[str, float] = {"cublas": do_bench(reference, return_mode="median")}
            want = reference().float()
            errs, failed = {}, {}
            for label, fn in runs.items():
                if time.time() - began > args.budget + 30:  # a start's last forms may be cut
                    failed[label] = "time budget spent"
                    continue
                try:
                    fn().zero_()  # an output buffer shared by the variants starts empty
                    got = fn().float()
                    errs[label] = ((got - want).abs().max() / want.abs().max()).item()
                    times[label] = do_bench(fn, return_mode="median")
                    # each time on disk at once: a form that never finishes (the watchdog
                    # ends the run) does not lose the ones before it
                    print(f"{name} {label}: {times[label]:.3f} ms ({times['cublas'] / times[label]:.3f}"
                          f"x cuBLAS), err {errs[label]:.1e}", flush=True)
                    record["starts"][name]["partial_ms"] = dict(times)
                    (args.out / "result.json").write_text(json.dumps(record, indent=2, default=str))
                except Exception as exc:  # noqa: BLE001 — a form the host cannot build (a
                    # CuPy host compiles for sm_90, not sm_90a) must not lose the others
                    failed[label] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    print(f"{name} {label}: {failed[label]}", flush=True)
            _rounds(args.rounds, runs, reference, times, failed, record["starts"][name], do_bench)
            times["cublas_again"] = do_bench(reference, return_mode="median")
            cublas = min(times["cublas"], times["cublas_again"])
            rec = record["starts"][name]
            rec.update({"ms": times, "max_rel_err": errs, "failed": failed,
                        "vs_cublas": {k: cublas / v for k, v in times.items()}})
            rows.append((name, times, cublas, errs))
            print(f"{name}: " + ", ".join(f"{k} {v:.3f} ms ({cublas / v:.3f}x cuBLAS)"
                                          for k, v in times.items()) + f"; errs {errs}", flush=True)
        except Exception as exc:  # noqa: BLE001 — one start failing must not lose the others
            traceback.print_exc()
            record["starts"][name]["error"] = f"{type(exc).__name__}: {exc}"
        (args.out / "result.json").write_text(json.dumps(record, indent=2, default=str))
    record["when"] = time.strftime("%Y-%m-%d %H:%M:%S")
    (args.out / "result.json").write_text(json.dumps(record, indent=2, default=str))
    lines = [f"# gemm-schedule at {s}^3 on {record['device']}", "",
             "| start | variant | ms | vs cuBLAS | max rel err |", "|---|---|---:|---:|---:|"]
    for name, times, tc, errs in rows:
        for label, t in times.items():
            err = f"{errs[label]:.1e}" if label in errs else ""
            lines.append(f"| {name} | {label} | {t:.3f} | {tc / t:.3f} | {err} |")
    for name, rec in record["starts"].items():
        for form, why in rec.get("refused", {}).items():
            lines.append(f"| {name} | +{form} refused: {why} | | | |")
        for label, why in rec.get("failed", {}).items():
            lines.append(f"| {name} | {label} failed: {why[:120]} | | | |")
        if "error" in rec or "skipped" in rec:
            lines.append(f"| {name} | {rec.get('error') or rec['skipped']} | | | |")
    (args.out / "result.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _rounds(rounds: int, runs: dict[str, Callable[[], Any]], reference: Callable[[], Any],
            times: dict[str, float], failed: dict[str, str], rec: dict[str, Any],
            do_bench: Callable[..., float]) -> None:
    """Rounds 2 .. `rounds`: cuBLAS, then each form that was timed, in turn (the GPU's clocks
    drift between a start's first and last timing); each of them then has the median of its
    rounds' times in `times`, and `rec["rounds_ms"]` keeps them all."""
    if rounds < 2:
        return
    seen = {label: [t] for label, t in times.items() if label == "cublas" or
            (label in runs and label != "start" and label not in failed)}
    for _ in range(rounds - 1):
        seen["cublas"].append(do_bench(reference, return_mode="median"))
        for label in seen:
            if label != "cublas":
                seen[label].append(do_bench(runs[label], return_mode="median"))
    rec["rounds_ms"] = seen
    for label, values in seen.items():
        times[label] = sorted(values)[len(values) // 2]


def _runs(name: str, e: dict[str, Any], s: int, work: Path, cudahost: Any
          ) -> tuple[dict[str, Callable[[], Any]], tuple, Callable[[], Any]]:
    """(start and rewrite as zero-argument calls on the timed inputs, the inputs, cuBLAS)."""
    import torch

    from gate.hostforms import entry

    if e.get("direct"):
        return _direct_runs(name, e, s, cudahost)
    if "start" not in e:  # the tutorial kernel: launched here
        a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        # zeros: the kernel reads C for its beta term (beta = 0 times garbage could be NaN)
        c = torch.zeros(s, s, device="cuda", dtype=torch.bfloat16)
        stream = torch.cuda.current_stream()

        def launcher(text: str, label: str) -> Callable[[], Any]:
            func, shared = _load_kernel(text, "sgemm_blocktile", label, cudahost)
            block = launched_block(text, "sgemm_blocktile", (256, 1, 1))
            full = launch_args(text, "sgemm_blocktile", [s, s, s, 1.0, a, b, 0.0, c])

            def run() -> Any:
                cudahost.launch(func, ((s + 127) // 128, (s + 127) // 128), block, shared, full,
                                stream)
                return c
            return run
        runs = {"start": launcher(e["source"], f"{name}_start")}
        for form, (text, _) in e["forms"].items():
            runs[f"+{form}"] = _or_failing(launcher, text, f"{name}_{form}")
        return runs, (a, b), lambda: torch.matmul(a, b)
    start = e["start"]
    case = start["case"]
    shape = dict(case.SHAPES["default"])
    for key in ("M", "N", "K"):
        if key in shape:
            shape[key] = s
    inputs = case.make_inputs(shape, 0, "cuda")
    case_path = str(STYLES / name / "case.py")
    f_start = entry(_load(start["host"], f"kl_host_start_{name}"), case_path)
    runs = {"start": lambda: f_start(*inputs)}
    for form, (text, _) in e["forms"].items():
        host = rebuilt_host(start, text, work / f"{name}_{form}")
        fn = entry(_load(host, f"kl_host_{form}_{name}"), case_path)
        runs[f"+{form}"] = lambda fn=fn: fn(*inputs)
    return runs, inputs, lambda: case.reference(*inputs)


def _or_failing(launcher: Callable[[str, str], Callable[[], Any]], text: str, label: str
                ) -> Callable[[], Any]:
    """`launcher(text, label)`, or, where the form does not build or load, a call that raises
    why (recorded as that form's failure; the start's other forms are still timed)."""
    try:
        return launcher(text, label)
    except Exception as exc:  # noqa: BLE001 — one form failing must not lose the others
        why = f"{type(exc).__name__}: {exc}"

        def failing() -> Any:
            raise RuntimeError(why)
        return failing


def _load_kernel(text: str, kernel: str, label: str, cudahost: Any) -> tuple[Any, int]:
    """`kernel` of `text` compiled with NVRTC (its device half, C linkage) and loaded, its
    dynamic shared memory limit raised as the source's host half raises it, and the bytes
    its own launch passes (0 where the source has no launch of it)."""
    from gate.hostforms import nvrtc_options  # noqa: PLC0415

    compiled = cudahost.compile_source(direct_source(text, kernel), name=f"{label}.cu",
                                       options=nvrtc_options(text))
    func = cudahost.get_function(compiled, kernel)
    shared, limit = host_launch(text, kernel)
    if limit:
        cudahost.set_dynamic_shared(func, limit)
    return func, shared


def _direct_runs(name: str, e: dict[str, Any], s: int, cudahost: Any
                 ) -> tuple[dict[str, Callable[[], Any]], tuple, Callable[[], Any]]:
    """The start and the forms compiled with NVRTC and launched here, their arguments placed by
    the roles the rule read (operands, output, M / N / K, leading dimensions) and the grid by its
    block axes: for a host that would build a C++ extension per form. Kernels with parameters of
    other roles are not launched this way."""
    import torch

    from gate.hostforms import device_source
    from passes.cuda.gemm_eval import _Kernel
    from passes.cuda.gemm_global import _kernel_params
    from passes.cuda._tree import Scope
    from passes.cuda.recognize import _parameter_names

    detail = next(iter(e["forms"].values()))[1]
    source = device_source(e["source"])
    ir = kir.parse(source, "cuda")
    scope = Scope(ir)
    fn = scope.functions[detail["kernel"]]
    ints, ptrs, _ = _kernel_params(_Kernel(ir, scope, fn))
    names = _parameter_names(ir, fn)
    a, b = detail["A"], detail["B"]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[detail["dtype"]]
    A = torch.randn(s, s, device="cuda", dtype=dtype)
    B = torch.randn(s, s, device="cuda", dtype=dtype)
    C = torch.zeros(s, s, device="cuda", dtype=dtype)
    sizes = {a["bound"]: s, b["bound"]: s, detail["K"]: s, a["ld"]: s, b["ld"]: s}
    args: list[Any] = []
    outputs = [n for n in ptrs if n not in (a["pointer"], b["pointer"])]
    for n in names:
        if n == a["pointer"]:
            args.append(A if a["layout"] == "mk" else A.T.contiguous())
        elif n == b["pointer"]:
            args.append(B if b["layout"] == "kn" else B.T.contiguous())
        elif n in outputs and len(outputs) == 1:
            args.append(C)
        elif n in ints and n in sizes:
            args.append(sizes[n])
        else:
            raise ValueError(f"the parameter {n} has no role the rule read")
    bm, bn, _ = detail["block_tile"]
    grid = [1, 1, 1]
    grid["xy".index(a["block_axis"])] = (s + bm - 1) // bm
    grid["xy".index(b["block_axis"])] = (s + bn - 1) // bn
    block = tuple(detail["block"]) + (1,)
    stream = torch.cuda.current_stream()

    def launcher(text: str, label: str) -> Callable[[], Any]:
        func, shared = _load_kernel(text, detail["kernel"], label, cudahost)
        own = launched_block(text, detail["kernel"], block)
        full = launch_args(text, detail["kernel"], args)
        blocks = persistent_grid(text, detail["kernel"], tuple(grid), func, own, shared)

        def run() -> Any:
            cudahost.launch(func, blocks, own, shared, full, stream)
            return C
        return run
    runs = {"start": launcher(e["source"], f"{name}_start")}
    for form, (text, _) in e["forms"].items():
        runs[f"+{form}"] = _or_failing(launcher, text, f"{name}_{form}")
    return runs, (A, B), lambda: torch.matmul(A, B)


if __name__ == "__main__":
    sys.exit(main())
