"""The values the gate returns: tiers, failure kinds, facts, correctness, timing and verdicts.

Everything here is a frozen value that round-trips through JSON (`to_json` / `from_json`); the
JSON form is what `klineage gate --json` prints and what the verdict cache stores. Nothing here
imports torch, triton or CUDA.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

from gate.target import TARGETS, TargetProperties


class Tier(str, Enum):
    """How far the gate goes. `auto` resolves to `device` on a GPU machine, else `interpret`."""

    STATIC = "static"        # parse + compile for sm_90a on any CPU, facts from the artifacts
    INTERPRET = "interpret"  # Triton interpreter at the case's small shapes, 3 seeds
    DEVICE = "device"        # real shapes on the GPU, 3 seeds, then timing
    EMULATE = "emulate"      # CUDA kernels emulated on the CPU (`gate.cudacpu`) at the small shapes
    AUTO = "auto"


class FailureKind(str, Enum):
    """Why a candidate was rejected. The value is the JSON spelling."""

    PARSE_ERROR = "parse_error"
    COMPILE_ERROR = "compile_error"
    IMPORT_ERROR = "import_error"          # the module does not import or has no `run`
    RUNTIME_ERROR = "runtime_error"        # `run` raised
    SHAPE_MISMATCH = "shape_mismatch"      # output count, shape or dtype differs from the reference
    BAD_OUTPUT = "bad_output"              # not a plain strided tensor (lazy, subclass, wrong device)
    NAN_OUTPUT = "nan_output"              # NaN/inf where the reference is finite (poison included)
    WRONG_OUTPUT = "wrong_output"          # relative-norm error over the tolerance
    PRECISION_DOWNGRADE = "precision_downgrade"  # error typical of a lower precision than the case's
    NO_LAUNCH = "no_launch"                # none of the candidate's own kernels launched
    FALLBACK = "fallback"                  # the answer does not come from the candidate's kernel
    TORCH_COMPUTE = "torch_compute"        # a torch compute op ran while the candidate ran
    HOST_COMPUTE = "host_compute"          # wrong when its inputs are visible only to its kernels
    REFERENCE_CALL = "reference_call"      # the candidate called the case's reference
    TAMPERING = "tampering"                # the candidate patched torch, timers, triton or the gate
    INPUT_MUTATION = "input_mutation"      # the candidate wrote into its inputs
    SIDE_STREAM = "side_stream"            # a launch outside the stream the gate times
    STALE_OUTPUT = "stale_output"          # output wrong after the timed runs (re-validation)
    REUSED_OUTPUT = "reused_output"        # output does not follow the values refilled into its inputs
    FOREIGN_KERNEL = "foreign_kernel"      # a GPU kernel ran that is neither the candidate's nor allowed
    FOREIGN_LIBRARY = "foreign_library"    # imports another array/GPU library or loads a native one
    TIMEOUT = "timeout"
    CRASH = "crash"                        # the worker died: signal, os._exit, killed
    OUT_OF_MEMORY = "out_of_memory"
    ILLEGAL_ADDRESS = "illegal_address"    # CUDA illegal / misaligned address
    BAD_CASE = "bad_case"                  # the case cannot tell a kernel from a constant
    UNSUPPORTED = "unsupported"            # the tier cannot run here (no GPU, CUDA on the interpreter)
    INTERNAL = "internal"                  # a fault of the gate itself, never cached
    GATE_FAULT = "gate_fault"              # the machine running the gate failed (a Ray worker or
                                           # node died, was preempted or cancelled): never cached,
                                           # the job may be retried


# Where a compile's dynamic shared memory size came from (`CompileFacts.dynamic_shared_source`).
DYNAMIC_SHARED_SOURCES = {
    "triton": "Triton's compiled metadata (`shared`): what its launcher passes to every launch",
    "launch": "the largest shared-memory size of the kernel's launches traced from `run`",
    "opt_in": "the largest dynamic shared size `run` allowed the kernel (its launch is not traced)",
    "unused": "none: the kernel declares no dynamic (`extern __shared__`) shared memory",
    "not_launched": "unknown: `run` was traced and does not launch this kernel on the target",
    "unknown": "unknown: `run` could not be traced as far as this kernel's launch",
}


@dataclass(frozen=True, slots=True)
class CompileFacts:
    """What one compile (one kernel, one configuration) says about itself.

    `registers` and `local_bytes` come from the cubin's `.nv.info` attributes;
    `static_shared_bytes` is the kernel's static shared memory (ptxas' report, else the size of
    `.nv.shared.<kernel>`); `dynamic_shared_bytes` is the dynamic shared memory the GPU would
    give each block of its launches on the target, None where unknown, and
    `dynamic_shared_source` says where it came from (see `DYNAMIC_SHARED_SOURCES`);
    `shared_bytes` is their sum, None where the dynamic part is unknown. `spill_stores` /
    `spill_loads` (bytes) come from the ptxas report and are None where the toolchain did not
    give one. `instructions` counts PTX instruction classes (see `gate.facts.PTX_CLASSES`);
    `sass` counts SASS opcode classes when a disassembler was found.
    """

    kernel: str
    config: Mapping[str, Any]
    registers: int | None
    static_shared_bytes: int
    dynamic_shared_bytes: int | None
    dynamic_shared_source: str
    local_bytes: int
    spill_stores: int | None
    spill_loads: int | None
    instructions: Mapping[str, int]
    sass: Mapping[str, int] | None = None
    compile_s: float = 0.0

    @property
    def spills(self) -> bool:
        """True when this compile spilled or uses local memory (a stack frame)."""
        return (self.spill_stores or 0) + (self.spill_loads or 0) + self.local_bytes > 0

    @property
    def shared_bytes(self) -> int | None:
        """Static plus dynamic shared memory per block; None where the dynamic part is unknown."""
        if self.dynamic_shared_bytes is None:
            return None
        return self.static_shared_bytes + self.dynamic_shared_bytes

    @property
    def shared_needed(self) -> int:
        """Shared memory per block the compile needs as far as known: static plus dynamic, or
        the static part where the dynamic part is unknown."""
        return self.static_shared_bytes if self.shared_bytes is None else self.shared_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "config": dict(self.config), "registers": self.registers,
            "shared_bytes": self.shared_bytes, "static_shared_bytes": self.static_shared_bytes,
            "dynamic_shared_bytes": self.dynamic_shared_bytes,
            "dynamic_shared_source": self.dynamic_shared_source, "local_bytes": self.local_bytes,
            "spill_stores": self.spill_stores, "spill_loads": self.spill_loads,
            "instructions": dict(self.instructions),
            "sass": dict(self.sass) if self.sass is not None else None,
            "compile_s": round(self.compile_s, 4),
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> CompileFacts:
        # Facts written before the split name only `shared_bytes` (Triton: static + dynamic;
        # CUDA: static only): read it as static, the dynamic part unknown.
        static = d.get("static_shared_bytes", d.get("shared_bytes") or 0)
        return CompileFacts(
            kernel=d["kernel"], config=MappingProxyType(dict(d["config"])),
            registers=d["registers"], static_shared_bytes=int(static),
            dynamic_shared_bytes=d.get("dynamic_shared_bytes"),
            dynamic_shared_source=d.get("dynamic_shared_source", "unknown"),
            local_bytes=d["local_bytes"],
            spill_stores=d["spill_stores"], spill_loads=d["spill_loads"],
            instructions=MappingProxyType(dict(d["instructions"])),
            sass=MappingProxyType(dict(d["sass"])) if d.get("sass") is not None else None,
            compile_s=float(d.get("compile_s", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class Facts:
    """Facts of every compile of a candidate (each kernel x configuration x shape variant).

    `target` names the compile target; `properties` are its device properties
    (`gate.target.TARGETS`), the ones the static tier answered host code's device queries with.
    """

    compiles: tuple[CompileFacts, ...]
    target: str = "sm_90a"

    @property
    def properties(self) -> TargetProperties | None:
        return TARGETS.get(self.target)

    @property
    def max_registers(self) -> int | None:
        regs = [c.registers for c in self.compiles if c.registers is not None]
        return max(regs) if regs else None

    @property
    def max_shared_bytes(self) -> int | None:
        """The most shared memory per block among compiles whose total is known; None when no
        compile's is (`dynamic_shared_unknown` counts the compiles left out)."""
        known = [c.shared_bytes for c in self.compiles if c.shared_bytes is not None]
        return max(known) if known else None

    @property
    def dynamic_shared_unknown(self) -> tuple[str, ...]:
        """Kernels (sorted, once each) of the compiles whose dynamic shared memory is unknown
        although the kernel may be launched (`dynamic_shared_source == "unknown"`)."""
        return tuple(sorted({c.kernel for c in self.compiles
                             if c.dynamic_shared_source == "unknown"}))

    @property
    def over_shared_limit(self) -> int:
        """Compiles asking for more shared memory per block than the target allows (they
        would not launch there)."""
        props = self.properties
        if props is None:
            return 0
        limit = props.shared_memory_per_block_optin
        return sum(1 for c in self.compiles if c.shared_needed > limit)

    @property
    def spills(self) -> bool:
        """True when any compile spilled or uses local memory (a stack frame)."""
        return any(c.spills for c in self.compiles)

    @property
    def instruction_classes(self) -> tuple[str, ...]:
        """Instruction classes (PTX) present in at least one compile, sorted."""
        return tuple(sorted({k for c in self.compiles for k, v in c.instructions.items() if v}))

    def to_json(self) -> dict[str, Any]:
        props = self.properties
        return {
            "target": self.target,
            "target_properties": props.to_json() if props is not None else None,
            "max_registers": self.max_registers,
            "max_shared_bytes": self.max_shared_bytes,
            "dynamic_shared_unknown": list(self.dynamic_shared_unknown),
            "over_shared_limit": self.over_shared_limit,
            "spills": self.spills,
            "instruction_classes": list(self.instruction_classes),
            "compiles": [c.to_json() for c in self.compiles],
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Facts:
        return Facts(tuple(CompileFacts.from_json(c) for c in d["compiles"]),
                     d.get("target", "sm_90a"))


@dataclass(frozen=True, slots=True)
class SeedResult:
    """Relative-norm error of one output check (`phase`: seed, timed or repeat)."""

    variant: str
    seed: int
    rel_err: float
    phase: str = "seed"


@dataclass(frozen=True, slots=True)
class Correctness:
    seeds: tuple[int, ...]
    max_rel_err: float
    results: tuple[SeedResult, ...] = ()
    check: str = ""
    """How outputs were compared, in words (`gate.Case.check_text`)."""
    lower_precision: tuple[str, ...] = ()
    """The variants on which the candidate computed in lower precision than the fp32 reference
    (`gate.precision`): a passing result, but a speedup partly bought with precision."""
    probe_err: tuple[tuple[str, float], ...] = ()
    """(variant, relative error of the reference on TF32-rounded inputs): the yardstick of
    `lower_precision` (`gate.precision`), where the case was probed."""

    def to_json(self) -> dict[str, Any]:
        return {
            "seeds": list(self.seeds),
            "max_rel_err": _finite_or_none(self.max_rel_err),
            "results": [{"variant": r.variant, "seed": r.seed, "phase": r.phase,
                         "rel_err": _finite_or_none(r.rel_err)} for r in self.results],
            "check": self.check,
            "lower_precision": list(self.lower_precision),
            "tf32_probe_err": {v: _finite_or_none(e) for v, e in self.probe_err},
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Correctness:
        def num(x: Any) -> float:
            return float("inf") if x is None else float(x)

        return Correctness(
            tuple(d["seeds"]), num(d["max_rel_err"]),
            tuple(SeedResult(r["variant"], r["seed"], num(r["rel_err"]), r.get("phase", "seed"))
                  for r in d.get("results", ())),
            str(d.get("check", "")), tuple(d.get("lower_precision", ())),
            tuple((str(v), num(e)) for v, e in d.get("tf32_probe_err", {}).items()))


@dataclass(frozen=True, slots=True)
class VariantTiming:
    variant: str
    candidate_ms: float
    reference_ms: float
    kernels: tuple[tuple[str, float], ...] = ()
    """GPU ms per call of each of the candidate's own kernels in its profiled timed run
    (function name, ms; the slowest first): where the time goes, not part of the figure."""
    picks: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()
    """The configuration each of the candidate's autotuners picked for this variant (kernel
    function name, its constexprs, num_warps and num_stages): what a sweep around the kernel's
    own configuration starts from."""
    reference_tf32_ms: float | None = None
    """fp32 cases: the reference timed the same way with TF32 allowed in matmuls and
    convolutions (`torch.backends.cuda.matmul.allow_tf32`, cuDNN's), the baseline a user
    picks when fp32 precision is not needed; None where not timed."""
    reference_compile_ms: float | None = None
    """The reference under `torch.compile(mode="max-autotune-no-cudagraphs")`, timed the same
    way in the same worker, where the gate was asked to (KLINEAGE_GATE_COMPILE=1); else None."""

    @property
    def speedup(self) -> float:
        return self.reference_ms / self.candidate_ms if self.candidate_ms > 0 else float("inf")

    @property
    def speedup_tf32(self) -> float | None:
        """The reference with TF32 allowed over the candidate (None where not timed)."""
        if self.reference_tf32_ms is None or self.candidate_ms <= 0:
            return None
        return self.reference_tf32_ms / self.candidate_ms


def picks_of(raw: Any) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    """Autotuners' picks as sent or stored ({kernel: {name: int}}), kept only as well-formed
    integer entries (a pick informs the search and judges nothing)."""
    if not isinstance(raw, Mapping):
        return ()
    out = []
    for kernel, config in list(raw.items())[:64]:
        if isinstance(config, Mapping):
            items = tuple((str(k)[:100], int(v)) for k, v in list(config.items())[:32]
                          if isinstance(v, int) and not isinstance(v, bool))
            if items:
                out.append((str(kernel)[:200], items))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Timing:
    """Median times (ms) over the case's shape variants, summed; speedup = reference / candidate.

    Both are timed with `triton.testing.do_bench` (25 ms warm-up, 100 ms of repetitions, L2
    flushed, median) in the same worker process, the reference before any candidate code loads,
    each once the parent has judged the outputs sent before and with the GPU to itself. The L2
    flush between timed calls also keeps the GPU busy for a few times the host's time to issue
    one call (`gate.worker._Runner.gpu_lead`), so that the host's launch overhead is not timed.
    The candidate is timed twice, under the gate's op trace and without it; the figure is the
    untraced one (the traced calls vouch for what the candidate does when timed).
    """

    candidate_ms: float
    reference_ms: float
    variants: tuple[VariantTiming, ...] = ()
    timed_s: float = 0.0  # wall seconds the worker spent in timed runs (not gate overhead)

    @property
    def speedup(self) -> float:
        return self.reference_ms / self.candidate_ms if self.candidate_ms > 0 else float("inf")

    @property
    def reference_tf32_ms(self) -> float | None:
        """The variants' references timed with TF32 allowed, summed; None unless every variant
        has one (`VariantTiming.reference_tf32_ms`)."""
        values = [v.reference_tf32_ms for v in self.variants]
        return sum(values) if values and all(v is not None for v in values) else None

    @property
    def speedup_tf32(self) -> float | None:
        """x/ref_tf32: the reference with TF32 allowed over the candidate; above `speedup`'s
        share of it, the speedup over the fp32 reference is partly precision."""
        ref = self.reference_tf32_ms
        return ref / self.candidate_ms if ref is not None and self.candidate_ms > 0 else None

    @property
    def reference_compile_ms(self) -> float | None:
        """The variants' references under torch.compile, summed; None unless every variant has
        one (`VariantTiming.reference_compile_ms`)."""
        values = [v.reference_compile_ms for v in self.variants]
        return sum(values) if values and all(v is not None for v in values) else None

    @property
    def speedup_compile(self) -> float | None:
        """x/compile: the reference under torch.compile over the candidate."""
        ref = self.reference_compile_ms
        return ref / self.candidate_ms if ref is not None and self.candidate_ms > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate_ms": self.candidate_ms, "reference_ms": self.reference_ms,
            "speedup": _finite_or_none(self.speedup), "timed_s": round(self.timed_s, 3),
            **({"reference_tf32_ms": self.reference_tf32_ms,
                "speedup_tf32": _finite_or_none(self.speedup_tf32)}
               if self.reference_tf32_ms is not None else {}),
            **({"reference_compile_ms": self.reference_compile_ms,
                "speedup_compile": _finite_or_none(self.speedup_compile)}
               if self.reference_compile_ms is not None else {}),
            "variants": [{"variant": v.variant, "candidate_ms": v.candidate_ms,
                          "reference_ms": v.reference_ms, "speedup": _finite_or_none(v.speedup),
                          **({"reference_tf32_ms": v.reference_tf32_ms}
                             if v.reference_tf32_ms is not None else {}),
                          **({"reference_compile_ms": v.reference_compile_ms}
                             if v.reference_compile_ms is not None else {}),
                          **({"kernels": dict(v.kernels)} if v.kernels else {}),
                          **({"picks": {k: dict(c) for k, c in v.picks}} if v.picks else {})}
                         for v in self.variants],
        }

    def picks(self) -> dict[str, dict[str, int]]:
        """Kernel -> the configuration its autotuner picked, from the variant that took the
        longest (its time weighs most in the figure); {} where no autotuner ran."""
        out: dict[str, dict[str, int]] = {}
        for v in sorted(self.variants, key=lambda v: -v.candidate_ms):
            for kernel, config in v.picks:
                out.setdefault(kernel, dict(config))
        return out

    def kernel_shares(self) -> dict[str, float]:
        """Each own kernel's share of the candidate's profiled GPU time over all variants
        (function name -> fraction; sums to 1), or {} when no profile was recorded."""
        total: dict[str, float] = {}
        for v in self.variants:
            for name, ms in v.kernels:
                total[name] = total.get(name, 0.0) + ms
        whole = sum(total.values())
        return {name: ms / whole for name, ms in total.items()} if whole > 0 else {}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Timing:
        return Timing(float(d["candidate_ms"]), float(d["reference_ms"]),
                      tuple(VariantTiming(v["variant"], float(v["candidate_ms"]),
                                          float(v["reference_ms"]),
                                          tuple((str(k), float(ms)) for k, ms
                                                in (v.get("kernels") or {}).items()),
                                          picks_of(v.get("picks")),
                                          _float_or_none(v.get("reference_tf32_ms")),
                                          _float_or_none(v.get("reference_compile_ms")))
                            for v in d.get("variants", ())),
                      float(d.get("timed_s", 0.0)))


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gate's answer for one candidate at one tier.

    `stage` is the last stage reached: parse, compile, import, correctness, anti_cheat, timing.
    `facts`, `correctness` and `timing` are None where the tier did not reach them. `flags`
    holds findings that do not reject (e.g. "speedup>10x: re-verified"). `cached` says the
    verdict came from the cache; it is not part of the JSON.
    """

    ok: bool
    tier: Tier
    stage: str
    failure_kind: FailureKind | None = None
    reason: str | None = None
    facts: Facts | None = None
    correctness: Correctness | None = None
    timing: Timing | None = None
    flags: tuple[str, ...] = ()
    cached: bool = field(default=False, compare=False)
    # Wall seconds of the worker's phases (start-up, references, load_candidate, correctness,
    # knockout, timing/repeat, reverify) in the order run: where a gate's time went.
    phases: tuple[tuple[str, float], ...] = field(default=(), compare=False)

    def to_json(self) -> dict[str, Any]:
        """The documented JSON form (`klineage gate --json`)."""
        out: dict[str, Any] = {
            "ok": self.ok, "tier": self.tier.value, "stage": self.stage,
            "failure_kind": self.failure_kind.value if self.failure_kind else None,
            "reason": self.reason,
        }
        if self.facts is not None:
            out["facts"] = self.facts.to_json()
        if self.correctness is not None:
            out["correctness"] = self.correctness.to_json()
        if self.timing is not None:
            out["timing"] = self.timing.to_json()
        out["flags"] = list(self.flags)
        if self.phases:
            out["phases"] = {name: round(sec, 3) for name, sec in self.phases}
        return out

    @staticmethod
    def from_json(d: Mapping[str, Any], *, cached: bool = False) -> Verdict:
        return Verdict(
            ok=bool(d["ok"]), tier=Tier(d["tier"]), stage=d["stage"],
            failure_kind=FailureKind(d["failure_kind"]) if d.get("failure_kind") else None,
            reason=d.get("reason"),
            facts=Facts.from_json(d["facts"]) if d.get("facts") else None,
            correctness=Correctness.from_json(d["correctness"]) if d.get("correctness") else None,
            timing=Timing.from_json(d["timing"]) if d.get("timing") else None,
            flags=tuple(d.get("flags", ())), cached=cached,
            phases=tuple((str(k), float(v)) for k, v in (d.get("phases") or {}).items()),
        )


def reject(tier: Tier, stage: str, kind: FailureKind, reason: str, **parts: Any) -> Verdict:
    """A rejecting verdict (shorthand used throughout the gate)."""
    return Verdict(False, tier, stage, kind, reason, **parts)


def _finite_or_none(x: float) -> float | None:
    # JSON has no NaN/inf; an unmeasurable error or speedup is written as null.
    return x if x == x and x not in (float("inf"), float("-inf")) else None


def _float_or_none(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
