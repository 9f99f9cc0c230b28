"""`klineage demo`: the main job — induce the gemm expert's lineage and write its report."""
from __future__ import annotations

from pathlib import Path

import click

from lineage.commands.induce import run_induction

EXPERT = Path(__file__).resolve().parents[2] / "experts" / "gemm" / "gemm_triton.py"
# The Triton interpreter runs a kernel one program at a time: 16 x 16 x 16 tiles on the small
# gemm shape take minutes per gate, so on the CPU the naive root keeps 32-wide tiles.
INTERPRET_PASSES = ("tile-sizes{floor=32}",)


@click.command("demo")
@click.option("--tier", type=click.Choice(["interpret", "device", "auto"]), default="interpret",
              show_default=True)
@click.option("--out", default="out/demo", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def command(tier: str, out: str, as_json: bool) -> None:
    """Induce the gemm expert's lineage (interpret tier on a CPU, device tier with timings on a
    GPU) into OUT and write OUT/report.html. At the interpret tier tiles shrink to 32, not 16
    (induce --pass 'tile-sizes{floor=32}'). A lineage already in OUT is kept, with its
    report, in OUT/previous-<UTC time>/. JSON: as `klineage induce --json`."""
    from gate import resolve_tier

    from lineage.commands._common import output_dir

    output_dir(out)
    run_tier, _ = resolve_tier(tier, "triton")
    specs = INTERPRET_PASSES if run_tier.value == "interpret" else ()
    run_induction(str(EXPERT), "gemm", tier, out, width=1, max_steps=32, max_rejections=40,
                  resume=False, as_json=as_json, pass_specs=specs, keep_previous=True)
