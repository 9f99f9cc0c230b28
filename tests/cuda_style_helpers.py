"""What the tests of CUDA rules on user-styled kernels share: a kernel folder (its `.cu`, its
host module beside it, its case), a rule applied at every open site it takes with the launch's
block read from the host, and a source's error against the case's reference when run through
that host on the CPU emulator (`gate.cudacpu`) at the case's small shape."""
from __future__ import annotations

from pathlib import Path

import kir
from passes import Applied, PassContext, get_pass
from passes.cuda import recognize as R


def start(folder: Path) -> tuple[Path, Path]:
    """The folder's `.cu` and its host module."""
    cu = next(folder.glob("*.cu"))
    return cu, cu.with_suffix(".py")


def context(ir: kir.KernelIR, host: Path) -> PassContext:
    """The facts the optimize loop gives a rule: sm_90, and the block the host launches."""
    launch = R.launch_block(ir, host=host.read_text())
    return PassContext(facts={"arch": "sm_90", **({"block_threads": launch.threads}
                                                  if launch.threads else {})})


def rule_output(folder: Path, rule: str, **options: object) -> tuple[str, int, list[str]]:
    """The kernel after `rule` acted at every open site it takes, how many times it acted,
    and its refusals."""
    cu, host = start(folder)
    ir = kir.parse_file(cu)
    ctx = context(ir, host)
    p = get_pass(rule).from_options(options)
    applied, refusals = 0, []
    for _ in range(8):
        for site in [s for s in p.sites(ir) if not s.present]:
            result = p.optimize(ir, site, ctx)
            if isinstance(result, Applied):
                ir, applied = result.ir, applied + 1
                break
            refusals.append(getattr(result, "reason", getattr(result, "error", "")))
        else:
            break
    return ir.text, applied, refusals


def emulated_error(folder: Path, source: str) -> tuple[float, float]:
    """(relative error, tolerance) of the host module running `source` on the emulator at the
    case's small shape, against the case's reference."""
    import torch  # noqa: PLC0415

    import gate  # noqa: PLC0415
    from gate import cudacpu  # noqa: PLC0415

    case = gate.load_case(folder)
    shape = dict(next(iter(case.small_shapes.values())))
    inputs = tuple(case.module().make_inputs(shape, 5, "cpu"))
    _cu, host = start(folder)
    out = cudacpu.run_host(source, host, *inputs, stem=host.stem)
    ref = case.module().reference(*inputs)
    err = float(torch.linalg.vector_norm(out.double() - ref.double()) /
                max(float(torch.linalg.vector_norm(ref.double())), 1e-30))
    return err, case.tolerance_for(shape["dtype"])
