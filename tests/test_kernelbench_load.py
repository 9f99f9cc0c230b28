"""KernelBench-style problem files load in every style the benchmark writes them: sizes from
expressions and tuples, init arguments of every kind, models with constraints of their own,
sizes too large to allocate; interpret-tier sizes only when asked for; one line for a file that
cannot be used; `klineage cases DIR` goes on past such a file; and the precision policy (the
benchmark's own check, a lower-precision candidate flagged rather than refused)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import gate
from gate import FailureKind, Tier, kernelbench
from gate.check import prepare
from kir.errors import BadInputError
from lineage.cli import main

PROBLEMS = Path(__file__).parent / "data" / "problems"
PRECISION = PROBLEMS / "precision"


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Small sizes are searched for here, not read from a cache an earlier run left."""
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _small(name: str) -> dict:
    return dict(gate.load_case(PROBLEMS / name).small_shapes["default"])


def _check_small(name: str) -> dict:
    """The small sizes of a problem, after building and running them on the CPU: every input
    and Model tensor together within the interpret tier's budget."""
    case = gate.load_case(PROBLEMS / name)
    small = dict(case.small_shapes["default"])
    module = case.module()
    inputs = module.make_inputs(small, 3, "cpu")
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    assert sum(t.numel() for t in tensors) <= kernelbench.SMALL_ELEMENTS
    out = module.reference(*inputs)
    assert torch.isfinite(out).all()
    return small


@pytest.mark.parametrize("name, sizes", [
    ("expr_sizes_matmul.py", {"M": 2048, "K": 8192, "N": 2048}),
    ("tuple_shape_reduce.py", {"batch_size": 64, "input_shape": [16384, 48], "dim": 1}),
    ("init_args_conv_bias.py", {"batch_size": 128, "in_channels": 16, "out_channels": 64,
                                "height": 128, "width": 128, "kernel_size": [3, 5],
                                "stride": [1, 2], "bias_shape": [64, 1, 1]}),
    ("huge_scan.py", {"batch_size": 32768, "input_shape": [32768], "dim": 1}),
])
def test_sizes_are_read_from_whatever_expression_wrote_them(name: str, sizes: dict,
                                                           tmp_path: Path) -> None:
    shutil.copy(PROBLEMS / name, tmp_path / name)  # a path of its own: nothing derived for it yet
    case = gate.load_case(tmp_path / name)
    assert dict(case.shapes["default"]) == {**sizes, "dtype": "fp32"}
    # The device and static tiers need no small sizes: none were derived.
    assert "not derived" in repr(case.small_shapes)


def test_sizes_written_as_products_are_reduced_together() -> None:
    small = _check_small("expr_sizes_matmul.py")
    assert small["M"] < 2048 and 8192 // small["K"] == 2048 // small["M"] == 2048 // small["N"]


def test_a_shape_held_in_a_tuple_is_reduced_element_by_element() -> None:
    small = _check_small("tuple_shape_reduce.py")
    assert isinstance(small["input_shape"], list) and small["input_shape"][0] < 16384
    assert small["dim"] == 1  # a small integer is no size to reduce


def test_a_global_computed_from_another_follows_it() -> None:
    """`bias_shape = (out_channels, 1, 1)`: reduced out_channels, the bias shape follows;
    tuple init arguments (kernel_size, stride) and a float scale pass through."""
    small = _check_small("init_args_conv_bias.py")
    assert small["out_channels"] < 64 and small["bias_shape"] == [small["out_channels"], 1, 1]
    assert small["kernel_size"] == [3, 5] and small["stride"] == [1, 2]


def test_the_models_own_constraints_are_kept() -> None:
    """GroupNorm needs channels divisible by groups: sizes that break it are backed off."""
    small = _check_small("groupnorm_divisible.py")
    assert small["features"] % small["num_groups"] == 0
    assert small["dim1"] * small["dim2"] < 512 * 512


def test_sizes_too_large_to_allocate_load_and_reduce() -> None:
    small = _check_small("huge_scan.py")
    assert small["batch_size"] * small["input_shape"][0] <= kernelbench.SMALL_ELEMENTS


def test_no_small_size_loads_for_the_device_tier_and_the_interpret_tier_says_why() -> None:
    path = PROBLEMS / "fixed_width_mlp.py"
    case = gate.load_case(path)
    assert dict(case.shapes["default"]) == {"batch_size": 4096, "dtype": "fp32"}
    reason = case.small_shapes.reason()
    assert reason is not None and str(path) in reason and "parameters" in reason
    assert len(reason.splitlines()) == 1
    source = (PRECISION.parent / "precision" / "matmul_rand.py").read_text()  # any module text
    assert prepare(source, "triton", case, "static").case is case
    with pytest.raises(BadInputError) as info:
        prepare(source, "triton", case, "interpret")
    assert str(info.value) == reason


def test_a_file_whose_get_inputs_raises_is_one_line_naming_it() -> None:
    path = PROBLEMS / "inputs_raise.py"
    with pytest.raises(BadInputError) as info:
        gate.load_case(path)
    text = str(info.value)
    assert str(path) in text and "the inputs cannot be made" in text and len(text.splitlines()) == 1


def test_a_file_importing_a_package_not_installed_names_the_package(tmp_path: Path) -> None:
    path = tmp_path / "imports_absent.py"
    path.write_text("import torch\nimport torch.nn as nn\nfrom klineage_absent_pkg.ops import scan\n\n\n"
                    "class Model(nn.Module):\n    def forward(self, x):\n        return scan(x)\n\n\n"
                    "def get_inputs():\n    return [torch.rand(64, 64)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    with pytest.raises(BadInputError) as info:
        gate.load_case(path)
    text = str(info.value)
    assert str(path) in text and "'klineage_absent_pkg" in text and "pip install klineage_absent_pkg" in text
    assert len(text.splitlines()) == 1


def test_the_problems_own_imports_of_the_kernelbench_extra_load(tmp_path: Path) -> None:
    """The packages the `kernelbench` extra installs (what the benchmark's files import beyond
    torch) are importable: a problem that rearranges with einops loads and runs."""
    path = tmp_path / "rearrange_sum.py"
    path.write_text("import torch\nimport torch.nn as nn\nfrom einops import rearrange\n\n\n"
                    "class Model(nn.Module):\n    def forward(self, x):\n"
                    "        return rearrange(x, 'b (h d) -> b h d', h=4).sum(-1)\n\n\n"
                    "batch, width = 256, 1024\n\n\n"
                    "def get_inputs():\n    return [torch.rand(batch, width)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    case = gate.load_case(path)
    assert dict(case.shapes["default"])["width"] == 1024
    module = case.module()
    x, = module.make_inputs(dict(case.small_shapes["default"]), 3, "cpu")
    assert torch.allclose(module.reference(x), x.reshape(x.shape[0], 4, -1).sum(-1))


def test_cases_dir_reports_a_bad_file_and_goes_on(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    for name in ("expr_sizes_matmul.py", "inputs_raise.py", "fixed_width_mlp.py"):
        shutil.copy(PROBLEMS / name, tmp_path / name)
    (tmp_path / "broken.py").write_text("def get_inputs(:\n")
    code, out, _ = _run(capsys, "cases", str(tmp_path), "--json")
    assert code == 0
    data = json.loads(out)
    loaded = {c["name"]: c for c in data["cases"]}
    assert set(loaded) == {"expr_sizes_matmul", "fixed_width_mlp"}
    assert loaded["expr_sizes_matmul"]["small_shapes_reason"] is None
    assert loaded["expr_sizes_matmul"]["check"].startswith("KernelBench's check")
    assert loaded["fixed_width_mlp"]["small_shapes"] == {}
    assert "fixed_width_mlp.py" in loaded["fixed_width_mlp"]["small_shapes_reason"]
    refused = {Path(r["path"]).name: r["reason"] for r in data["refused"]}
    assert set(refused) == {"inputs_raise.py", "broken.py"}
    assert all(len(r.splitlines()) == 1 for r in refused.values())
    code, out, _ = _run(capsys, "cases", str(tmp_path))
    assert code == 0 and out.count("refused: ") == 2 and "small: none (" in out
    # Nothing loads: exit 2, the reasons still listed.
    for name in ("expr_sizes_matmul.py", "fixed_width_mlp.py"):
        (tmp_path / name).unlink()
    code, out, err = _run(capsys, "cases", str(tmp_path), "--json")
    assert code == 2 and len(json.loads(out)["refused"]) == 2
    code, out, err = _run(capsys, "cases", str(tmp_path))
    assert code == 2 and "inputs_raise.py" in out and "nothing under" in err


# -- precision policy at the interpret tier ----------------------------------------------------
MATMUL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        OPERANDS
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc SCALE, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    mm[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=64)
    return c
'''
# Both operands cut to bfloat16's 8 mantissa bits (the low half of each fp32 word dropped).
BF16_OPERANDS = ("a = (a.to(tl.int32, bitcast=True) & -65536).to(tl.float32, bitcast=True)\n"
                 "        b = (b.to(tl.int32, bitcast=True) & -65536).to(tl.float32, bitcast=True)")


def _candidate(tmp_path: Path, name: str, operands: str = "", scale: str = "") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(MATMUL.replace("OPERANDS", operands or "pass").replace("SCALE", scale))
    return path


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, gate.Verdict]:
    tmp = tmp_path_factory.mktemp("precision")
    problem = PRECISION / "matmul_rand.py"
    jobs = {
        "fp32": (_candidate(tmp, "fp32"), problem),
        "bf16": (_candidate(tmp, "bf16", BF16_OPERANDS), problem),
        "wrong": (_candidate(tmp, "wrong", scale="* 1.05"), problem),
        "bf16_case": (_candidate(tmp, "bf16_case", BF16_OPERANDS), PRECISION / "matmul_case"),
    }
    return {k: gate.check_file(path, case, Tier.INTERPRET, cache=False) for k, (path, case) in jobs.items()}


def test_an_fp32_candidate_passes_the_benchmarks_check_unflagged(verdicts: dict) -> None:
    v = verdicts["fp32"]
    assert v.ok, v.reason
    assert v.correctness.check.startswith("KernelBench's check: torch.allclose")
    assert v.correctness.lower_precision == ()
    assert dict(v.correctness.probe_err)["default"] > 0
    assert not any(f.startswith("lower precision") for f in v.flags)


def test_a_lower_precision_candidate_passes_and_is_flagged(verdicts: dict) -> None:
    """bf16 operands: an error the case-module tolerance refused as a precision downgrade;
    within KernelBench's check, so it passes, and the verdict says it computed in lower
    precision than the fp32 reference."""
    v = verdicts["bf16"]
    assert v.ok, v.reason
    assert v.correctness.max_rel_err > 2e-3
    assert v.correctness.lower_precision == ("default",)
    assert any(f.startswith("lower precision (default)") for f in v.flags)
    assert v.to_json()["correctness"]["lower_precision"] == ["default"]
    assert gate.Verdict.from_json(json.loads(json.dumps(v.to_json()))) == v


def test_a_wrong_candidate_fails_the_benchmarks_check(verdicts: dict) -> None:
    v = verdicts["wrong"]
    assert not v.ok and v.failure_kind is FailureKind.WRONG_OUTPUT
    assert "atol 0.01 + rtol 0.01" in v.reason


def test_a_case_module_keeps_its_tolerance_table(verdicts: dict) -> None:
    v = verdicts["bf16_case"]
    assert not v.ok and v.failure_kind is FailureKind.PRECISION_DOWNGRADE
    assert v.correctness.check.startswith("relative-norm error")


def test_heldout_scan_goes_on_past_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("heldout_scan", Path(__file__).parent.parent / "bench" / "heldout.py")
    assert spec is not None and spec.loader is not None
    heldout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heldout)
    for name in ("expr_sizes_matmul.py", "inputs_raise.py", "fixed_width_mlp.py"):
        shutil.copy(PROBLEMS / name, tmp_path / name)
        (tmp_path / name.replace(".py", "_triton.py")).write_text("def run(*inputs):\n    pass\n")
    capsys.readouterr()
    device = heldout.operators([str(tmp_path)], set(), "device")
    assert sorted(c.name for c in device) == ["expr_sizes_matmul", "fixed_width_mlp"]
    assert "inputs_raise.py: not an operator" in capsys.readouterr().err
    interpret = heldout.operators([str(tmp_path)], set(), "interpret")
    assert [c.name for c in interpret] == ["expr_sizes_matmul"]
    assert "not an operator at the interpret tier" in capsys.readouterr().err


@pytest.mark.gpu
def test_on_the_gpu_a_tf32_product_passes_flagged_and_an_ieee_one_unflagged(tmp_path: Path) -> None:
    problem = PRECISION / "matmul_rand.py"
    tf32 = tmp_path / "tf32.py"
    tf32.write_text(_candidate(tmp_path, "ieee").read_text().replace('input_precision="ieee"',
                                                                     'input_precision="tf32"'))
    found = {name: gate.check_file(path, problem, Tier.DEVICE, cache=False)
             for name, path in (("tf32", tf32), ("ieee", tmp_path / "ieee.py"))}
    for v in found.values():
        assert v.ok, v.reason
        assert v.correctness.check.startswith("KernelBench's check")
    assert found["tf32"].correctness.lower_precision == ("default",)
    assert found["ieee"].correctness.lower_precision == ()


def test_the_load_count_of_a_checkout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "kernelbench_load", Path(__file__).parent.parent / "bench" / "kernelbench_load.py")
    assert spec is not None and spec.loader is not None
    load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load)
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for name in ("tuple_shape_reduce.py", "fixed_width_mlp.py", "inputs_raise.py"):
        shutil.copy(PROBLEMS / name, level / name)
    capsys.readouterr()
    assert load.main(["--kernelbench", str(tmp_path), "--levels", "1", "--json"]) == 0
    out = capsys.readouterr()
    row = json.loads(out.out)["levels"][0]
    assert (row["files"], row["device"], row["interpret"]) == (3, 2, 1)
    assert [r["file"] for r in row["refused"]] == ["inputs_raise.py"]
    assert [r["file"] for r in row["no_interpret_sizes"]] == ["fixed_width_mlp.py"]
    assert load.main(["--kernelbench", str(tmp_path / "nowhere")]) == 2
