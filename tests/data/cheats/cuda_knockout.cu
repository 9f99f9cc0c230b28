// Cheat (CUDA): a kernel that reads x and writes nothing useful (host: cuda_knockout.py).
extern "C" __global__ void touch(const float* x, float* sink, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0 && n < 0) sink[0] = x[0];
}
