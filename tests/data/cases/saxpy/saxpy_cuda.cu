// A correct CUDA saxpy for the gate's tests (host module: saxpy_cuda.py).
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, const float* __restrict__ y,
                                 float* __restrict__ out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
