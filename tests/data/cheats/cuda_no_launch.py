"""Cheat (CUDA host): compiles its kernel but answers with NumPy on the host."""
from pathlib import Path

import numpy as np
import torch

from experts import cudahost


def run(a, x, y):
    cudahost.compile_source(Path(__file__).with_suffix(".cu").read_text(), name="cuda_no_launch.cu")
    host = np.float32(a) * x.cpu().numpy() + y.cpu().numpy()
    return torch.from_numpy(host).to(x.device)
