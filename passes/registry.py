"""The lazy pass registry: pass name -> a loader of its class.

`get_all_passes()` imports nothing but this table; a pass's module is imported when its loader
is called, so listing names stays cheap and never touches a GPU library.
"""
from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from kir.errors import BadInputError
from passes.base import Pass, Site, parse_pass_spec

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

# name -> (module, class). Order: Triton, CUDA, algorithmic (the order `klineage passes` lists).
_TABLE: dict[str, tuple[str, str]] = {
    # Triton; first the loads' bounds, which the constructs of the rules after it are written on
    # (removed last in a lineage)
    "masked-bounds": ("passes.triton.clamped", "MaskedBounds"),
    "tile-sizes": ("passes.triton.launch", "TileSizes"),
    "num-warps": ("passes.triton.launch", "NumWarps"),
    "software-pipelining": ("passes.triton.launch", "SoftwarePipelining"),
    "loop-depth": ("passes.triton.loop_depth", "LoopDepth"),
    "loop-unroll": ("passes.triton.loop_unroll", "LoopUnroll"),
    "loop-interchange": ("passes.triton.loop_interchange", "LoopInterchange"),
    "split-k": ("passes.triton.split_k", "SplitK"),
    # selection / scan / histogram constructs; listed before autotune so that a flag or width
    # the autotuner searches is pinned (autotune removed) before these passes remove it
    "radix-width": ("passes.triton.selection", "RadixWidth"),
    "histogram-primitive": ("passes.triton.selection", "HistogramPrimitive"),
    "scan-fusion": ("passes.triton.selection", "ScanFusion"),
    "early-exit": ("passes.triton.selection", "EarlyExit"),
    "autotune": ("passes.triton.autotune", "Autotune"),
    "grouped-ordering": ("passes.triton.ordering", "GroupedOrdering"),
    "persistent-grid": ("passes.triton.ordering", "PersistentGrid"),
    "tensor-core-dot": ("passes.triton.compute", "TensorCoreDot"),
    "exp2-fold": ("passes.triton.compute", "Exp2Fold"),
    "scale-after-max": ("passes.triton.scale_after_max", "ScaleAfterMax"),
    "even-k-fast-path": ("passes.triton.masking", "EvenKFastPath"),
    "causal-block-skip": ("passes.triton.masking", "CausalBlockSkip"),
    "tma-descriptors": ("passes.triton.tma", "TmaDescriptors"),
    "host-descriptors": ("passes.triton.host_descriptors", "HostDescriptors"),
    "grid-bound": ("passes.triton.grid_bound", "GridBound"),
    "k-major-operands": ("passes.triton.layout", "KMajorOperands"),
    "tf32x3-dot": ("passes.triton.precision", "Tf32x3Dot"),
    "reduce-before-contract": ("passes.triton.reduce_first", "ReduceBeforeContract"),
    # CUDA C++
    "row-cache": ("passes.cuda.row_cache", "RowCache"),
    "row-registers": ("passes.cuda.row_registers", "RowRegisters"),
    "launch-threads": ("passes.cuda.launch_threads", "LaunchThreads"),
    "vectorize-global": ("passes.cuda.memory", "VectorizeGlobal"),
    "smem-staging": ("passes.cuda.memory", "SmemStaging"),
    "restrict-readonly": ("passes.cuda.memory", "RestrictReadonly"),
    "pragma-unroll": ("passes.cuda.annotations", "PragmaUnroll"),
    "launch-bounds": ("passes.cuda.annotations", "LaunchBounds"),
    "warp-shuffle-reduce": ("passes.cuda.reduction", "WarpShuffleReduce"),
    "cp-async-pipeline": ("passes.cuda.pipeline", "CpAsyncPipeline"),
    "tma-bulk-copy": ("passes.cuda.tma", "TmaBulkCopy"),
    "warp-specialization": ("passes.cuda.roles", "WarpSpecialization"),
    "mma-intrinsics": ("passes.cuda.compute", "MmaIntrinsics"),
    "wgmma": ("passes.cuda.compute", "Wgmma"),
    "mma-micro-kernel": ("passes.cuda.mma_tile", "MmaMicroKernel"),
    "gemm-schedule": ("passes.cuda.gemm_schedule", "GemmSchedule"),
    # algorithmic intents (detection only; the LLM rewriter performs them)
    "radix-select": ("passes.algorithmic", "RadixSelect"),
    "gemm-phase-decomposition": ("passes.algorithmic", "GemmPhaseDecomposition"),
}


def _loader(module: str, cls: str) -> Callable[[], type[Pass]]:
    def load() -> type[Pass]:
        return getattr(importlib.import_module(module), cls)

    load.__name__ = f"load_{cls}"
    return load


@functools.cache
def get_all_passes() -> dict[str, Callable[[], type[Pass]]]:
    """Every registered pass name -> a function returning its class (imported on call)."""
    return {name: _loader(module, cls) for name, (module, cls) in _TABLE.items()}


def get_pass(name: str) -> type[Pass]:
    """The class of the pass called `name`; BadInputError if there is none."""
    loaders = get_all_passes()
    if name not in loaders:
        import difflib  # noqa: PLC0415

        close = difflib.get_close_matches(name, loaders, n=3)
        hint = f" (did you mean: {', '.join(close)}?)" if close else ""
        raise BadInputError(f"unknown pass '{name}'{hint}; `klineage passes` lists them")
    return loaders[name]()


def pass_from_spec(spec: str) -> Pass:
    """An instance from `"name{key=value,...}"`; BadInputError for an unknown name or option."""
    name, options = parse_pass_spec(spec)
    return get_pass(name).from_options(options)


def present_sites(ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
    """Every site where a registered pass of the IR's language is present, in registry order
    then source order (the `features` of a lineage state)."""
    if index is None:
        import anchors  # noqa: PLC0415

        index = anchors.build_index(ir)
    lang = str(getattr(ir.language, "value", ir.language))
    found: list[Site] = []
    for cls in all_pass_classes():
        if lang in cls.languages:
            found.extend(s for s in cls().sites(ir, index) if s.present)
    return found


def all_pass_classes() -> list[type[Pass]]:
    """Every pass class, in registry order (imports every pass module)."""
    return [load() for load in get_all_passes().values()]
