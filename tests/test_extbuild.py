"""gate.extbuild: where a load_inline extension builds, its build lock, and builds ahead."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path
from dataclasses import replace
from types import SimpleNamespace

import pytest

from gate import extbuild
from gate.check import prebuild

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "bench/styles/cuda/cu_softmax_rows"

# A host whose extension is C++ alone (pybind11, no torch headers): it builds on any CPU.
HOST = '''from torch.utils.cpp_extension import load_inline
SRC = r"""
#include <pybind11/pybind11.h>
static int scaled(int x) { return FACTOR * x; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scaled", &scaled); }
"""
ext = load_inline(name="kl_scaled", cpp_sources="#define FACTOR %d\\n" + SRC,
                  no_implicit_headers=True)
'''


def test_the_folder_follows_the_text_and_the_toolchain() -> None:
    env = {"PATH": os.environ.get("PATH", ""), "TORCH_CUDA_ARCH_LIST": "9.0+PTX"}
    a = extbuild.extension_dir("text a", env)
    assert a == extbuild.extension_dir("text a", dict(env))
    assert a != extbuild.extension_dir("text b", env)
    assert a != extbuild.extension_dir("text a", {**env, "TORCH_CUDA_ARCH_LIST": "8.0;9.0+PTX"})
    assert a != extbuild.extension_dir("text a", {**env, "CXX": "clang++"})


def test_the_worker_gets_a_build_folder_where_the_caller_set_none() -> None:
    env = extbuild.build_env({"PATH": "/bin"}, "text")
    assert env["TORCH_EXTENSIONS_DIR"] == extbuild.extension_dir("text", env)
    assert "TORCH_CUDA_ARCH_LIST" not in env  # the worker's torch derives its own, as always
    mine = extbuild.build_env({"TORCH_EXTENSIONS_DIR": "/x"}, "t")
    assert mine["TORCH_EXTENSIONS_DIR"] == "/x"


@pytest.mark.parametrize(("visible", "expected"), [
    (None, "8.0;9.0+PTX"), ("1", "8.0+PTX"), ("0,1", "8.0;9.0+PTX"), ("2,0", "9.0+PTX"),
    ("3,0", None), ("GPU-1234", None), ("", None)])
def test_the_architectures_torch_would_derive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              visible: str | None, expected: str | None) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '0, 9.0\\n1, 8.0\\n2, 9.0\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    extbuild.device_arch_list.cache_clear()
    try:
        got = extbuild.device_arch_list()
    finally:
        extbuild.device_arch_list.cache_clear()
    assert got == expected  # "3,0": CUDA's list stops at index 3, which names no device


def test_the_builder_holds_the_folder_and_clears_what_a_killed_build_left(tmp_path: Path) -> None:
    folder = tmp_path / "ext"
    (folder / "kl_x").mkdir(parents=True)
    (folder / "kl_x" / "lock").write_text("")  # torch's lock of a build that never ended
    (folder / "kl_x" / "main.o").write_text("object")
    with extbuild.builder(folder):
        assert not (folder / "kl_x" / "lock").exists()
        assert (folder / "kl_x" / "main.o").exists()  # a finished build's objects stay
        fd = os.open(folder / extbuild.LOCK_NAME, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        assert (folder / extbuild.UNFINISHED_NAME).exists()
    assert not (folder / extbuild.UNFINISHED_NAME).exists()
    # a build killed inside the lock leaves its mark: the next builder starts from nothing
    (folder / extbuild.UNFINISHED_NAME).touch()
    with extbuild.builder(folder):
        assert not (folder / "kl_x").exists()


def test_how_many_builds_run_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KLINEAGE_BUILD_AHEAD", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert extbuild.slots() == 0 and not extbuild.enabled()
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert extbuild.slots() == extbuild.MAX_AHEAD
    monkeypatch.setenv("KLINEAGE_BUILD_AHEAD", "off")
    assert extbuild.slots() == 0
    monkeypatch.setenv("KLINEAGE_BUILD_AHEAD", "2")
    assert extbuild.slots() == 2
    # without the target architectures a build with no GPU visible is not started
    monkeypatch.setattr(extbuild, "device_arch_list", lambda: None)
    monkeypatch.setattr(extbuild, "_root", lambda: Path("/nowhere"))
    assert not extbuild.start("x = 1\n", "host", None, {"TORCH_EXTENSIONS_DIR": "/nowhere/a"})


def test_prebuild_starts_nothing_where_the_gate_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_BUILD_AHEAD", "2")
    started: list[str] = []
    monkeypatch.setattr(extbuild, "start", lambda *a, **k: started.append(a[0]) or True)
    host = SOFTMAX / "softmax_rows.py"
    from kir import embedded

    unit = embedded.cuda_unit(host)
    assert unit is not None
    # the static tier builds no extension; a Triton kernel has none
    assert not prebuild(unit.source, "cuda", str(SOFTMAX), "static", path=host, host=host)
    assert not prebuild("import triton\n", "triton", str(SOFTMAX), "device")
    assert started == []


def _load(module_text: str, folder: str, name: str) -> object:
    """Import `module_text` as a gate's worker does, under its folder's builder; the module's
    `found` is what the builder found (`extbuild.Found.outcome`)."""
    import importlib.util

    path = Path(folder).parent / f"{name}.py"
    path.write_text(module_text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with extbuild.builder(folder) as found:
        spec.loader.exec_module(module)
    module.found = found.outcome()  # type: ignore[attr-defined]
    return module


def test_a_build_ahead_is_found_by_its_gate_and_never_stands_for_another_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("KLINEAGE_BUILD_AHEAD", "1")
    text = HOST % 2
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": "9.0+PTX",
           "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    assert not extbuild.start(text, "host", None, env)  # a folder of the caller's: not ahead
    monkeypatch.setattr(extbuild, "_root", lambda: tmp_path)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", env["TORCH_EXTENSIONS_DIR"])
    assert extbuild.start(text, "host", None, env)
    assert not extbuild.start(text, "host", None, env)  # one build per folder
    # a gate's own build takes no slot; builds ahead take the slots
    gate_env = {**env, "TORCH_EXTENSIONS_DIR": str(tmp_path / "gate")}
    assert extbuild.start(HOST % 5, "host", None, gate_env, own=True)
    assert extbuild.running() == 1
    assert not extbuild.start(HOST % 7, "host", None,
                              {**env, "TORCH_EXTENSIONS_DIR": str(tmp_path / "more")})
    proc = extbuild._AHEAD[env["TORCH_EXTENSIONS_DIR"]]
    assert proc.wait(timeout=240) == 0
    library = next((tmp_path / "ext" / "kl_scaled").glob("*.so"))
    built = library.stat().st_mtime_ns
    time.sleep(0.01)
    module = _load(text, env["TORCH_EXTENSIONS_DIR"], "gate_a")
    assert module.ext.scaled(21) == 42  # type: ignore[attr-defined]
    assert library.stat().st_mtime_ns == built  # found, not rebuilt
    assert module.found == "ahead"  # type: ignore[attr-defined]
    # another source in the same folder (same extension name) is rebuilt, not the old one
    # loaded (in a fresh process, as each gate's worker is)
    code = ("import sys; sys.path.insert(0, %r); from tests.test_extbuild import _load; "
            "m = _load(%r, %r, 'gate_b'); print(m.ext.scaled(21), m.found)"
            % (str(ROOT), HOST % 3, env["TORCH_EXTENSIONS_DIR"]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "TORCH_EXTENSIONS_DIR": env["TORCH_EXTENSIONS_DIR"]})
    assert out.stdout.strip().splitlines()[-1] == "63 built", out.stderr[-2000:]
    assert library.stat().st_mtime_ns != built


def test_the_search_builds_ahead_the_next_candidates_and_those_of_the_one_it_gates() -> None:
    from lineage import ahead, optimize
    from lineage.graph import Lineage
    from passes.rewriter import DeterministicRewriter

    def made(text: str) -> SimpleNamespace:
        return SimpleNamespace(ok=True, ir=SimpleNamespace(unparse=lambda: text),
                               card=SimpleNamespace(id="c-now", pass_name="p"),
                               site=SimpleNamespace(anchor="k"))

    parent = SimpleNamespace(path=(), verdict=None)

    def option(kind: str, card: str, texts: list[str]) -> SimpleNamespace:
        return SimpleNamespace(kind=kind, card=card, rank=0, done=False, state=parent,
                               stream=iter([made(t) for t in texts]), held=[])

    # a move on the text being gated: the same card's rewrite of that text
    def stream(o, run):
        return o.stream if o.stream is not None else iter([made(f"{o.card} on {o.state.source}")])

    def on(kept, o):
        return SimpleNamespace(kind=o.kind, card=o.card, rank=o.rank, done=False, state=kept,
                               stream=None, held=[])

    built: list[str] = []
    a, b, c, d = (option("rule", "A", ["a1", "a2"]), option("own", "B", ["b1"]),
                  option("card", "C", ["c1"]), option("rule", "D", ["d1"]))
    run = SimpleNamespace(ahead=built.append, ranked=[b, a, c, d], rewriter=object(),
                          verdicts={}, lineage=Lineage())
    kept = optimize._kept_as(parent, made("now"))  # type: ignore[arg-type]
    ahead.build_ahead(run, a, made("now"), kept, stream, on)  # type: ignore[arg-type]
    # per option (the taken first, up to ahead.AHEAD_OPTIONS) its next candidate and its
    # candidate on the text gated now (whose own gate starts its build); a card of a rewriter that may call
    # an LLM is not materialized ahead
    assert built == ["a1", "A on now", "b1", "B on now"]
    assert d.held == [] and c.held == []
    built.clear()
    run.rewriter = DeterministicRewriter()
    kept = optimize._kept_as(parent, made("now"))  # type: ignore[arg-type]
    ahead.build_ahead(run, a, made("now"), kept, stream, on)  # type: ignore[arg-type]
    assert built == ["a1", "A on now", "b1", "B on now", "c1", "C on now"]
    assert [m.ir.unparse() for m in a.held] == ["a1"]  # held once, not taken from the stream twice
    assert optimize._next(a, run).ir.unparse() == "a1"  # type: ignore[arg-type, union-attr]
    run.verdicts["b1"] = object()  # gated by another path since it was held
    assert optimize._next(b, run) is None  # type: ignore[arg-type]
    assert optimize._next(a, run).ir.unparse() == "a2"  # type: ignore[arg-type, union-attr]
    assert kept.source == "now" and [s.card for s in kept.path] == ["c-now"]


def test_a_host_that_picks_its_own_build_folder_is_not_built_ahead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("KLINEAGE_BUILD_AHEAD", "1")
    own = tmp_path / "own"
    own.mkdir()
    text = (HOST % 2).replace("no_implicit_headers=True)",
                              f"no_implicit_headers=True, build_directory={str(own)!r})")
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": "9.0+PTX",
           "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    monkeypatch.setattr(extbuild, "_root", lambda: tmp_path)
    assert extbuild.start(text, "host", None, env)
    assert extbuild._AHEAD[env["TORCH_EXTENSIONS_DIR"]].wait(timeout=240) == 1  # not built
    assert list(own.iterdir()) == []  # that folder is not under the build lock: left to the worker


def test_a_standby_worker_takes_a_job_whose_build_folder_is_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each load_inline candidate has a build folder of its own in its environment; the next
    gate's worker, started before the folder is known, still takes it (the job sets it)."""
    import gate
    from gate import runner
    from gate.verdict import Tier

    saxpy = ROOT / "tests/data/cases/saxpy"
    marker = tmp_path / "seen.txt"
    candidate = tmp_path / "saxpy_marked.py"
    candidate.write_text((saxpy / "saxpy_triton.py").read_text() + f'''
import os as _os
with open({str(marker)!r}, "a") as _f:
    _f.write(f"{{_os.getpid()}} {{_os.environ.get('TORCH_EXTENSIONS_DIR')}}\\n")
''')
    monkeypatch.setenv("KLINEAGE_GATE_STANDBY", "1")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "first"))
    runner.STANDBY.close()
    assert runner.prestart(Tier.INTERPRET, wait=60) > 0
    [(_, (waiting, _))] = list(runner.STANDBY._ready.items())
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "second"))
    verdict = gate.check_file(candidate, saxpy, Tier.INTERPRET, cache=False, timeout=60)
    assert verdict.ok, verdict.reason
    runner.STANDBY.close()
    [(pid, folder)] = [line.split() for line in marker.read_text().splitlines()]
    assert (int(pid), folder) == (waiting.pid, str(tmp_path / "second"))


def test_building_ahead_changes_nothing_the_search_gates(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A device-tier search of a load_inline host gates the same candidates in the same order
    whether or not it builds ahead, and what it builds ahead it asks for before its gate."""
    import gate
    from lineage.optimize import optimize
    from lineage.shipped import open_library
    from passes.rewriter import DeterministicRewriter
    from skill_helpers import ScriptedGate

    host = SOFTMAX / "softmax_rows.py"
    lib, _ = open_library(None)
    start_ms = 1.0

    def ms(source: str) -> float:  # deterministic, most candidates not faster than the start
        return start_ms * (0.9 if "__launch_bounds__" in source else 1.0 + len(source) % 7 / 100)

    def run(ahead: bool, out: str) -> tuple[list[str], list[tuple[str, str]]]:
        events: list[tuple[str, str]] = []
        scripted = ScriptedGate(ms=ms)

        def check(source: str, *args: object, **kwargs: object) -> object:
            events.append(("gate", source))
            return scripted(source, *args, **kwargs)

        def prebuild(source: str, *args: object, **kwargs: object) -> bool:
            events.append(("build", source))
            return True

        monkeypatch.setattr(gate, "check", check)
        monkeypatch.setattr(gate, "prebuild", prebuild if ahead else lambda *a, **k: False)
        optimize(host, str(SOFTMAX), lib, tier="device", out=tmp_path / out,
                 rewriter=DeterministicRewriter(), budget_steps=6)
        return scripted.seen, events

    plain, _ = run(False, "plain")
    seen, events = run(True, "ahead")
    assert seen == plain and len(seen) > 2
    built = [text for kind, text in events if kind == "build"]
    gated_after = [text for i, (kind, text) in enumerate(events)
                   if kind == "gate" and ("build", text) in events[:i]]
    # candidates were built while the gate before them ran (4 of the 6 here)
    assert len(gated_after) >= 2


def test_the_builder_says_whether_its_body_built_or_found_the_library_and_who_built_it(
        tmp_path: Path) -> None:
    import threading

    folder = tmp_path / "ext"
    library = folder / "kl_x" / "kl_x.so"

    def write(text: str) -> None:
        library.parent.mkdir(parents=True, exist_ok=True)
        library.write_text(text)
        os.utime(library, ns=(time.time_ns(), time.time_ns() + len(text)))  # a new mtime

    with extbuild.builder(folder) as found:
        pass
    assert found.outcome() == "none" and not found.built
    with extbuild.builder(folder, by="ahead") as found:
        write("built ahead")
    assert found.outcome() == "built"
    with extbuild.builder(folder) as found:  # the gate finds the build ahead unchanged
        pass
    assert (found.outcome(), found.found) == ("ahead", "ahead")
    with extbuild.builder(folder) as found:  # the gate's own sources differ: it relinks
        write("built by the gate")
    assert found.outcome() == "built"
    with extbuild.builder(folder) as found:
        pass
    assert found.outcome() == "gate"
    # a build that holds the lock: the next builder waits for it and says how long
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with extbuild.builder(folder, by="ahead"):
            entered.set()
            release.wait(10)
            write("rebuilt ahead")

    holder = threading.Thread(target=hold)
    holder.start()
    assert entered.wait(10)
    threading.Timer(0.3, release.set).start()
    with extbuild.builder(folder) as found:
        pass
    holder.join(10)
    assert found.waited_s >= 0.2 and found.outcome() == "ahead"


def test_a_build_ahead_compiles_for_the_architectures_the_worker_derives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build ahead sees no GPU and is given the visible GPUs' architectures from
    nvidia-smi; the worker's torch derives them from the GPU: the nvcc flags are the same, so
    ninja finds the build ahead's commands unchanged (an H200, and a host of two kinds)."""
    cpp_extension = pytest.importorskip("torch.utils.cpp_extension")
    import torch

    smi = tmp_path / "nvidia-smi"
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_80", "sm_86", "sm_90", "sm_100"])
    for caps in (["9.0"], ["9.0", "8.0"]):
        smi.write_text("#!/bin/sh\nprintf '" + "".join(f"{i}, {c}\\n" for i, c in enumerate(caps))
                       + "'\n")
        smi.chmod(0o755)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(len(caps))))
        monkeypatch.setattr(torch.cuda, "device_count", lambda caps=caps: len(caps))
        monkeypatch.setattr(torch.cuda, "get_device_capability",
                            lambda i, caps=caps: tuple(int(p) for p in caps[i].split(".")))
        extbuild.device_arch_list.cache_clear()
        try:
            ahead = extbuild.device_arch_list()
        finally:
            extbuild.device_arch_list.cache_clear()
        assert ahead is not None
        monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
        worker = cpp_extension._get_cuda_arch_flags()
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", ahead)
        assert cpp_extension._get_cuda_arch_flags() == worker, (caps, ahead)
        monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")


def test_the_build_ahead_gets_the_workers_environment_with_no_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ninja's commands depend on (`BUILD_ENV`, PATH, the interpreter) is the worker's;
    only the GPU is hidden and the architectures named."""
    monkeypatch.setenv("KLINEAGE_BUILD_AHEAD", "1")
    monkeypatch.setattr(extbuild, "_root", lambda: tmp_path)
    monkeypatch.setattr(extbuild, "device_arch_list", lambda: "9.0+PTX")
    seen: list[tuple[list[str], dict[str, str]]] = []

    class Proc:
        pid = 0
        args = ["python", "-m", "gate.extbuild", str(tmp_path / "m" / "h.py")]

        def poll(self) -> int:
            return 0

    def popen(argv: list[str], **kw: object) -> Proc:
        seen.append((argv, dict(kw["env"])))  # type: ignore[call-overload]
        return Proc()

    monkeypatch.setattr(extbuild.subprocess, "Popen", popen)
    worker = extbuild.build_env({**os.environ, "CUDA_VISIBLE_DEVICES": "0", "CXX": "g++"}, "t")
    assert extbuild.start("t", "h", None, worker)
    try:
        [(argv, env)] = seen
        assert argv[0] == sys.executable
        assert env["CUDA_VISIBLE_DEVICES"] == "" and env["TORCH_CUDA_ARCH_LIST"] == "9.0+PTX"
        same = {k for k in worker if k not in ("CUDA_VISIBLE_DEVICES", "PYTHONPATH")}
        assert {k: env.get(k) for k in same} == {k: worker[k] for k in same}
    finally:
        extbuild._AHEAD.pop(worker["TORCH_EXTENSIONS_DIR"], None)


def test_a_search_whose_own_gates_run_here_builds_ahead(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller's `check_fn` that gates on this machine (the held-out harness's) keeps the
    builds ahead on when it says so (`prebuild_fn`); a `check_fn` alone turns them off."""
    import gate
    from lineage.optimize import optimize
    from lineage.shipped import open_library
    from passes.rewriter import DeterministicRewriter
    from skill_helpers import ScriptedGate

    host = SOFTMAX / "softmax_rows.py"
    lib, _ = open_library(None)
    monkeypatch.setattr(gate, "prebuild", lambda *a, **k: pytest.fail("gate.prebuild called"))

    built: set[str] = set()

    def run(out: str, **kw: object) -> tuple[int, tuple[str, ...]]:
        scripted = ScriptedGate(ms=lambda s: 1.0 + len(s) % 7 / 100)

        def check(source: str, *a: object, **k: object) -> object:
            part = "found built ahead" if source in built else "built here"
            return replace(scripted(source, *a, **k),
                           phases=((f"load_candidate: extension {part}", 1.0),))

        result = optimize(host, str(SOFTMAX), lib, tier="device", out=tmp_path / out,
                          rewriter=DeterministicRewriter(), budget_steps=4, check_fn=check, **kw)
        return len(scripted.seen), result.notes

    gated, notes = run("plain")
    assert gated > 2  # candidates gated, and none built ahead (gate.prebuild not called)
    assert not any(n.startswith("load_inline extensions") for n in notes)
    asked: list[tuple[object, ...]] = []

    def prebuild(source: str, language: str, case: object, tier: object, **kw: object) -> bool:
        asked.append((language, tier, kw.get("path")))
        built.add(source)
        return len(asked) % 2 == 1  # every other call starts one

    gated, notes = run("ahead", prebuild_fn=prebuild)
    assert asked and set(asked) == {("cuda", "device", host)}
    # the result says how the gates had their extensions and how many builds ahead started
    [note] = [n for n in notes if n.startswith("load_inline extensions")]
    assert "found built ahead" in note and "built here" in note
    assert note.endswith(f"({(len(asked) + 1) // 2} builds ahead started)")


def test_the_heldout_harness_builds_ahead_where_its_gates_are_local(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import importlib.util

    import gate
    import lineage.optimize

    spec = importlib.util.spec_from_file_location("heldout_ahead", ROOT / "bench" / "heldout.py")
    assert spec is not None and spec.loader is not None
    heldout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heldout)
    given: list[object] = []

    def optimize(*a: object, **kw: object) -> object:
        given.append(kw.get("prebuild_fn"))
        raise RuntimeError("stop")

    monkeypatch.setattr(lineage.optimize, "optimize", optimize)
    case = SimpleNamespace(name="op", start_path=lambda: SOFTMAX / "softmax_rows.py")
    args = argparse.Namespace(library=str(tmp_path / "lib"), budget_steps=2, tier="device")
    assert heldout.search(case, args, tmp_path / "a", 0.0)["error"] == "RuntimeError: stop"
    args.gates = object()  # a cluster's executor: its gates build where they run
    heldout.search(case, args, tmp_path / "b", 0.0)
    assert given == [gate.prebuild, None]


def test_the_verdict_says_how_the_worker_had_its_extension() -> None:
    from gate.worker import _Runner

    runner = SimpleNamespace(parts=[])
    _Runner.record_extension(runner, extbuild.Found(waited_s=1.5, found="ahead"), 2.0)  # type: ignore[arg-type]
    _Runner.record_extension(runner, extbuild.Found(built=True), 60.0)  # type: ignore[arg-type]
    _Runner.record_extension(runner, extbuild.Found(found="gate"), 0.5)  # type: ignore[arg-type]
    _Runner.record_extension(runner, extbuild.Found(found="own"), 0.5)  # type: ignore[arg-type]
    assert runner.parts == [("load_candidate: extension lock wait", 1.5),
                            ("load_candidate: extension found built ahead", 0.5),
                            ("load_candidate: extension built here", 60.0),
                            ("load_candidate: extension found built by an earlier gate", 0.5),
                            ("load_candidate: extension found built at its gate's start", 0.5)]


def test_stopping_the_builds_ahead_removes_their_module_copies_and_nothing_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_BUILD_AHEAD", "1")
    monkeypatch.setattr(extbuild, "_root", lambda: tmp_path / "ext")
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("the caller's")
    monkeypatch.chdir(work)
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": "9.0+PTX",
           "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext" / "a")}
    assert extbuild.start("import time\ntime.sleep(60)\n", "slow", None, env, source="// k\n")
    proc = extbuild._AHEAD[env["TORCH_EXTENSIONS_DIR"]]
    copy = Path(proc.args[extbuild._MODULE_ARG])  # type: ignore[index]
    assert copy.name == "slow.py" and copy.with_suffix(".cu").read_text() == "// k\n"
    extbuild.stop_all()
    assert proc.wait(timeout=30) != 0 and not copy.parent.exists()
    assert (work / "keep.txt").read_text() == "the caller's"
    assert extbuild._AHEAD == {}


def test_a_host_that_reads_the_cu_beside_it_is_built_ahead_from_the_candidates_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its module text is the same for every candidate: the folder follows the source too,
    and the build ahead has the candidate's `.cu` beside the module, as the gate's worker."""
    pytest.importorskip("torch")
    monkeypatch.setenv("KLINEAGE_BUILD_AHEAD", "1")
    monkeypatch.setattr(extbuild, "_root", lambda: tmp_path)
    host = ('from pathlib import Path\nfrom torch.utils.cpp_extension import load_inline\n'
            'ext = load_inline(name="kl_beside", no_implicit_headers=True,\n'
            '                  cpp_sources=Path(__file__).with_suffix(".cu").read_text())\n')
    source = HOST.split('r"""', 1)[1].split('"""', 1)[0].replace("FACTOR", "4")
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": "9.0+PTX"}
    worker = extbuild.build_env(env, host, source)
    assert worker["TORCH_EXTENSIONS_DIR"] != extbuild.build_env(env, host, source + "\n")[
        "TORCH_EXTENSIONS_DIR"]
    assert extbuild.start(host, "beside", None, worker, source=source)
    assert extbuild._AHEAD[worker["TORCH_EXTENSIONS_DIR"]].wait(timeout=240) == 0
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", worker["TORCH_EXTENSIONS_DIR"])
    (Path(worker["TORCH_EXTENSIONS_DIR"]).parent / "beside.cu").write_text(source)
    module = _load(host, worker["TORCH_EXTENSIONS_DIR"], "beside")
    assert module.ext.scaled(5) == 20 and module.found == "ahead"  # type: ignore[attr-defined]
