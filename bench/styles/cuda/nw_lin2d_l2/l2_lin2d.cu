// Row L2 normalization with a (32, 8) block: the 256 threads are numbered tid = ty * 32 + tx,
// stride over the row by that number and fold their sums in one shared tree over all of them.
extern "C" __global__ void l2_lin2d(const float* __restrict__ x, float* __restrict__ y, int n)
{
    __shared__ float part[256];
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int nthreads = blockDim.x * blockDim.y;
    const float* xr = x + (size_t)blockIdx.x * n;
    float ss = 0.f;
    for (int i = tid; i < n; i += nthreads) ss += xr[i] * xr[i];
    part[tid] = ss;
    __syncthreads();
    for (int s = nthreads / 2; s > 0; s >>= 1) {
        if (tid < s) part[tid] += part[tid + s];
        __syncthreads();
    }
    const float inv = 1.0f / fmaxf(sqrtf(part[0]), 1e-12f);
    for (int i = tid; i < n; i += nthreads) y[(size_t)blockIdx.x * n + i] = xr[i] * inv;
}
