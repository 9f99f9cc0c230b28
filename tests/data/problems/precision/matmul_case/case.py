"""The same product as ../matmul_rand.py, as a case module with its own tolerance table."""
import torch

NAME = "matmul_rand_case"
SHAPES = {"default": {"M": 32, "K": 512, "N": 32, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 32, "K": 512, "N": 32, "dtype": "fp32"}}
TOLERANCE = {"fp32": 2e-3, "fp16": 5e-3, "bf16": 1e-2}


def make_inputs(shape, seed, device):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(shape["M"], shape["K"], generator=g)
    b = torch.rand(shape["K"], shape["N"], generator=g)
    return a.to(device), b.to(device)


def reference(a, b):
    return a @ b
