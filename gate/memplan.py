"""How many input sets a device gate keeps, from the device memory free when it starts.

A gate draws its input sets and computes their references before candidate code loads: the
correctness seeds, the timed set, the set the autotune configuration calls run on, the sealed
set, the re-verification set (`fixed_sets` of them beside the seeds), and the crossovers of the
refill pool (`gate.refill`). Each set costs its inputs and, where the worker holds the
references (`gate.heldcompare`), its reference's bytes. Beside them the run needs working
memory: a call's clone of its inputs and the sealed call's copies, the candidate's outputs and
the sampled ones kept during the timed runs, the reference's own temporaries. A problem of
gigabytes cannot keep them all: `plan_sets` shrinks, in this order, the refill pool (to
`MIN_POOL` sets: the timed set and one crossover, so refilled calls still see fresh values in
the same buffers), the correctness seeds (to `MIN_SEEDS`: the check that the reference depends
on its inputs compares two), and parks what still does not fit in host memory (each parked
set costs a copy out and one back per use, so it is the last resort). Where even that does not
fit, the plan is *lean* (`lean_bytes`): every set and every held reference waits in host memory
between its uses, and a set is on the device only while a phase uses it (the phases do not
overlap: the device holds the largest phase's sets and temporaries, `LEAN_WORK`). The checks
are the same (fresh values on refill, the sealed call, the knockout calls); each use of a set
costs a copy in, and each held reference is compared from host memory a chunk at a time.

Where the case draws a set the same twice, a set that waits is dropped and drawn again on the
device where used (`gate.remake`: milliseconds, no host memory), so what waiting costs is a held
reference in host memory. Then the room a plan leaves beyond its largest phase (`room_beyond`)
keeps references on the device, and a plan that parks sets gives way to the lean plan where
that keeps more of them there (`with_redraw`). Of the sets that may wait, those that can be
drawn again leave the device first (`leaving`): a set that cannot (the sealed set, or any set
of a case that draws differently each time) keeps one of the plan's places on the device, so
that it costs no copy out and back.

Pure arithmetic on byte counts (no torch): the worker measures the numbers, the plan is
tested on the CPU with made-up ones.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K")
MIN_POOL = 2
MIN_SEEDS = 2
SLACK_BYTES = 3 << 30
"""Device memory left for what is not counted: the CUDA context's and libraries' workspaces,
the L2 flush buffer, the held comparison's float64 chunks, the candidate's own temporaries."""
PHASE_WORK = ((1.0, 1 + 2), (2.0, 2), (3.5, 0))
"""(input-set sizes, output sizes) in use beside the kept sets, per kind of phase (phases do not
overlap, so the largest counts): the timed runs (the rotation's buffers; the current output and
the two sampled ones: `gate.worker` drops an output before the next call and a sampled copy
before its replacement is made), the sealed call and each configuration call (its clone, or a
set brought back for it alone where its set waits off the device, and the inputs' hidden
copies; its output and the output's, which `guards.Seal` keeps as a copy of an input buffer; as
much as a correctness or knockout call's copy and output while the previous call's are still
held; a configuration call's seal also keeps a copy of the candidate's own buffers from before
it, which `SLACK_BYTES` covers where they are small), a refill crossover (its random mask, its
copy and a temporary). The sets are counted as kept from the first to the last phase, though
the worker lets each go after its last call (the seeds after the correctness calls, the
configuration set after the configuration calls, the first after the knockout calls, the sealed
set after the sealed call): the later phases have that much more room."""
LEAN_WORK = ((2.0, 2.0), (3.0, 1.0))
"""(input-set sizes, output sizes) on the device per kind of phase of a lean plan, where no set
stays between its uses (the largest counts): a call on a set brought back (the set, its clone
or, in a sealed or configuration call, the seal's kept copy of it while the inputs hold poison,
its output and the seal's kept copy of it), a reference step (the set, its clone, the
reference's output and its masked copy, or on the first set the precision probe's rounded
inputs and result, made before the masked copy); and the timed runs (the pool's two sets
brought back, the rotation's buffers, the current output: the sampled outputs wait in host
memory), the reference timed on the same buffers, a crossover made of the timed set and the
first seed's (`gate.refill.crossover` works a chunk at a time)."""
CAP_ENV = "KLINEAGE_GATE_MEMORY"
"""Environment variable: the most device memory, in bytes, a gate plans its sets for (a run
of several gates on one device reserves each its share; `plan_sets` takes the smaller of it
and the free memory)."""


def fixed_sets(device: bool) -> int:
    """The sets a gate draws beside its correctness seeds and refill crossovers: the timed set,
    the configuration set (the autotune configuration calls', fresh to them: answers kept from
    the correctness calls fit none of its values), the sealed set and, on the device, the
    re-verification set. Drawn whether or not the candidate turns out to have an autotuner: the
    references are made before its code loads."""
    return 4 if device else 3


def device_cap() -> int | None:
    """`CAP_ENV`'s bytes, or None where unset, not a number or not positive."""
    try:
        cap = int(float(os.environ.get(CAP_ENV, "")))
    except ValueError:
        return None
    return cap if cap > 0 else None


@dataclass(frozen=True, slots=True)
class SetPlan:
    """What one variant keeps. `seeds`: correctness seeds drawn; `pool`: sets the refilled
    calls rotate through (the timed set included); `parked`: sets that leave the device
    between their uses, drawn again where used or waiting in host memory (counted among those
    that may: the seeds after the first, the configuration, sealed and re-verification sets;
    `leaving`);
    `sets`: every set drawn; `lean`: every set and held reference waits in host memory between
    its uses (`lean_bytes`; `parked` then counts every set). `reason` says why fewer than asked
    (empty when none)."""

    seeds: int
    pool: int
    parked: int
    sets: int
    reason: str = ""
    lean: bool = False

    @property
    def reduced(self) -> bool:
        return bool(self.reason)


def working_bytes(set_bytes: int, out_bytes: int, reference_peak: int = 0) -> int:
    """Device memory a run needs beside its kept sets: the larger of what the first set's
    reference step took (`reference_peak`, measured: the reference's temporaries and output,
    its masked copy, the precision probe's rounded inputs) and what each kind of phase needs
    (`PHASE_WORK`), plus `SLACK_BYTES`."""
    calls = max(int(i * set_bytes + o * out_bytes) for i, o in PHASE_WORK)
    return max(reference_peak, calls) + SLACK_BYTES


def kept_bytes(seeds: int, pool: int, fixed: int, set_bytes: int, out_bytes: int,
               held: bool) -> int:
    """Device bytes of the kept sets: every set's inputs, and its reference where held."""
    per_set = set_bytes + (out_bytes if held else 0)
    return (seeds + fixed + pool - 1) * per_set


def gate_bytes(set_bytes: int, out_bytes: int, *, seeds: int, pool: int, fixed: int,
               held: bool = True, reference_peak: int = 0) -> int:
    """Device bytes a gate holds when it keeps every set asked for: its kept sets and its
    working memory (what `plan_sets` plans for when memory is plentiful, and never more)."""
    return (kept_bytes(max(1, seeds), max(1, pool), fixed, set_bytes, out_bytes, held)
            + working_bytes(set_bytes, out_bytes, reference_peak))


def lean_bytes(set_bytes: int, out_bytes: int, reference_peak: int = 0) -> int:
    """Device bytes a lean plan holds at its largest phase (`LEAN_WORK`, or the first set's
    reference step where it measured more: the set, its held reference and `reference_peak`),
    plus `SLACK_BYTES`."""
    calls = max(int(i * set_bytes + o * out_bytes) for i, o in LEAN_WORK)
    return max(calls, set_bytes + out_bytes + reference_peak) + SLACK_BYTES


def parked_bytes(set_bytes: int, out_bytes: int, *, pool: int, fixed: int, held: bool = True,
                 reference_peak: int = 0) -> int:
    """Device bytes of a plan that parks every set that may wait and keeps the rest (the first
    seed, the timed set and up to `MIN_POOL` - 1 crossovers) with their references, and its
    working memory."""
    p = min(MIN_POOL, max(1, pool))
    resident = 1 + (1 if fixed else 0) + p - 1
    per_set = set_bytes + (out_bytes if held else 0)
    return resident * per_set + working_bytes(set_bytes, out_bytes, reference_peak)


def least_bytes(set_bytes: int, out_bytes: int, *, pool: int, fixed: int, held: bool = True,
                reference_peak: int = 0) -> int:
    """Device bytes a gate holds at the least `plan_sets` ever plans: a lean plan's
    (`lean_bytes`; its phases are those of a plan that keeps its first sets, with those sets
    parked, so it never holds more than `parked_bytes`). Given at least this much, a gate keeps
    fewer sets and parks the rest instead of running out of memory. `pool`, `fixed` and `held`
    do not change it (the pool is at its least, no set stays, a reference is counted held)."""
    del pool, fixed, held
    return lean_bytes(set_bytes, out_bytes, reference_peak)


def least_plan(*, seeds: int, pool: int, fixed: int) -> SetPlan:
    """The plan `plan_sets` makes at the least: lean (`lean_plan`)."""
    return lean_plan(seeds, pool, fixed, "the least")


def parked_plan(*, seeds: int, pool: int, fixed: int) -> SetPlan:
    """The plan `plan_sets` makes given `parked_bytes`: the seeds and pool at their least, the
    first seed, the timed set and the crossovers on the device, every other set parked (less
    host memory than a lean plan's, `host_bytes`, for more device memory)."""
    s, p = min(MIN_SEEDS, max(1, seeds)), min(MIN_POOL, max(1, pool))
    return SetPlan(s, p, (s - 1) + max(0, fixed - 1), s + fixed + p - 1, "the first sets kept")


def host_bytes(plan: SetPlan, set_bytes: int, out_bytes: int, *, held: bool = True,
               samples: int = 2) -> int:
    """Host memory `plan` holds at the most: its parked sets with their held references and,
    lean, the held references kept beside the timed runs' `samples` sampled outputs (every
    reference stays until the gate ends, for naming whose answer a wrong output is)."""
    per_set = set_bytes + (out_bytes if held else 0)
    if not plan.lean:
        return plan.parked * per_set
    return plan.sets * per_set + samples * out_bytes


def plan_bytes(plan: SetPlan, set_bytes: int, out_bytes: int, *, held: bool,
               reference_peak: int = 0) -> int:
    """Device bytes `plan` holds at its largest phase: its resident sets (with their held
    references) and the working memory, or, lean, `lean_bytes`."""
    if plan.lean:
        return lean_bytes(set_bytes, out_bytes, reference_peak)
    per_set = set_bytes + (out_bytes if held else 0)
    return (plan.sets - plan.parked) * per_set + working_bytes(set_bytes, out_bytes, reference_peak)


def room_beyond(free_bytes: int, plan: SetPlan, per_set: int, work: int) -> int:
    """Device bytes left beyond what `plan` holds at its largest phase, given `free_bytes`
    (at most `device_cap()`) before its first set: its resident sets (`per_set` bytes each,
    with their held references) and `work` (`working_bytes`, or lean `lean_bytes`). A set
    the plan parks keeps its held reference on the device in this room, and a set that
    cannot be drawn again where used (`gate.remake`) may stay whole, instead of waiting in
    host memory: each comparison against a reference in host memory copies it in and, masked
    anew, back out."""
    cap = device_cap()
    if cap is not None:
        free_bytes = min(free_bytes, cap)
    planned = work if plan.lean else (plan.sets - plan.parked) * per_set + work
    return max(0, free_bytes - planned)


def with_redraw(plan: SetPlan, free_bytes: int, set_bytes: int, out_bytes: int, *, fixed: int,
                reference_peak: int = 0) -> SetPlan:
    """The plan to keep, made by `plan_sets` from the same figures, where every set it lets
    wait but the sealed one is drawn again on the device where used (`gate.remake`) instead
    of waiting in host memory: then a set's inputs cost nothing between its uses, and what
    does cost is a held reference in host memory (each comparison copies it in and back out).
    A plan that parks sets keeps its resident sets' references and those its room
    (`room_beyond`) holds; the lean plan of the same seeds and pool keeps those its larger room
    holds. The lean one where it keeps more references on the device, else `plan`."""
    if plan.lean or not plan.parked or out_bytes <= 0:
        return plan
    cap = device_cap()
    if cap is not None:
        free_bytes = min(free_bytes, cap)
    per_set = set_bytes + out_bytes
    kept = (plan.sets - plan.parked) + room_beyond(
        free_bytes, plan, per_set, working_bytes(set_bytes, out_bytes, reference_peak)) // out_bytes
    lean = lean_plan(plan.seeds, plan.pool, fixed)
    room = room_beyond(free_bytes, lean, per_set, lean_bytes(set_bytes, out_bytes, reference_peak))
    lean_kept = room // out_bytes
    if min(lean_kept, plan.sets) <= min(kept, plan.sets):
        return plan
    gib = 1 << 30
    return dataclasses.replace(lean, reason=(
        f"every input set leaves the device between its uses (drawn again where used), its "
        f"reference too where no room is left: {min(lean_kept, plan.sets)} of {plan.sets} "
        f"references stay on the device, against {min(kept, plan.sets)} where {plan.sets - plan.parked} "
        f"sets stayed; {set_bytes / gib:.1f} GiB of inputs and {out_bytes / gib:.1f} GiB of output "
        f"a set, {free_bytes / gib:.1f} GiB free on the device"))


def leaving(order: list[K], count: int, drawn_again: Callable[[K], bool]) -> list[K]:
    """The `count` sets of `order` (the sets a plan lets wait, the last the first to leave the
    device) that leave it: the sets that can be drawn again where used (`drawn_again`: each
    costs a draw on the device at its use) before the ones that cannot (each costs a copy out
    to host memory and one back per use), the last first within each. The same number of
    sets stays on the device whichever leave; a `drawn_again` true of none (or of all) leaves
    `order`'s last `count` sets."""
    if count <= 0:
        return []
    ranked = [k for k in order if not drawn_again(k)] + [k for k in order if drawn_again(k)]
    return ranked[max(0, len(ranked) - count):]


def recompute_bytes(set_bytes: int, out_bytes: int, reference_peak: int = 0) -> int:
    """Device bytes a comparison holds where its held reference is computed again there
    (`gate.remake.worth_computing_again`): the call's set and its clone, the call's output, the
    reference computed on the set and its masked copy; or, where the reference step measured
    more (`reference_peak`: beyond its set and held reference, its clone of the set, its output
    or masked copy and its temporaries), the call's set, clone and output, the held copy and
    that peak less the clone it does not make here; plus `SLACK_BYTES`."""
    return max(2 * set_bytes + 3 * out_bytes, set_bytes + 2 * out_bytes + reference_peak) + SLACK_BYTES


def samples_fit(free_bytes: int, out_bytes: int, samples: int) -> bool:
    """Whether a lean plan's timed runs keep their `samples` sampled outputs on the device:
    given `free_bytes` free once the pool is back (its sets and the rotation's buffers
    allocated), room for the samples, the current call's output and the next one's, and
    `SLACK_BYTES`. Otherwise each sample waits in host memory (a copy out and, to be compared,
    back)."""
    return (samples + 2) * out_bytes + SLACK_BYTES <= free_bytes


def lean_plan(seeds: int, pool: int, fixed: int, reason: str = "") -> SetPlan:
    """The lean plan of a variant asking `seeds` seeds and a `pool` of refill sets, with
    `fixed` further sets: `MIN_SEEDS` / `MIN_POOL` (or fewer where fewer are asked), every set
    parked between its uses."""
    s, p = min(MIN_SEEDS, max(1, seeds)), min(MIN_POOL, max(1, pool))
    total = s + fixed + p - 1
    return SetPlan(s, p, total, total, reason, lean=True)


def plan_sets(free_bytes: int, set_bytes: int, out_bytes: int, *, seeds: int, pool: int,
              fixed: int, held: bool, reference_peak: int = 0) -> SetPlan:
    """The sets one variant keeps, given `free_bytes` of device memory before its first set
    was drawn, the bytes of one input set and of one reference output, the seeds and pool
    asked for, `fixed` further sets (`fixed_sets`: timed, configuration, sealed and, on the
    device, re-verification) and whether references are held on the device. Never fewer than
    `MIN_POOL` / `MIN_SEEDS` (or the numbers asked, when smaller); what does not fit then is
    parked (the seeds after the first, the configuration, sealed and re-verification sets may
    be; the first seed, the timed set and the pool's crossovers stay: the refills copy from
    them); where those still do not fit and a lean plan holds less (`lean_bytes`), the plan is
    lean. `free_bytes` counts at most `device_cap()`."""
    cap = device_cap()
    if cap is not None:
        free_bytes = min(free_bytes, cap)
    want_seeds, want_pool = max(1, seeds), max(1, pool)
    work = working_bytes(set_bytes, out_bytes, reference_peak)
    per_set = set_bytes + (out_bytes if held else 0)

    def fits(s: int, p: int) -> bool:
        return kept_bytes(s, p, fixed, set_bytes, out_bytes, held) + work <= free_bytes

    s, p = want_seeds, want_pool
    while not fits(s, p) and p > min(MIN_POOL, want_pool):
        p -= 1
    while not fits(s, p) and s > min(MIN_SEEDS, want_seeds):
        s -= 1
    total = s + fixed + p - 1
    parkable = (s - 1) + max(0, fixed - 1)  # seeds after the first; all fixed but the timed set
    parked = 0
    if per_set > 0:
        room = max(0, free_bytes - work)
        resident = room // per_set
        parked = int(min(parkable, max(0, total - resident)))
    gib = 1 << 30
    held_bytes = (total - parked) * per_set + work
    lean = lean_bytes(set_bytes, out_bytes, reference_peak)
    if held_bytes > free_bytes and lean < held_bytes:
        return lean_plan(s, p, fixed, f"every input set leaves the device between its uses, "
                                      f"its reference too where no room is left: "
                                      f"{set_bytes / gib:.1f} GiB of inputs and "
                                      f"{out_bytes / gib:.1f} GiB of output a set, "
                                      f"{free_bytes / gib:.1f} GiB free on the device, "
                                      f"{lean / gib:.1f} GiB at the largest phase")
    reason = ""
    if (s, p) != (want_seeds, want_pool) or parked:
        reason = (f"{s} of {want_seeds} seeds, a refill pool of {p} of {want_pool} sets"
                  + (f", {parked} set(s) leaving the device between their uses" if parked else "")
                  + f": {set_bytes / gib:.1f} GiB of inputs"
                  + (f" and {out_bytes / gib:.1f} GiB of reference" if held else "")
                  + f" a set, {free_bytes / gib:.1f} GiB free on the device, "
                    f"{work / gib:.1f} GiB kept for the calls")
    return SetPlan(s, p, parked, total, reason)


__all__ = ["CAP_ENV", "LEAN_WORK", "MIN_POOL", "MIN_SEEDS", "PHASE_WORK", "SLACK_BYTES", "SetPlan",
           "device_cap", "fixed_sets", "gate_bytes", "host_bytes", "kept_bytes", "lean_bytes", "lean_plan",
           "least_bytes", "least_plan", "leaving", "parked_bytes", "parked_plan", "plan_bytes", "plan_sets",
           "recompute_bytes", "room_beyond", "samples_fit", "with_redraw", "working_bytes"]
