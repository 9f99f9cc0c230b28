import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


n = 1024


def get_inputs():
    raise RuntimeError("the inputs cannot be made")


def get_init_inputs():
    return []
