// Sum of squares of each row in the classic fully unrolled form: the block size is a template
// parameter, each thread first adds two elements per step, every tree step is guarded by the
// block size, and the last warp finishes without barriers through a volatile pointer.
template <unsigned int BLOCK>
__device__ void last_warp(volatile float* sdata, unsigned int tid)
{
    if (BLOCK >= 64) sdata[tid] += sdata[tid + 32];
    if (BLOCK >= 32) sdata[tid] += sdata[tid + 16];
    if (BLOCK >= 16) sdata[tid] += sdata[tid + 8];
    if (BLOCK >= 8) sdata[tid] += sdata[tid + 4];
    if (BLOCK >= 4) sdata[tid] += sdata[tid + 2];
    if (BLOCK >= 2) sdata[tid] += sdata[tid + 1];
}

template <unsigned int BLOCK>
__device__ __forceinline__ void row_sumsq(const float* x, float* out, unsigned int n)
{
    __shared__ float sdata[BLOCK];
    const unsigned int tid = threadIdx.x;
    const float* row = x + (size_t)blockIdx.x * n;
    float sum = 0.f;
    for (unsigned int i = tid; i < n; i += 2 * BLOCK) {
        sum += row[i] * row[i];
        if (i + BLOCK < n) sum += row[i + BLOCK] * row[i + BLOCK];
    }
    sdata[tid] = sum;
    __syncthreads();
    if (BLOCK >= 512) { if (tid < 256) { sdata[tid] += sdata[tid + 256]; } __syncthreads(); }
    if (BLOCK >= 256) { if (tid < 128) { sdata[tid] += sdata[tid + 128]; } __syncthreads(); }
    if (BLOCK >= 128) { if (tid < 64) { sdata[tid] += sdata[tid + 64]; } __syncthreads(); }
    if (tid < 32) last_warp<BLOCK>(sdata, tid);
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

extern "C" __global__ void row_sumsq_256(const float* x, float* out, unsigned int n)
{
    row_sumsq<256>(x, out, n);
}
