// Each row divided by its mean absolute value. Every thread adds its share of the row into
// one shared float with atomicAdd; thread 0 clears it first.
extern "C" __global__ void scale_by_mean_abs(const float* x, float* y, int n)
{
    __shared__ float row_total;
    const float* xr = x + (size_t)blockIdx.x * n;
    float* yr = y + (size_t)blockIdx.x * n;
    if (threadIdx.x == 0) row_total = 0.f;
    __syncthreads();
    float mine = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) mine += fabsf(xr[i]);
    atomicAdd(&row_total, mine);
    __syncthreads();
    const float inv = n / row_total;
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv;
}
