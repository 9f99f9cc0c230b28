// fp32 C = A @ B with float2 loads: each of the 256 threads of a block moves a pair of
// neighbouring elements of A's and of B's 32x16 / 16x32 slabs into shared memory (K and N even),
// then computes a 2x2 patch of the block's 32x32 tile (16x16 thread grid).
#define BM 32
#define BN 32
#define BK 16

extern "C" __global__ void sgemm_f2(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float sA[BM][BK];
    __shared__ float sB[BK][BN];
    const int tid = threadIdx.y * 16 + threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float c00 = 0.f, c01 = 0.f, c10 = 0.f, c11 = 0.f;
    for (int k0 = 0; k0 < K; k0 += BK) {
        {   // A slab: 32 rows x 8 pairs
            const int r = tid / (BK / 2), p = tid % (BK / 2);
            float2 v = make_float2(0.f, 0.f);
            if (m0 + r < M && k0 + 2 * p < K)
                v = *reinterpret_cast<const float2*>(&A[(size_t)(m0 + r) * K + k0 + 2 * p]);
            sA[r][2 * p] = v.x;
            sA[r][2 * p + 1] = v.y;
        }
        {   // B slab: 16 rows x 16 pairs
            const int r = tid / (BN / 2), p = tid % (BN / 2);
            float2 v = make_float2(0.f, 0.f);
            if (k0 + r < K && n0 + 2 * p < N)
                v = *reinterpret_cast<const float2*>(&B[(size_t)(k0 + r) * N + n0 + 2 * p]);
            sB[r][2 * p] = v.x;
            sB[r][2 * p + 1] = v.y;
        }
        __syncthreads();
        for (int k = 0; k < BK; ++k) {
            const float a0 = sA[2 * threadIdx.y][k], a1 = sA[2 * threadIdx.y + 1][k];
            const float b0 = sB[k][2 * threadIdx.x], b1 = sB[k][2 * threadIdx.x + 1];
            c00 += a0 * b0; c01 += a0 * b1; c10 += a1 * b0; c11 += a1 * b1;
        }
        __syncthreads();
    }
    const int r = m0 + 2 * threadIdx.y, c = n0 + 2 * threadIdx.x;
    if (r < M && c < N) C[(size_t)r * N + c] = c00;
    if (r < M && c + 1 < N) C[(size_t)r * N + c + 1] = c01;
    if (r + 1 < M && c < N) C[(size_t)(r + 1) * N + c] = c10;
    if (r + 1 < M && c + 1 < N) C[(size_t)(r + 1) * N + c + 1] = c11;
}
