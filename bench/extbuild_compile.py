"""Seconds to build a `load_inline` CUDA host's extension per candidate, as its gates build it.

Builds N candidates of one KernelBench-style host (the style tier's row softmax unless `--kernel`
names another), each a changed CUDA source (a comment line: a distinct text, so a folder of its
own, `gate.extbuild.extension_dir`), one after another as a search gates them, in two modes,
the candidates of both interleaved (a shared machine's load weighs on both alike):

- `plain`: `KLINEAGE_BUILD_REUSE=off`: torch's commands as they are (ninja compiles the C++
  half and the `.cu` side by side);
- `reuse`: the build's tools (`gate.extbuild.tools`): the C++ half's object reused across
  candidates (`gate.objcache`; the first build compiles it).

Each build runs as a build ahead does (`gate.extbuild._build`: the module imported under the
folder's builder until its `load_inline` has built, no GPU visible), in a temporary folder of
its own (`TMPDIR`: no build or object of an earlier run is found). Needs nvcc; no GPU. A torch
without CUDA (a CPU wheel) has no `CUDA_HOME` and no CUDA libraries to link: the build is then
pointed at the toolkit (`--cuda-home`, default the one nvcc on PATH belongs to) and links
against empty stand-ins of torch's CUDA libraries (the import that follows fails: only the
build is timed). Writes `extbuild_compile.json` under OUT_DIR: per build its wall and CPU
seconds, ninja's seconds per target (`.ninja_log`), whether the library was written.

    python bench/extbuild_compile.py OUT_DIR [--n 3] [--arch 9.0] [--kernel PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_KERNEL = ROOT / "bench/styles/cuda/cu_softmax_rows/softmax_rows.py"
MODES = ("plain", "reuse")
# The child: torch's CUDA_HOME where a CPU wheel leaves it unset, a build's error said, then a
# build ahead's body.
CHILD = """import sys, os
import torch.utils.cpp_extension as ce
if ce.CUDA_HOME is None:
    ce.CUDA_HOME = os.environ["CUDA_HOME"]
original = ce.load_inline
def load_inline(*args, **kwargs):
    try:
        return original(*args, **kwargs)
    except Exception as exc:
        print(exc, file=sys.stderr)
        raise
ce.load_inline = load_inline
from gate import extbuild
sys.exit(extbuild._build(sys.argv[1], "", sys.argv[2], "own"))
"""


def _stand_ins(folder: Path) -> str | None:
    """A folder of empty `libc10_cuda.so` / `libtorch_cuda.so` where this torch has none."""
    import torch

    lib = Path(torch.__file__).parent / "lib"
    if (lib / "libtorch_cuda.so").exists():
        return None
    folder.mkdir(parents=True, exist_ok=True)
    empty = folder / "empty.c"
    empty.write_text("")
    for name in ("c10_cuda", "torch_cuda"):
        subprocess.run(["cc", "-shared", "-o", str(folder / f"lib{name}.so"), str(empty)],
                       check=True)
    return str(folder)


def _toolkit(chosen: str | None) -> str | None:
    """The CUDA toolkit's folder: `chosen`, else `CUDA_HOME`, else `/usr/local/cuda`, else the
    one nvcc on PATH belongs to (through links); one with `bin/nvcc` and `include/cuda.h`."""
    nvcc = shutil.which("nvcc")
    for folder in (chosen, os.environ.get("CUDA_HOME"), "/usr/local/cuda",
                   str(Path(nvcc).resolve().parents[1]) if nvcc else None):
        if folder and (Path(folder) / "bin" / "nvcc").exists() and \
                (Path(folder) / "include" / "cuda.h").exists():
            return folder
    return None


def _ninja_times(folder: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for log in folder.glob("*/.ninja_log"):
        for line in log.read_text().splitlines()[1:]:
            start, end, _, target, _ = line.split("\t")
            out[target] = round((int(end) - int(start)) / 1000, 2)
    return out


def build_once(module_text: str, stem: str, env: dict[str, str]) -> dict:
    """Build `module_text`'s extension as a build ahead does under `env` (in the folder
    `env` names); wall and CPU seconds."""
    folder = Path(env["TORCH_EXTENSIONS_DIR"])
    scratch = Path(tempfile.mkdtemp(prefix="kl-bench-", dir=env["TMPDIR"]))
    module = scratch / f"{stem}.py"
    module.write_text(module_text)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", CHILD, str(module), str(folder)], env=env,
                          cwd=scratch, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          check=False)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    built = any(folder.glob("*/*.so"))
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "ninja_s": _ninja_times(folder),
            "built": built, **({} if built else {"output": (done.stdout + done.stderr)[-2000:]})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--arch", default="9.0", help="TORCH_CUDA_ARCH_LIST of the builds")
    ap.add_argument("--kernel", type=Path, default=DEFAULT_KERNEL)
    ap.add_argument("--cuda-home", default=None)
    args = ap.parse_args()
    from gate.check import hosted
    from kir import embedded

    unit = embedded.cuda_unit(args.kernel)
    if unit is None:
        print(f"{args.kernel}: not a CUDA kernel", file=sys.stderr)
        return 2
    cuda_home = _toolkit(args.cuda_home)
    if cuda_home is None:
        print("no CUDA toolkit: give --cuda-home (a folder with bin/nvcc and include/cuda.h)",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kl-extbuild-"))
    base = {**os.environ, "CUDA_HOME": cuda_home, "TORCH_CUDA_ARCH_LIST": args.arch,
            "CUDA_VISIBLE_DEVICES": ""}
    stand_ins = _stand_ins(work / "stand-ins")
    if stand_ins:
        base["LIBRARY_PATH"] = os.pathsep.join(p for p in (stand_ins, base.get("LIBRARY_PATH"))
                                               if p)
    host = unit.host_path.read_text()
    salt = uuid.uuid4().hex[:8]
    report = {"kernel": str(args.kernel), "n": args.n, "cpus": os.cpu_count(), "arch": args.arch,
              "cuda_home": cuda_home, "stand_in_libraries": bool(stand_ins),
              "builds": {m: [] for m in MODES}}
    try:
        for k in range(args.n):
            for mode in MODES:
                tmp = work / mode
                tmp.mkdir(exist_ok=True)
                env = {**base, "TMPDIR": str(tmp), "TORCH_EXTENSIONS_DIR": str(tmp / f"ext-{k}"),
                       "KLINEAGE_BUILD_REUSE": "off" if mode == "plain" else "on"}
                source = f"{unit.source.rstrip()}\n// candidate {salt} {mode} {k}\n"
                row = build_once(hosted(host, source), unit.host_path.stem, env)
                row["load"] = round(os.getloadavg()[0], 2)
                report["builds"][mode].append(row)
                print(f"{mode} {k}: {row['wall_s']} s wall, {row['cpu_s']} s CPU, ninja "
                      f"{row['ninja_s']}, load {row['load']}, built={row['built']}", flush=True)
                (args.out / "extbuild_compile.json").write_text(json.dumps(report, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for mode, rows in report["builds"].items():
        later = rows[1:] or rows
        print(f"{mode}: first {rows[0]['wall_s']} s, later mean "
              f"{sum(r['wall_s'] for r in later) / len(later):.1f} s wall / "
              f"{sum(r['cpu_s'] for r in later) / len(later):.1f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
