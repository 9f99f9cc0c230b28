// Sum of a vector in two launches of the same kernel (n -> one partial a block -> one value).
// Each thread first adds two elements a grid step apart, then a shared tree runs down to 64
// lanes and the last warp finishes through a volatile pointer, without barriers.
template <unsigned int blockSize>
__device__ void warpReduce(volatile float* sdata, unsigned int tid)
{
    if (blockSize >= 64) sdata[tid] += sdata[tid + 32];
    if (blockSize >= 32) sdata[tid] += sdata[tid + 16];
    if (blockSize >= 16) sdata[tid] += sdata[tid + 8];
    if (blockSize >= 8) sdata[tid] += sdata[tid + 4];
    if (blockSize >= 4) sdata[tid] += sdata[tid + 2];
    if (blockSize >= 2) sdata[tid] += sdata[tid + 1];
}

template <unsigned int blockSize>
__device__ void reduce6(const float* g_idata, float* g_odata, unsigned int n)
{
    __shared__ float sdata[blockSize];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (blockSize * 2) + tid;
    unsigned int gridSize = blockSize * 2 * gridDim.x;
    float s = 0.0f;
    while (i < n) {
        s += g_idata[i];
        if (i + blockSize < n) s += g_idata[i + blockSize];
        i += gridSize;
    }
    sdata[tid] = s;
    __syncthreads();
    if (blockSize >= 512) { if (tid < 256) { sdata[tid] += sdata[tid + 256]; } __syncthreads(); }
    if (blockSize >= 256) { if (tid < 128) { sdata[tid] += sdata[tid + 128]; } __syncthreads(); }
    if (blockSize >= 128) { if (tid < 64) { sdata[tid] += sdata[tid + 64]; } __syncthreads(); }
    if (tid < 32) warpReduce<blockSize>(sdata, tid);
    if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}

extern "C" __global__ void reduce6_256(const float* in, float* out, unsigned int n)
{
    reduce6<256>(in, out, n);
}
