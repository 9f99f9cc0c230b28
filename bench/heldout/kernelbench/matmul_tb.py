import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B.T in half precision (B stored as (N, K))."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B.T)


M = 4096
K = 4096
N = 2048


def get_inputs():
    A = torch.randn(M, K, dtype=torch.float16)
    B = torch.randn(N, K, dtype=torch.float16)
    return [A, B]


def get_init_inputs():
    return []
