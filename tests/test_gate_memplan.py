"""How many input sets a device gate keeps (`gate.memplan`), on made-up free-memory figures,
and the parent's side of it: the seeds the worker says it kept are the ones judged."""
from __future__ import annotations

from pathlib import Path

import pytest

from gate.memplan import (CAP_ENV, LEAN_WORK, MIN_POOL, MIN_SEEDS, SLACK_BYTES, gate_bytes, host_bytes, kept_bytes,
                          lean_bytes, least_bytes, least_plan, leaving, parked_bytes, parked_plan, plan_bytes,
                          plan_sets, room_beyond, with_redraw, working_bytes)

GIB = 1 << 30
SAXPY = Path(__file__).resolve().parent / "data" / "cases" / "saxpy"


def _fits(plan, free: int, set_bytes: int, out_bytes: int, peak: int, held: bool) -> bool:
    resident = plan.sets - plan.parked
    per_set = set_bytes + (out_bytes if held else 0)
    return resident * per_set + working_bytes(set_bytes, out_bytes, peak) <= free


def test_a_small_problem_keeps_every_set_it_asked_for() -> None:
    plan = plan_sets(140 * GIB, GIB // 4, GIB // 4, seeds=3, pool=4, fixed=3, held=True)
    assert (plan.seeds, plan.pool, plan.parked, plan.sets) == (3, 4, 0, 9)
    assert not plan.reduced and plan.reason == ""


def test_a_large_problem_shrinks_the_pool_then_the_seeds_and_fits_without_parking() -> None:
    # 8 GiB of inputs and 8 GiB of output a set on a 140 GiB device (an H200's free memory)
    plan = plan_sets(140 * GIB, 8 * GIB, 8 * GIB, seeds=3, pool=4, fixed=3, held=True,
                     reference_peak=24 * GIB)
    assert plan.pool == MIN_POOL and plan.seeds == MIN_SEEDS and plan.parked == 0
    assert _fits(plan, 140 * GIB, 8 * GIB, 8 * GIB, 24 * GIB, held=True)
    assert "2 of 3 seeds" in plan.reason and "140.0 GiB free" in plan.reason
    # the same sizes when references go to the parent: only inputs stay, every set fits
    whole = plan_sets(140 * GIB, 8 * GIB, 8 * GIB, seeds=3, pool=4, fixed=3, held=False,
                      reference_peak=24 * GIB)
    assert (whole.seeds, whole.pool, whole.parked) == (3, 4, 0)
    # a pool of three fits where a pool of four does not: the pool shrinks one set at a time
    need = kept_bytes(3, 3, 3, GIB, 0, held=False) + working_bytes(GIB, 0)
    mid = plan_sets(need, GIB, 0, seeds=3, pool=4, fixed=3, held=False)
    assert (mid.seeds, mid.pool, mid.parked) == (3, 3, 0)
    assert plan_sets(need - 1, GIB, 0, seeds=3, pool=4, fixed=3, held=False).pool == 2


def test_what_still_does_not_fit_waits_in_host_memory_and_the_first_sets_stay() -> None:
    # three sets of 16 GiB and 35 GiB of working memory fit in 90 GiB; six sets do not
    plan = plan_sets(90 * GIB, 8 * GIB, 8 * GIB, seeds=3, pool=4, fixed=3, held=True,
                     reference_peak=24 * GIB)
    assert (plan.seeds, plan.pool) == (MIN_SEEDS, MIN_POOL)
    # parkable: the second seed, the sealed and the re-verification sets (never the first
    # seed, the timed set or the pool's crossover)
    assert plan.parked == 3 and "3 set(s) leaving the device between their uses" in plan.reason
    less = plan_sets(110 * GIB, 8 * GIB, 8 * GIB, seeds=3, pool=4, fixed=3, held=True,
                     reference_peak=24 * GIB)
    assert 0 < less.parked < 3
    assert _fits(less, 110 * GIB, 8 * GIB, 8 * GIB, 24 * GIB, held=True)


def test_where_the_first_sets_do_not_fit_beside_the_calls_every_set_waits_between_its_uses() -> None:
    """A lean plan: the seeds and pool at their least, every set parked (and its held reference:
    `plan_bytes` counts no set between phases), the device holding the largest phase."""
    plan = plan_sets(60 * GIB, 8 * GIB, 8 * GIB, seeds=3, pool=4, fixed=3, held=True,
                     reference_peak=24 * GIB)
    assert plan.lean and (plan.seeds, plan.pool) == (MIN_SEEDS, MIN_POOL)
    assert plan.parked == plan.sets == MIN_SEEDS + 3 + MIN_POOL - 1
    assert "every input set leaves the device between its uses" in plan.reason and "60.0 GiB free" in plan.reason
    # the largest phase: the first set's measured reference step (8 + 8 + 24) over the calls'
    assert plan_bytes(plan, 8 * GIB, 8 * GIB, held=True, reference_peak=24 * GIB) \
        == lean_bytes(8 * GIB, 8 * GIB, 24 * GIB) == 40 * GIB + SLACK_BYTES <= 60 * GIB
    # without that peak: two sets and two outputs (a call on a set brought back, the sealed
    # call), three sets and an output (the timed runs); for inputs alone, three sets
    assert lean_bytes(8 * GIB, 8 * GIB) == 32 * GIB + SLACK_BYTES
    assert lean_bytes(8 * GIB, 0) == 24 * GIB + SLACK_BYTES
    assert lean_bytes(GIB, 8 * GIB) == 18 * GIB + SLACK_BYTES
    assert max(i + o for i, o in LEAN_WORK) == 4  # four sets' or outputs' worth at most
    # a lean plan is never chosen where the parked one fits, nor where it would hold more
    assert not plan_sets(90 * GIB, 8 * GIB, 8 * GIB, seeds=3, pool=4, fixed=3, held=True,
                         reference_peak=24 * GIB).lean
    tight = plan_sets(10 * GIB, 8 * GIB, 8 * GIB, seeds=3, pool=4, fixed=3, held=True)
    assert tight.lean and plan_bytes(tight, 8 * GIB, 8 * GIB, held=True) > 10 * GIB  # the least


@pytest.mark.parametrize("sizes", [(8 * GIB, 8 * GIB, 0), (8 * GIB, 0, 0), (GIB // 100, 4 * GIB, 0),
                                   (GIB, GIB, 12 * GIB), (GIB // 4, GIB // 4, 0), (GIB, 8 * GIB, 0)])
def test_the_least_a_gate_holds_is_a_plan_that_fits_and_less_would_not(sizes) -> None:
    """Given `least_bytes`, a gate plans its least (a lean plan: every set waits in host memory
    between its uses) and it fits; given a byte less, its largest phase would not. The least
    is well under what the gate keeps when every set it may park is parked and the first ones
    stay (`parked_bytes`)."""
    set_bytes, out_bytes, peak = sizes
    least = least_bytes(set_bytes, out_bytes, pool=4, fixed=3, held=True, reference_peak=peak)
    plan = plan_sets(least, set_bytes, out_bytes, seeds=3, pool=4, fixed=3, held=True,
                     reference_peak=peak)
    assert (plan.seeds, plan.pool) == (MIN_SEEDS, MIN_POOL) and plan.lean
    held = plan_bytes(plan, set_bytes, out_bytes, held=True, reference_peak=peak)
    assert held == least
    assert not held <= least - 1
    parked = parked_bytes(set_bytes, out_bytes, pool=4, fixed=3, held=True, reference_peak=peak)
    assert least < parked
    full = gate_bytes(set_bytes, out_bytes, seeds=3, pool=4, fixed=3, reference_peak=peak)
    assert least < full
    assert not plan_sets(full, set_bytes, out_bytes, seeds=3, pool=4, fixed=3, held=True,
                         reference_peak=peak).reduced


def test_the_host_memory_of_a_plan_is_its_parked_sets_and_lean_every_set_and_reference() -> None:
    full = plan_sets(140 * GIB, GIB // 4, GIB // 4, seeds=3, pool=4, fixed=3, held=True)
    assert host_bytes(full, GIB // 4, GIB // 4) == 0
    parked = plan_sets(90 * GIB, 8 * GIB, 8 * GIB, seeds=3, pool=4, fixed=3, held=True,
                       reference_peak=24 * GIB)
    assert host_bytes(parked, 8 * GIB, 8 * GIB) == 3 * 16 * GIB
    assert host_bytes(parked, 8 * GIB, 8 * GIB, held=False) == 3 * 8 * GIB
    # lean: two seeds, timed, sealed, re-verification and one crossover, each with its
    # reference, and the timed runs' two sampled outputs
    lean = least_plan(seeds=3, pool=4, fixed=3)
    assert lean.lean and lean.sets == 6
    assert host_bytes(lean, 8 * GIB, 8 * GIB) == 6 * 16 * GIB + 2 * 8 * GIB
    assert least_bytes(8 * GIB, 8 * GIB, pool=4, fixed=3) == plan_bytes(lean, 8 * GIB, 8 * GIB, held=True)
    # given what the parked plan holds, a gate makes that plan: more device memory, less host
    kept = parked_plan(seeds=3, pool=4, fixed=3)
    given = parked_bytes(8 * GIB, 8 * GIB, pool=4, fixed=3)
    made = plan_sets(given, 8 * GIB, 8 * GIB, seeds=3, pool=4, fixed=3, held=True)
    assert (made.seeds, made.pool, made.parked, made.sets, made.lean) == (kept.seeds, kept.pool, kept.parked,
                                                                         kept.sets, False)
    assert plan_bytes(made, 8 * GIB, 8 * GIB, held=True) == given
    assert host_bytes(kept, 8 * GIB, 8 * GIB) == 3 * 16 * GIB < host_bytes(lean, 8 * GIB, 8 * GIB)
    assert plan_sets(given - 1, 8 * GIB, 8 * GIB, seeds=3, pool=4, fixed=3, held=True).lean


def test_the_working_memory_counts_the_measured_reference_step_and_the_calls() -> None:
    assert working_bytes(GIB, GIB) == 4 * GIB + SLACK_BYTES  # the timed runs: 1 input, 3 outputs
    assert working_bytes(GIB, 0) == int(3.5 * GIB) + SLACK_BYTES  # a crossover's temporaries
    assert working_bytes(GIB, GIB, reference_peak=20 * GIB) == 20 * GIB + SLACK_BYTES
    # a larger measured peak means fewer sets kept
    light = plan_sets(100 * GIB, 4 * GIB, 4 * GIB, seeds=3, pool=4, fixed=3, held=True)
    heavy = plan_sets(100 * GIB, 4 * GIB, 4 * GIB, seeds=3, pool=4, fixed=3, held=True,
                      reference_peak=60 * GIB)
    assert heavy.sets - heavy.parked < light.sets - light.parked


def test_fewer_seeds_or_pool_sets_asked_for_are_never_raised() -> None:
    plan = plan_sets(70 * GIB, 8 * GIB, 8 * GIB, seeds=1, pool=1, fixed=2, held=True)
    assert (plan.seeds, plan.pool) == (1, 1) and plan.parked == 1  # only the sealed set may wait
    lean = plan_sets(GIB, 8 * GIB, 8 * GIB, seeds=1, pool=1, fixed=2, held=True)
    assert lean.lean and (lean.seeds, lean.pool, lean.sets) == (1, 1, 3)


def test_the_parent_judges_the_seeds_the_worker_kept_and_refuses_others() -> None:
    from gate.cases import load_case
    from gate.runner import _Judge
    from gate.verdict import FailureKind, Tier

    case = load_case(SAXPY)
    judge = _Judge(case, Tier.INTERPRET, seeds=(11, 12, 13))
    judge.handle(("seeds", "default", [11, 12]))
    assert judge.verdict is None and judge.variant_seeds["default"] == (11, 12)
    missing = judge._missing()
    assert missing is not None and "seed 11" in missing  # still owed: the kept seeds' outputs
    for bad in ([12, 13], [11], []):  # not the first ones, fewer than MIN_SEEDS, none
        other = _Judge(case, Tier.INTERPRET, seeds=(11, 12, 13))
        other.handle(("seeds", "default", bad))
        assert other.verdict is not None and other.verdict.failure_kind is FailureKind.TAMPERING
    late = _Judge(case, Tier.INTERPRET, seeds=(11, 12, 13))
    late.handle(("refs_done",))
    late.handle(("seeds", "default", [11, 12]))  # after the references closed: candidate code
    assert late.verdict is not None and late.verdict.failure_kind is FailureKind.TAMPERING
    twice = _Judge(case, Tier.INTERPRET, seeds=(11, 12, 13))
    twice.handle(("seeds", "default", [11, 12, 13]))
    twice.handle(("seeds", "default", [11, 12]))
    assert twice.verdict is not None and twice.verdict.failure_kind is FailureKind.TAMPERING


@pytest.mark.gpu
def test_held_references_are_the_device_default_and_fit_on_a_large_problem(tmp_path: Path) -> None:
    """A problem whose five-plus input sets and held references do not all fit on the device
    (sized from its free memory) is gated with fewer sets and no out-of-memory."""
    import torch

    import gate

    free, _ = torch.cuda.mem_get_info()
    # one input set (and its output) of a sixteenth of the free memory: nine sets and their
    # references do not fit, the smallest plan (six) does
    rows = max(1024, int(free / 16 / 4 / 8192))
    problem = tmp_path / "scale_rows.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return x * 2.0\n\n\n"
        f"rows = {rows}\ncols = 8192\n\n\ndef get_inputs():\n    return [torch.rand(rows, cols)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    start = tmp_path / "scale_rows_start.py"
    start.write_text(
        "import torch\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)\n"
        "    keep = offs < n\n    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=keep) * 2.0, mask=keep)\n\n\n"
        "def run(x):\n    y = torch.empty_like(x)\n    n = x.numel()\n"
        "    scale[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)\n    return y\n")
    verdict = gate.check_file(start, gate.load_case(problem), "device", cache=False)
    assert verdict.ok, verdict.reason
    assert any("sized to the device's memory" in f for f in verdict.flags), verdict.flags


class _Chan:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, *msg) -> None:
        self.sent.append(msg)

    def reject(self, kind, stage, reason) -> None:
        raise AssertionError(f"rejected: {kind} {stage} {reason}")


def _runner_on_a_made_up_device(free: int, monkeypatch: pytest.MonkeyPatch):
    """A worker's run state for the saxpy case whose sets live on the CPU while it reads
    `free` bytes of device memory (and no reference step's peak): the device tier's planning
    without a GPU. Slack left out, so that the small sets decide."""
    import dataclasses

    from gate import memplan, worker
    from gate.channel import Job

    monkeypatch.setattr(memplan, "SLACK_BYTES", 0)
    monkeypatch.setenv("KLINEAGE_GATE_COMPARE", "worker")
    job = Job(tier="interpret", language="triton", module_path=str(SAXPY / "saxpy_triton.py"),
              cu_path=None, scratch=str(SAXPY), origin_dir=None, case_path=str(SAXPY / "case.py"),
              seeds=(11, 12, 13), extra_seed=14, reverify_seed=15, sealed_seed=16,
              refill_seed=2**30 + 5, refill_sets=4)
    chan = _Chan()
    run = worker._Runner(chan, job)
    run.job = dataclasses.replace(job, tier="device")
    run.device = "cuda"  # the plan's branch; the tensors stay where make_inputs puts them
    run._free_bytes = lambda: free
    run._reset_peak = lambda: 0
    run._peak_since = lambda start: 0
    run._draw = lambda variant, seed: tuple(run.case.make_inputs(dict(run.shapes[variant]), seed, "cpu"))
    return run, chan


def test_the_worker_keeps_the_sets_its_plan_allows_and_tells_the_parent_its_seeds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run, chan = _runner_on_a_made_up_device(10**12, monkeypatch)
    [variant] = list(run.shapes)
    set_bytes = run._set_bytes(run._draw(variant, 1))
    out_bytes = set_bytes // 2  # saxpy: two inputs, one output of their size
    run._variant_references(variant)
    assert ("seeds", variant, [11, 12, 13]) in chan.sent and not run.parked
    assert len(run.pools[variant].sets) == 4
    # room for the working memory and six sets (inputs and held references): the pool
    # shrinks to two sets, the seeds to two, and one set of seven waits in host memory
    per_set = set_bytes + out_bytes
    free = working_bytes(set_bytes, out_bytes) + 6 * per_set
    monkeypatch.setenv("KLINEAGE_GATE_REDRAW", "0")  # sets copied out where they wait
    run, chan = _runner_on_a_made_up_device(free, monkeypatch)
    run._variant_references(variant)
    plan = run.set_plans[variant]
    assert (plan.seeds, plan.pool, plan.parked) == (2, 2, 1)
    assert ("seeds", variant, [11, 12]) in chan.sent
    assert sorted(k[1] for k in run.originals) == ["config", "reverify", "sealed", "seed", "seed", "timed"]
    assert run.parked == {(variant, "reverify", 15)}  # the set used last waits
    assert [s for s, _ in run.pools[variant].sets][0] == 14 and len(run.pools[variant].sets) == 2
    assert any("sized to the device's memory" in m[1] for m in chan.sent if m[0] == "flag")
    # sets drawn again where used: the lean plan of the same seeds and pool keeps every held
    # reference on the device in its room (the plan above: six of seven), and nothing waits in
    # host memory but the sealed set, which stays whole in the room as well (references kept,
    # not computed again: KLINEAGE_GATE_RECOMPUTE=0)
    monkeypatch.delenv("KLINEAGE_GATE_REDRAW")
    monkeypatch.setenv("KLINEAGE_GATE_RECOMPUTE", "0")
    run, chan = _runner_on_a_made_up_device(free, monkeypatch)
    parked_refs: list[tuple] = []
    park_reference = run._park_reference
    run._park_reference = lambda key: (parked_refs.append(key), park_reference(key))
    run._variant_references(variant)
    plan = run.set_plans[variant]
    assert plan.lean and (plan.seeds, plan.pool) == (2, 2) and "7 of 7 references stay" in plan.reason
    # the pool's crossovers beyond the plan's one (a lean rotation brings one back at a time)
    # claim no room: theirs alone wait
    assert len(parked_refs) == run.job.refill_sets - plan.pool and {k[1] for k in parked_refs} == {"refill"}
    assert run.stayed[variant].count("reference") == 6
    assert run.stayed[variant].count("set") == 1 and (variant, "sealed", 16) not in run.parked
    # by default too (references computed again where compared, where that is cheaper than
    # their copies): a reference that stays in the room costs nothing at a comparison, so where
    # the room holds them all none is computed again but the crossovers' beyond the plan's
    # (made again from their two sets where compared, instead of waiting in host memory)
    monkeypatch.delenv("KLINEAGE_GATE_RECOMPUTE")
    run, chan = _runner_on_a_made_up_device(free, monkeypatch)
    run._variant_references(variant)
    assert run.recomputes[variant] and run.remakes[variant]
    assert sorted(run.recomputed) == sorted(parked_refs)
    assert run.stayed[variant].count("reference") == 6 and run.stayed[variant].count("set") == 1


def test_a_cap_in_the_environment_bounds_the_free_memory_a_gate_plans_for(monkeypatch) -> None:
    from gate import memplan

    monkeypatch.delenv(memplan.CAP_ENV, raising=False)
    full = plan_sets(140 * GIB, 4 * GIB, 4 * GIB, seeds=3, pool=4, fixed=3, held=True)
    monkeypatch.setenv(memplan.CAP_ENV, str(40 * GIB))
    capped = plan_sets(140 * GIB, 4 * GIB, 4 * GIB, seeds=3, pool=4, fixed=3, held=True)
    assert not full.reduced and capped.reduced and "40.0 GiB free" in capped.reason
    monkeypatch.delenv(memplan.CAP_ENV)
    assert capped == plan_sets(40 * GIB, 4 * GIB, 4 * GIB, seeds=3, pool=4, fixed=3, held=True)
    assert memplan.gate_bytes(4 * GIB, 4 * GIB, seeds=3, pool=4, fixed=3) > 40 * GIB
    for bad in ("", "abc", "-5", "0"):
        monkeypatch.setenv(memplan.CAP_ENV, bad)
        assert memplan.device_cap() is None
        assert plan_sets(140 * GIB, 4 * GIB, 4 * GIB, seeds=3, pool=4, fixed=3, held=True) == full


def test_the_ledger_counts_what_other_live_gates_planned(tmp_path: Path) -> None:
    """Two gates on one GPU: each plans from the free memory less what the other said it will
    still allocate; a dead worker's count is dropped."""
    import os
    import subprocess
    import sys

    from gate.memledger import Ledger

    mine = Ledger(tmp_path / "gpu.mem", pid=os.getpid())
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        theirs = Ledger(tmp_path / "gpu.mem", pid=other.pid)
        with mine.planning():
            assert mine.others() == 0
            theirs.reserve(40 * GIB)
            assert mine.others() == 40 * GIB and theirs.others() == 0
        theirs.reserve(5 * GIB)  # its sets are allocated now: its calls' work is left
        assert mine.others() == 5 * GIB
        mine.reserve(7 * GIB)
        assert theirs.others() == 7 * GIB
        mine.release()
        assert theirs.others() == 0
    finally:
        other.kill()
        other.wait()
    assert mine.others() == 0  # the other worker ended: its count goes
    assert not (tmp_path / "gpu.mem" / str(other.pid)).exists()
    assert Ledger.beside(None) is None


def test_a_worker_plans_around_what_another_gate_on_the_gpu_will_allocate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    from gate.memledger import Ledger

    run, chan = _runner_on_a_made_up_device(0, monkeypatch)
    [variant] = list(run.shapes)
    set_bytes = run._set_bytes(run._draw(variant, 1))
    per_set = set_bytes + set_bytes // 2
    room = working_bytes(set_bytes, set_bytes // 2) + 9 * per_set  # every set fits when alone
    run._free_bytes = lambda: room
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        Ledger(tmp_path / "gpu.mem", pid=other.pid).reserve(4 * per_set)
        run.ledger = Ledger(tmp_path / "gpu.mem")
        run._variant_references(variant)
        plan = run.set_plans[variant]
        assert plan.sets - plan.parked <= 5 and plan.reduced  # four sets' room is the other's
        # what this worker will still allocate is written for the others, then its calls' work
        assert Ledger(tmp_path / "gpu.mem", pid=other.pid).others() == run.work_bytes[variant]
        run.release_planned()
        assert Ledger(tmp_path / "gpu.mem", pid=other.pid).others() == 0
    finally:
        other.kill()
        other.wait()


def test_a_lean_worker_keeps_no_set_or_reference_on_the_device_between_uses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No room for the first sets beside the calls: the plan is lean; every set (the first
    seed's and the timed set too) and every held reference, the pool's among them, waits in
    host memory; the timed runs' rotation gets copies of the pool brought back."""
    import torch

    from gate import memplan

    monkeypatch.setenv("KLINEAGE_GATE_REDRAW", "0")  # every set copied out (`gate.remake` off)
    run, chan = _runner_on_a_made_up_device(0, monkeypatch)
    brought: list[int] = []

    def on_device(inputs):  # the made-up device's copy in: counted
        brought.append(1)
        return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)

    parked_refs: list[tuple] = []
    park_reference = run._park_reference
    run._on_device = on_device
    run._park_reference = lambda key: (parked_refs.append(key), park_reference(key))
    [variant] = list(run.shapes)
    run._variant_references(variant)
    plan = run.set_plans[variant]
    assert plan.lean and (plan.seeds, plan.pool) == (MIN_SEEDS, MIN_POOL)
    assert ("seeds", variant, [11, 12]) in chan.sent
    assert sorted(k[1] for k in run.originals) == ["config", "reverify", "sealed", "seed", "seed", "timed"]
    assert run.parked == set(run.originals)
    assert set(parked_refs) == set(run.vault)  # the pool's crossover's reference too
    assert any(k[1] == "refill" for k in run.vault)
    assert any("leaves the device between its uses" in m[1] for m in chan.sent if m[0] == "flag")
    set_bytes = run._set_bytes(run.originals[(variant, "timed", 14)])
    assert run.work_bytes[variant] == memplan.lean_bytes(set_bytes, set_bytes // 2)
    pool = run.pools[variant]
    # the job's crossovers all made; a rotation holds the timed set and one of them
    assert [s for s, _ in pool.sets][0] == 14 and len(pool.sets) == run.job.refill_sets
    assert brought  # the crossover was made of sets brought back
    for pick in (1, len(pool.sets) - 1, None):
        brought.clear()
        rotation = run._rotation(variant, pick)
        # brought back for the timed runs
        assert len(brought) == len(rotation.pool.sets) == MIN_POOL and rotation.pool is not pool
        assert rotation.pool.sets[0][0] == 14 and rotation.pool.seed(1) in [s for s, _ in pool.sets[1:]]
        if pick is not None:
            assert rotation.pool.seed(1) == pool.seed(pick)
    i = next(i for i, x in enumerate(pool.inputs(0)) if isinstance(x, torch.Tensor))
    assert torch.equal(rotation.buffers[i], pool.inputs(0)[i])
    assert rotation.buffers[i].data_ptr() != pool.inputs(0)[i].data_ptr()


def test_a_lean_worker_draws_its_sets_again_where_used_instead_of_copying_them_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A lean plan where the case draws a set the same twice (`gate.remake`): every set but the
    sealed one is dropped between its uses, the pool's crossover too, and drawn again where
    used; nothing but the sealed set is copied to host memory or back, and each set drawn
    again equals its first draw (the rotation's buffers hold the timed set's values)."""
    import torch

    from gate import memplan

    run, chan = _runner_on_a_made_up_device(0, monkeypatch)
    brought: list[int] = []

    def on_device(inputs):
        brought.append(1)
        return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)

    run._on_device = on_device
    [variant] = list(run.shapes)
    run._variant_references(variant)
    plan = run.set_plans[variant]
    assert plan.lean and run.parked == set(run.originals)
    dropped = {k for k in run.parked if k in run.recipes}
    assert {k[1] for k in run.parked - dropped} == {"sealed"}
    assert all(run.originals[k] == () for k in dropped)
    crossed = [k for k, r in run.recipes.items() if k[1] == "refill"]
    assert len(crossed) == run.job.refill_sets - 1 and all(run.recipes[k].crossed for k in crossed)
    run._send_parked_flags(variant)
    flags = [m[1] for m in chan.sent if m[0] == "flag"]
    assert any("5 of 6 input sets are dropped between their uses and drawn again" in f for f in flags), flags
    assert any("1 of 6 input sets wait in host memory" in f for f in flags), flags
    # the configuration set is drawn again from the seed it was drawn with, not the job's
    config = (variant, "config", 17)
    assert run.recipes[config].seed == run.draw_seeds[config] != 17
    again = run._redrawn(config)
    assert torch.equal(again[1], run._draw(variant, run.draw_seeds[config])[1])
    assert not torch.equal(again[1], run._draw(variant, 17)[1])
    timed = (variant, "timed", 14)
    set_bytes = run.recipes[timed].nbytes
    assert run.work_bytes[variant] == memplan.lean_bytes(set_bytes, set_bytes // 2)
    brought.clear()
    rotation = run._rotation(variant)
    assert not brought  # nothing copied in: the pool was drawn again
    first = run._draw(variant, 14)
    for got, want in zip(rotation.buffers, first):
        if isinstance(want, torch.Tensor):
            assert torch.equal(got, want)
    mixed = rotation.pool.inputs(1)
    assert any(isinstance(x, torch.Tensor) and not torch.equal(x, y) for x, y in zip(mixed, first))
    assert run.original((variant, "seed", 11)) is not run.original((variant, "seed", 11))


def test_the_room_beyond_a_plan_is_what_its_largest_phase_leaves_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lean plan holds its largest phase; a parked plan its resident sets and working memory:
    what the device has beyond that keeps parked sets' references (`gate.remake`) instead of
    host memory, and never counts more than the memory cap."""
    lean = plan_sets(60 * GIB, 6 * GIB, 6 * GIB, seeds=3, pool=4, fixed=3, held=True)
    assert lean.lean
    work = lean_bytes(6 * GIB, 6 * GIB)
    assert room_beyond(60 * GIB, lean, 12 * GIB, work) == 60 * GIB - work
    assert room_beyond(work - 1, lean, 12 * GIB, work) == 0
    parked = plan_sets(90 * GIB, 8 * GIB, 8 * GIB, seeds=3, pool=4, fixed=3, held=True)
    assert not parked.lean and parked.parked
    work = working_bytes(8 * GIB, 8 * GIB)
    resident = (parked.sets - parked.parked) * 16 * GIB + work
    assert resident <= 90 * GIB
    assert room_beyond(90 * GIB, parked, 16 * GIB, work) == 90 * GIB - resident
    monkeypatch.setenv(CAP_ENV, str(70 * GIB))
    assert room_beyond(90 * GIB, parked, 16 * GIB, work) == max(0, 70 * GIB - resident)


def _saxpy_lean_with_two_references_spare(monkeypatch: pytest.MonkeyPatch) -> tuple[str, int, int, int]:
    """The saxpy variant, its set's and output's bytes, and free memory for the lean plan's
    largest phase and two outputs more."""
    run, _ = _runner_on_a_made_up_device(0, monkeypatch)
    [variant] = list(run.shapes)
    set_bytes = run._set_bytes(run._draw(variant, 1))
    out_bytes = set_bytes // 2  # saxpy: two inputs, one output of their size
    return variant, set_bytes, out_bytes, lean_bytes(set_bytes, out_bytes) + 2 * out_bytes


def test_a_lean_worker_keeps_parked_sets_references_on_the_device_where_room_is_left(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Free memory for the lean plan's largest phase and two references more: the sets are
    drawn again where used, and the references compared most stay on the device (the first
    seed's, then the timed set's; with room for three, the pool's crossover's too), the rest
    wait in host memory, and the flags say so (references kept: KLINEAGE_GATE_RECOMPUTE=0)."""
    monkeypatch.setenv("KLINEAGE_GATE_RECOMPUTE", "0")
    variant, set_bytes, out_bytes, free = _saxpy_lean_with_two_references_spare(monkeypatch)
    run, chan = _runner_on_a_made_up_device(free, monkeypatch)
    parked_refs: list[tuple] = []
    park_reference = run._park_reference
    run._park_reference = lambda key: (parked_refs.append(key), park_reference(key))
    run._variant_references(variant)
    assert run.set_plans[variant].lean
    stayed = set(run.vault) - set(parked_refs)
    assert stayed == {(variant, "seed", 11), (variant, "timed", 14)}, stayed
    assert run.room[variant] == 0 and run.stayed[variant] == ["reference", "reference"]
    run._send_parked_flags(variant)
    flags = [m[1] for m in chan.sent if m[0] == "flag"]
    assert any("2 held reference(s) and 0 whole set(s)" in f for f in flags), flags
    run, chan = _runner_on_a_made_up_device(free + out_bytes, monkeypatch)
    parked_refs.clear()
    park_reference = run._park_reference
    run._park_reference = lambda key: (parked_refs.append(key), park_reference(key))
    run._variant_references(variant)
    stayed = set(run.vault) - set(parked_refs)
    assert {k[1] for k in stayed} == {"seed", "timed", "refill"} and (variant, "seed", 12) not in stayed
    # asked for a lean plan: nothing stays
    monkeypatch.setenv("KLINEAGE_GATE_SETS", "lean")
    run, _ = _runner_on_a_made_up_device(free, monkeypatch)
    run._variant_references(variant)
    assert not run.stayed


def test_a_lean_worker_computes_references_again_and_keeps_the_sealed_set_in_the_room_left(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Free memory for the lean plan's largest phase and two references more: the references
    of the sets drawn again are dropped and computed again where compared (they come after
    the references that cannot be), the crossover's and the sealed set's references take the
    room; with room for a whole set more, the sealed set (drawn with a secret seed: never
    drawn again) stays whole
    on the device instead of going to host memory. Where a comparison computing its reference would hold
    more than the room beyond the plan (a reference step of a large peak), the references
    wait as before, flagged."""
    variant, set_bytes, out_bytes, free = _saxpy_lean_with_two_references_spare(monkeypatch)
    run, chan = _runner_on_a_made_up_device(free, monkeypatch)
    run._variant_references(variant)
    assert run.set_plans[variant].lean and run.recomputes[variant]
    assert {k[1] for k in run.recomputed} == {"seed", "timed", "config", "reverify"}
    # the sealed set's reference and the crossover's stay; the sealed set waits in host memory
    assert run.stayed[variant] == ["reference", "reference"] and (variant, "sealed", 16) in run.parked
    run, chan = _runner_on_a_made_up_device(free + set_bytes, monkeypatch)
    run._variant_references(variant)
    assert sorted(run.stayed[variant]) == ["reference", "set"] and (variant, "sealed", 16) not in run.parked
    run._send_parked_flags(variant)
    flags = [m[1] for m in chan.sent if m[0] == "flag"]
    # the seeds', the timed, configuration and re-verification sets' and the two crossovers'
    # beyond the plan's
    assert any("7 held reference(s) are dropped between their uses and computed again" in f
               for f in flags), flags
    assert {k[1] for k in run.recomputed} == {"seed", "timed", "config", "reverify", "refill"}
    # a reference step peaking at ten outputs beyond its set and output, memory for the plan's
    # largest phase alone: a comparison that computes its reference needs an output more
    run, chan = _runner_on_a_made_up_device(lean_bytes(set_bytes, out_bytes, 10 * out_bytes), monkeypatch)
    run._peak_since = lambda start: 10 * out_bytes + set_bytes + out_bytes
    run._variant_references(variant)
    assert not run.recomputed and run.recomputes[variant] is False
    assert any("a comparison would hold" in m[1] for m in chan.sent if m[0] == "flag")


def test_where_sets_are_drawn_again_a_plan_keeps_the_most_references_on_the_device() -> None:
    """`with_redraw`: 6 GiB of inputs and of output a set in 70 GB: the plan that keeps the
    first sets (three resident, little room) keeps three references on the device, the lean
    one (every set drawn again where used) all six in its room: lean. With a small output the
    plan that keeps the first sets already keeps every reference: kept. A plan that parks
    nothing, or is lean already, stays."""
    free = 70 * 10**9
    parked = plan_sets(free, 6 * GIB, 6 * GIB, seeds=3, pool=4, fixed=3, held=True, reference_peak=6 * GIB)
    assert parked.parked and not parked.lean
    chosen = with_redraw(parked, free, 6 * GIB, 6 * GIB, fixed=3, reference_peak=6 * GIB)
    assert chosen.lean and (chosen.seeds, chosen.pool, chosen.sets) == (parked.seeds, parked.pool, parked.sets)
    assert f"{parked.sets} of {parked.sets} references stay on the device" in chosen.reason
    room = room_beyond(free, chosen, 12 * GIB, lean_bytes(6 * GIB, 6 * GIB, 6 * GIB))
    assert room >= parked.sets * 6 * GIB
    small = plan_sets(free, 8 * GIB, 1 << 20, seeds=3, pool=4, fixed=3, held=True)
    assert small.parked and with_redraw(small, free, 8 * GIB, 1 << 20, fixed=3) is small
    roomy = plan_sets(10**12, 6 * GIB, 6 * GIB, seeds=3, pool=4, fixed=3, held=True)
    assert with_redraw(roomy, 10**12, 6 * GIB, 6 * GIB, fixed=3) is roomy
    lean = plan_sets(40 * GIB, 6 * GIB, 6 * GIB, seeds=3, pool=4, fixed=3, held=True)
    assert lean.lean and with_redraw(lean, 40 * GIB, 6 * GIB, 6 * GIB, fixed=3) is lean


def test_a_case_whose_draw_is_slower_than_a_copy_in_keeps_its_sets_in_host_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The redraw probe is timed: a draw (here made slow) that takes longer than copying the
    set in from host memory (`gate.remake.worth_drawing_again`) leaves every set copied out,
    and a flag says why."""
    import time

    import torch

    run, chan = _runner_on_a_made_up_device(0, monkeypatch)
    draw = run._draw

    def slow(variant, seed):
        time.sleep(0.12)
        return draw(variant, seed)

    run._draw = slow
    run._on_device = lambda inputs: tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)
    [variant] = list(run.shapes)
    run._variant_references(variant)
    assert run.set_plans[variant].lean and run.parked and not run.recipes
    assert run.redraws == {variant: False}
    flags = [m[1] for m in chan.sent if m[0] == "flag"]
    assert any("not drawn again" in f and "longer than a copy in" in f for f in flags), flags


def test_the_sets_that_leave_the_device_are_those_drawn_again_before_those_that_cannot_be() -> None:
    """`leaving`: of the sets a plan lets wait (the last the first to leave), those drawn again
    where used leave before those that cannot be; the count never changes, and where every set
    (or none) can be drawn again the last ones leave, as before."""
    order = ["seed", "sealed", "reverify"]
    assert sorted(leaving(order, 2, lambda k: k != "sealed")) == ["reverify", "seed"]
    assert leaving(order, 1, lambda k: k != "sealed") == ["reverify"]
    assert sorted(leaving(order, 3, lambda k: k != "sealed")) == sorted(order)
    assert leaving(order, 2, lambda k: False) == ["sealed", "reverify"]
    assert leaving(order, 2, lambda k: True) == ["sealed", "reverify"]
    assert leaving(order, 0, lambda k: True) == [] and leaving([], 2, lambda k: True) == []
    assert leaving(["a", "b", "c", "d"], 2, lambda k: k in ("a", "c")) == ["a", "c"]


def test_a_set_that_cannot_be_drawn_again_keeps_its_place_and_a_seed_set_is_drawn_again_instead(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Room for the working memory, five sets with their references and two references more:
    the plan keeps two seeds and a pool of two, and two of its seven sets leave the device (the
    lean plan keeps no more references there, so it is kept). Where the case draws a set the
    same twice, the sealed set (never drawn again: its seed is kept nowhere) stays on the
    device and the configuration set leaves with the re-verification set (the two used last of
    those drawn again), both drawn again where used: nothing waits in host memory, and the
    flags say so. Where the case draws differently each time (KLINEAGE_GATE_REDRAW=0 here),
    the sets used last leave as before, both to host memory."""
    run, _ = _runner_on_a_made_up_device(0, monkeypatch)
    [variant] = list(run.shapes)
    set_bytes = run._set_bytes(run._draw(variant, 1))
    out_bytes = set_bytes // 2  # saxpy: two inputs, one output of their size
    free = working_bytes(set_bytes, out_bytes) + 5 * (set_bytes + out_bytes) + 2 * out_bytes
    sealed, config, reverify = (variant, "sealed", 16), (variant, "config", 17), (variant, "reverify", 15)

    def flags(chan) -> list[str]:
        return [m[1] for m in chan.sent if m[0] == "flag"]

    run, chan = _runner_on_a_made_up_device(free, monkeypatch)
    run._variant_references(variant)
    plan = run.set_plans[variant]
    assert not plan.lean and (plan.seeds, plan.pool, plan.parked) == (2, 2, 2)
    assert run.parked == {config, reverify} and set(run.recipes) >= {config, reverify}
    assert sealed not in run.parked and sealed not in run.recipes and run.originals[sealed]
    assert run.original(config) is not run.original(config)  # drawn again at each use
    run._send_parked_flags(variant)
    assert any("2 set(s) leaving the device between their uses" in f for f in flags(chan)), flags(chan)
    assert any("2 of 6 input sets are dropped between their uses and drawn again" in f
               for f in flags(chan)), flags(chan)
    assert not any("wait in host memory" in f for f in flags(chan)), flags(chan)
    monkeypatch.setenv("KLINEAGE_GATE_REDRAW", "0")
    run, chan = _runner_on_a_made_up_device(free, monkeypatch)
    run._variant_references(variant)
    assert run.set_plans[variant] == plan and run.parked == {sealed, reverify} and not run.recipes
    run._send_parked_flags(variant)
    assert any("2 of 6 input sets wait in host memory" in f for f in flags(chan)), flags(chan)
    assert not any("drawn again" in f for f in flags(chan)), flags(chan)


@pytest.mark.parametrize("lean", [False, True])
def test_a_gate_tells_the_ledger_the_room_its_waiting_sets_can_take_not_all_free_memory(
        lean: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a gate writes for the other gates of its GPU while it draws its sets: its plan
    and the room its waiting sets may take, each a set and its reference at most. It does not
    grow with the free memory: a gate that wrote all the room there was left the gates planning
    beside it none (a lean plan for each, every set drawn again at each use)."""
    from gate.memledger import Ledger

    written: dict[int, int] = {}
    variant, set_bytes, out_bytes, tight = _saxpy_lean_with_two_references_spare(monkeypatch)
    roomy = {False: 10**12, True: tight}[lean]
    for free in (roomy, 10 * roomy):
        run, _ = _runner_on_a_made_up_device(free, monkeypatch)
        run.ledger = Ledger(tmp_path / f"gpu{free}.mem")
        reserve = run.ledger.reserve
        run.ledger.reserve = lambda nbytes, free=free: (written.setdefault(free, nbytes), reserve(nbytes))
        run._variant_references(variant)
        plan = run.set_plans[variant]
        if free == roomy:
            assert plan.lean is lean
    if lean:
        # the lean plan has the room beyond it for two references at the tight size: all of it
        # is claimed; ten times the memory claims at most every set and crossover
        assert written[tight] <= tight
        assert written[10 * tight] <= lean_bytes(set_bytes, out_bytes) + 16 * (set_bytes + out_bytes)
    else:
        assert written[roomy] == written[10 * roomy] < 10**10
