import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B on uniform fp32 inputs, small enough to run as it is at the interpret tier."""

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 32
K = 512
N = 32


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_init_inputs():
    return []
