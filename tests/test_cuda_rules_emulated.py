"""Every CUDA pass, on every CUDA expert: the de-optimized state and the forward rewrite back
from it compute the case's answer when the expert's own host module runs them on the CPU
emulator (`gate.cudacpu`) at the case's small shapes. A wrong rewrite fails here without a GPU.

(The emulated device is sm_90a: a host that picks a kernel by architecture runs its Hopper
kernel there; the gemm expert's mma.sync kernel is run too, through the host's own switch.)
"""
from __future__ import annotations

from pathlib import Path

import pytest

import kir
from passes import PassContext, get_all_passes
from passes.base import Applied

torch = pytest.importorskip("torch")
cudacpu = pytest.importorskip("gate.cudacpu")

import gate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# (case, expert stem, host texts appended to its host module: each a way of running it)
EXPERTS = [("topk", "topk_cuda", ("",)),
           ("gemm", "gemm_cuda", ("", "\n\ndef run(a, b):\n    return matmul(a, b, kernel='mma')\n")),
           ("l2norm", "l2norm_cuda", ("",)), ("l2norm", "l2norm_plain", ("",)),
           ("l2norm", "l2norm_regs", ("",)), ("l2norm", "l2norm_narrow", ("",)),
           ("layernorm_bf16", "layernorm_cuda", ("",))]


def _cuda_passes() -> list[str]:
    return sorted(name for name, load in get_all_passes().items() if "cuda" in load().languages)


def _error(case: gate.Case, out: object, inputs: tuple) -> float:
    module = case.module()
    ref = module.reference(*inputs)
    refs = ref if isinstance(ref, tuple) else (ref,)
    if case.has_compare:
        return float(module.compare(out, refs, inputs))
    outs = out if isinstance(out, tuple) else (out,)
    return max(float(torch.linalg.vector_norm(o.double() - r.double()) /
                     max(torch.linalg.vector_norm(r.double()), 1e-30)) for o, r in zip(outs, refs))


def _check(case: gate.Case, source: str, host: Path, runs: tuple[str, ...], what: str) -> None:
    shape = dict(next(iter(case.small_shapes.values())))
    inputs = tuple(case.module().make_inputs(shape, 3, "cpu"))
    for extra in runs:
        out = cudacpu.run_host(source, host.read_text() + extra, *inputs, stem=host.stem)
        err = _error(case, out, inputs)
        assert err <= case.tolerance_for(str(shape.get("dtype", ""))), f"{what}{extra!r}: error {err:.3g}"


@pytest.fixture(autouse=True)
def _no_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    # NVRTC compiles each rule's output in the rule's own tests; here only the emulator runs.
    monkeypatch.setenv("KLINEAGE_CUDACPU_NVRTC", "0")


@pytest.mark.slow
@pytest.mark.parametrize("case_name,stem,runs", EXPERTS)
def test_cuda_rules_on_the_experts_compute_the_answer_on_the_emulator(case_name: str, stem: str,
                                                                      runs: tuple[str, ...]) -> None:
    case = gate.load_case(case_name)
    folder = ROOT / "experts" / case_name
    host = folder / f"{stem}.py"
    text = (folder / f"{stem}.cu").read_text()
    ir = kir.parse(text, "cuda")
    ctx = PassContext.for_case(case_name, tier="interpret")
    checked = 0
    for name in _cuda_passes():
        rule = get_all_passes()[name]()()
        present = [s for s in rule.sites(ir) if s.present]
        if not present:
            continue
        back = rule.deoptimize(ir, present[0], ctx)
        if not isinstance(back, Applied):
            continue
        _check(case, back.ir.text, host, runs, f"{name} de-optimized")
        checked += 1
        absent = [s for s in rule.sites(back.ir) if not s.present]
        if not absent:
            continue
        forward = rule.optimize(back.ir, absent[0], ctx)
        if isinstance(forward, Applied) and forward.ir.text not in (text, back.ir.text):
            _check(case, forward.ir.text, host, runs, f"{name} forward")
    assert checked > 0
