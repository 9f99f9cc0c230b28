"""bench/gate_honest.py without gating much: which kernels it finds and how it merges them, its
summary, a run cut by --box, and its refusals of bad input."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gate_honest.py"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("_gate_honest_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _script(*argv: str) -> subprocess.CompletedProcess[str]:
    # A subprocess: loading the KernelBench cases imports torch (and triton) in the process.
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_same_source_in_several_places_is_one_kernel() -> None:
    gh = _module()
    a = gh.Kernel("start x", "start", "case/a", None, "triton", "src 1", None, places=["start x"])
    b = gh.Kernel("heldout r1 s:1", "heldout", "case/a", None, "triton", "src 1", None,
                  places=["heldout r1 s:1"])
    c = gh.Kernel("heldout r1 s:2", "heldout", "case/a", None, "triton", "src 2", None,
                  places=["heldout r1 s:2"])
    d = gh.Kernel("lineage r2 s:1", "lineage", "case/b", None, "triton", "src 1", None,
                  places=["lineage r2 s:1"])
    out = gh.dedup([a, b, c, d])
    assert [k.label for k in out] == ["start x", "heldout r1 s:2", "lineage r2 s:1"]
    assert out[0].places == ["start x", "heldout r1 s:1"]


_ENUMERATE = """
import collections, json, sys
sys.path.insert(0, "bench")
import gate_honest as gh
todo, skipped = gh.kernels()
print(json.dumps({"keys": [list(k.key) for k in todo], "places": [k.places for k in todo],
                  "origins": [k.origin for k in todo], "errors": [k.load_error for k in todo],
                  "skipped": skipped}))
"""


def test_every_honest_kernel_is_found_once_with_every_place() -> None:
    import gate
    from gate.cases import find_cases

    proc = subprocess.run([sys.executable, "-c", _ENUMERATE], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    keys = [tuple(k) for k in got["keys"]]
    assert len(keys) == len(set(keys))
    places = [p for ps in got["places"] for p in ps]
    assert len(places) == len(set(places))
    # Every state with a source, counted here from the files themselves, is one place.
    states = 0
    for pattern in ("bench/results/lineages/*/*/lineage.json",
                    "bench/results/heldout/*/ops/*/optimize/lineage.json"):
        for lineage in ROOT.glob(pattern):
            states += sum(1 for n in json.loads(lineage.read_text())["nodes"]
                          if str(n.get("type", "state")).lower() == "state" and n.get("source"))
    experts = sum(len(gate.load_case(n).expert_paths()) for n in gate.list_cases())
    starts = len(find_cases([ROOT / "bench" / "heldout"]))
    assert len(places) + got["skipped"] == states + experts + starts
    assert got["origins"].count("start") == starts
    assert sum(1 for p in places if p.startswith("heldout ")) > 0
    # Held-out lineages name their case by a path from the repository root: every one loads.
    assert not [e for e, o in zip(got["errors"], got["origins"]) if o == "heldout" and e]
    # A start kernel is the root of its operator's optimize lineages: one kernel, several places.
    assert any(o == "start" and any(p.startswith("heldout ") for p in ps)
               for o, ps in zip(got["origins"], got["places"]))


def test_the_summary_counts_per_case_and_lists_each_rejection() -> None:
    gh = _module()
    todo = [gh.Kernel(f"k{i}", "start", "c/a" if i < 3 else "c/b", None, "triton", f"s{i}", None,
                      places=[f"start k{i}"]) for i in range(5)]
    records = [
        {"kernel": "k0", "case": "c/a", "ok": True, "failure_kind": None, "reason": "",
         "places": 1},
        {"kernel": "k1", "case": "c/a", "ok": False, "failure_kind": "numerical_mismatch",
         "reason": "a | b " + "x" * 400, "places": 2},
        {"kernel": "k2", "case": "c/a", "ok": None, "failure_kind": "error", "reason": "no case",
         "places": 1},
    ]
    meta = {"tier": "interpret", "kernels": 5, "places": 5, "skipped": 0, "elapsed_s": 3.0,
            "jobs": 2, "box": 0, **gh.tally(todo, 3)}
    md = gh.summarize(records, meta)
    assert "| c/a | start 3 | 3 | 1 | 1 | 1 | 0 |" in md
    assert "| c/b | start 2 | 0 | 0 | 0 | 0 | 2 |" in md
    row = next(line for line in md.splitlines() if line.startswith("| k1 (+1 places)"))
    assert "a \\| b" in row and "x" * 194 in row and "x" * 195 not in row
    assert "1 rejected" in md and "2 not reached" in md and "| k2 | c/a | error | no case |" in md


def test_a_rejection_the_static_tier_reproduces_is_the_kernels_own(monkeypatch: Any) -> None:
    """A kernel that does not compile for the GPU (kept by a lineage at the interpret tier) is
    rejected on the device and again at the static tier: not a false rejection. One the static
    tier passes stays counted as false."""
    import hashlib
    from types import SimpleNamespace

    gh = _module()
    kernels = [gh.Kernel(f"k{i}", "lineage", "c/a", object(), "triton", f"src{i}", None,
                         places=[f"lineage k{i}"]) for i in range(2)]
    monkeypatch.setattr(gh, "kernels", lambda root=None: (kernels, 0))
    seen: list[str] = []

    def check(source: str, language: str, case: Any, tier: str, **kw: Any) -> Any:
        seen.append(f"{source}@{tier}")
        own = source == "src0"
        return SimpleNamespace(ok=not own, reason="caused by ValueError: numel" if own else "",
                               failure_kind=SimpleNamespace(value="compile_error") if own else None)

    monkeypatch.setattr(gh.gate, "check", check)
    records = [{"kernel": k.label, "case": "c/a", "ok": False, "failure_kind": "compile_error",
                "reason": "raised", "places": 1,
                "sha256": hashlib.sha256(k.source.encode()).hexdigest()} for k in kernels]
    records.append({"kernel": "k9", "case": "c/a", "ok": True, "failure_kind": None,
                    "reason": "", "places": 1, "sha256": "0"})
    gh.recheck_static(records)
    assert seen == ["src0@static", "src1@static"]
    assert records[0]["static"]["ok"] is False and records[1]["static"]["ok"] is True
    assert "static" not in records[2]
    meta = {"tier": "device", "kernels": 3, "places": 3, "skipped": 0, "elapsed_s": 1.0,
            "jobs": 1, "box": 0, **gh.tally(kernels, 2)}
    md = gh.summarize(records, meta)
    assert "2 rejected (1 false rejections; 1 the kernel's own" in md
    assert "compile_error: caused by ValueError: numel |" in md


def test_shards_split_the_kernels_and_merge_into_one_summary(tmp_path: Path) -> None:
    """Two shards of one case's kernels gate disjoint halves; merged, they count as one run."""
    files = []
    for i in range(2):
        out = tmp_path / f"s{i}.json"
        proc = _script("--tier", "interpret", "--only-cases", "conv2d", "--shard", f"{i}/2",
                       "--box", "1e-9", "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        files.append(out)
    parts = [json.loads(f.read_text()) for f in files]
    whole, md = tmp_path / "all.json", tmp_path / "all.md"
    proc = _script("--merge", *map(str, files), "--out", str(whole), "--md", str(md))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(whole.read_text())
    assert data["kernels"] == sum(p["kernels"] for p in parts) == data["not_reached"] >= 2
    assert parts[0]["kernels"] - parts[1]["kernels"] in (0, 1)
    assert f"{data['kernels']} not reached" in md.read_text()
    bad = _script("--tier", "interpret", "--shard", "2/2", "--out", str(tmp_path / "x.json"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_kernels_an_earlier_run_passed_are_carried_not_gated(tmp_path: Path) -> None:
    first = tmp_path / "first.json"
    assert _script("--tier", "interpret", "--only-cases", "conv2d", "--box", "1e-9",
                   "--out", str(first)).returncode == 0
    gh = _module()
    todo = [k for k in gh.kernels()[0] if k.case is not None and k.case.name == "conv2d"]
    lineage_state = next(k for k in todo if k.origin == "lineage")
    earlier = {"records": [
        {"kernel": k.label, "case": k.case_ref, "ok": True, "failure_kind": None, "reason": "",
         "places": 1, **extra}
        for k, extra in ((lineage_state, {}),  # no sha256 (an older file): a lineage state
                         (todo[0], {"sha256": "0" * 64}))]}  # another source under that label
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    out = tmp_path / "again.json"
    proc = _script("--tier", "interpret", "--only-cases", "conv2d", "--box", "1e-9", "--out",
                   str(out), "--skip-passed", str(tmp_path / "earlier.json"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert [r["kernel"] for r in data["records"]] == [lineage_state.label]
    assert data["records"][0]["carried_from"].endswith("earlier.json")
    assert data["not_reached"] == len(todo) - 1 == json.loads(first.read_text())["kernels"] - 1
    bad = _script("--tier", "interpret", "--skip-passed", str(tmp_path / "none.json"),
                  "--out", str(out))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_a_kernel_whose_case_does_not_load_is_not_gated() -> None:
    gh = _module()
    k = gh.Kernel("heldout r s:1", "heldout", "gone/case", None, "triton", "src", None,
                  load_error="BadInputError: unknown case", places=["heldout r s:1"])
    assert gh.gate_batch([k], "interpret", 1) == [(None, "BadInputError: unknown case")]


def test_a_run_past_its_box_records_what_it_did_not_reach(tmp_path: Path) -> None:
    out, md = tmp_path / "h.json", tmp_path / "h.md"
    proc = _script("--tier", "interpret", "--only-cases", "softmax", "--box", "1e-9",
                   "--out", str(out), "--md", str(md))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["gated"] == 0 and data["records"] == [] and data["complete"] is False
    assert data["not_reached"] == data["kernels"] >= 1
    assert f"{data['kernels']} not reached" in md.read_text()


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = str(tmp_path / "h.json")
    for argv in (["--jobs", "0"], ["--only-cases", "softmax,no_such_case"],
                 ["--out", str(tmp_path / "missing" / "h.json")]):
        proc = _script("--out", out, *argv)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert not (tmp_path / "h.json").exists()
    assert "no_such_case" in _script("--out", out, "--only-cases", "no_such_case").stderr
