// y = A x for an fp32 (rows, cols) matrix, cols a multiple of 4: one warp a row, each lane
// reading float4 quads of the row and of x, the lane sums folded with __shfl_xor_sync.
extern "C" __global__ void gemv4(const float* __restrict__ A, const float* __restrict__ x,
                                 float* __restrict__ y, int rows, int cols)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const float4* a4 = reinterpret_cast<const float4*>(A + (size_t)warp * cols);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float s = 0.f;
    for (int q = lane; q < cols / 4; q += 32) {
        const float4 a = a4[q], b = x4[q];
        s += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
    for (int m = 16; m > 0; m >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, m);
    if (lane == 0) y[warp] = s;
}
