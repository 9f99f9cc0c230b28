// fp32 GEMM whose block tile comes from template parameters: each 256-thread block computes a
// BM x BN tile, each thread a column strip of BM * BN / 256 results; the K slab of 8 is unrolled.
template <int BM, int BN>
__device__ void gemm_tile(const float* __restrict__ A, const float* __restrict__ B,
                          float* __restrict__ C, int M, int N, int K)
{
    constexpr int BK = 8;
    constexpr int RM = BM * BN / 256;  // rows a thread: the block holds 256 / BN row groups
    __shared__ float sa[BK][BM];
    __shared__ float sb[BK][BN];
    const int tid = threadIdx.x;
    const int tr = tid / BN;          // 0..(256/BN - 1)
    const int tc = tid % BN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[RM];
#pragma unroll
    for (int i = 0; i < RM; ++i) acc[i] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int e = tid; e < BM * BK; e += 256) {
            int r = e / BK, c = e % BK;
            sa[c][r] = (m0 + r < M && k0 + c < K) ? A[(m0 + r) * K + k0 + c] : 0.0f;
        }
        for (int e = tid; e < BK * BN; e += 256) {
            int r = e / BN, c = e % BN;
            sb[r][c] = (k0 + r < K && n0 + c < N) ? B[(k0 + r) * N + n0 + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float bv = sb[kk][tc];
#pragma unroll
            for (int i = 0; i < RM; ++i)
                acc[i] += sa[kk][tr * RM + i] * bv;
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        int r = m0 + tr * RM + i, c = n0 + tc;
        if (r < M && c < N) C[r * N + c] = acc[i];
    }
}

extern "C" __global__ void gemm_64x64(const float* A, const float* B, float* C, int M, int N, int K)
{
    gemm_tile<64, 64>(A, B, C, M, N, K);
}
