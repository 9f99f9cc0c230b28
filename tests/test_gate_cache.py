"""The verdict cache: keyed on everything a verdict depends on, concurrent-safe, self-healing."""
from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

import gate
from gate import FailureKind, Tier, Verdict
from gate.cache import VerdictCache, cache_key

SAXPY = Path(__file__).parent / "data" / "cases" / "saxpy"


def _verdict(i: int) -> Verdict:
    return Verdict(False, Tier.INTERPRET, "correctness", FailureKind.WRONG_OUTPUT, f"miss {i}")


def _writer(path: str, start: int) -> None:
    cache = VerdictCache(Path(path))
    for i in range(start, start + 40):
        cache.put(f"k{i}", _verdict(i))


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "v.sqlite"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), 40 * n)) for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    cache = VerdictCache(path)
    assert all(cache.get(f"k{i}").reason == f"miss {i}" for i in range(160))


def test_a_corrupt_cache_file_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "v.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    cache = VerdictCache(path)
    assert cache.get("anything") is None
    cache.put("k", _verdict(1))
    assert cache.get("k").reason == "miss 1"
    assert list(tmp_path.glob("v.sqlite.corrupt-*"))


def test_the_key_separates_its_parts() -> None:
    assert cache_key(["ab", "c"]) != cache_key(["a", "bc"])


def test_the_same_candidate_gets_the_cached_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path))
    source = (SAXPY / "saxpy_triton.py").read_text()
    first = gate.check(source, "triton", SAXPY, Tier.INTERPRET)
    second = gate.check(source, "triton", SAXPY, Tier.INTERPRET)
    assert first.ok and not first.cached
    assert second.cached and second == first
    changed = gate.check(source + "\n# an edit\n", "triton", SAXPY, Tier.INTERPRET)
    assert not changed.cached
    assert (tmp_path / "verdicts.sqlite").is_file()


def test_gate_json_says_cached_and_drops_the_old_phases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from lineage.cli import main

    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path))
    argv = ["gate", str(SAXPY / "saxpy_triton.py"), "--case", str(SAXPY), "--tier", "interpret",
            "--json"]
    assert main(argv) == 0
    fresh = json.loads(capsys.readouterr().out)
    assert fresh["cached"] is False and fresh["phases"]
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["cached"] is True and "phases" not in again
    assert {k: v for k, v in again.items() if k not in ("cached", "phases")} == \
        {k: v for k, v in fresh.items() if k not in ("cached", "phases")}
