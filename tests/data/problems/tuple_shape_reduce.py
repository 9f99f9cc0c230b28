import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over one dimension of a tensor whose shape is one tuple global."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 64
input_shape = (8192 * 2, 48)
dim = 1


def get_inputs():
    return [torch.randn(batch_size, *input_shape)]


def get_init_inputs():
    return [dim]
