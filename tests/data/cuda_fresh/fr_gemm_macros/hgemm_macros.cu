// fp16 GEMM C = A @ B (row-major), fp32 accumulation. 64x64 block tiles, BK = 16, 256 threads
// each owning a 4x4 patch of C. Indexing through macros and small __device__ helpers; the
// shared tiles are filled through a guarded temporary (zero outside the matrices).
#include <cuda_fp16.h>

#define BM 64
#define BN 64
#define BK 16
#define TM 4
#define TN 4
#define AT(ptr, r, c, ld) ptr[(size_t)(r) * (ld) + (c)]

__device__ __forceinline__ int patch_row(int t) { return t / (BN / TN); }
__device__ __forceinline__ int patch_col(int t) { return t % (BN / TN); }

extern "C" __global__ void hgemm_2d(const __half* A, const __half* B, __half* C, int M, int N, int K)
{
    __shared__ __half sA[BM][BK];
    __shared__ __half sB[BK][BN];
    const int tid = threadIdx.x;
    const int pr = patch_row(tid), pc = patch_col(tid);
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    float acc[TM][TN] = {};
    for (int kk = 0; kk < K; kk += BK) {
        for (int e = tid; e < BM * BK; e += blockDim.x) {
            const int r = e / BK, c = e % BK;
            __half v = __float2half(0.0f);
            if (bm + r < M && kk + c < K) v = AT(A, bm + r, kk + c, K);
            sA[r][c] = v;
        }
        for (int e = tid; e < BK * BN; e += blockDim.x) {
            const int r = e / BN, c = e % BN;
            __half v = __float2half(0.0f);
            if (kk + r < K && bn + c < N) v = AT(B, kk + r, bn + c, N);
            sB[r][c] = v;
        }
        __syncthreads();
        for (int k = 0; k < BK; ++k)
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += __half2float(sA[pr * TM + i][k]) * __half2float(sB[k][pc * TN + j]);
        __syncthreads();
    }
    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) {
            const int r = bm + pr * TM + i, c = bn + pc * TN + j;
            if (r < M && c < N) AT(C, r, c, N) = __float2half(acc[i][j]);
        }
}
