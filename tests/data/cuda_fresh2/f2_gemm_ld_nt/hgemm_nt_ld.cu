// C (M x N, row-major, leading dimension ldc) = A (M x K, row-major, lda) times B where B is
// stored column-major (element (k, n) at B[n * ldb + k]). fp16 in and out, fp32 accumulation;
// 16x16 shared tiles, one result per thread.
#include <cuda_fp16.h>

#define TS 16

extern "C" __global__ void hgemm_nt_ld(int M, int N, int K,
                                       const __half* __restrict__ A, int lda,
                                       const __half* __restrict__ B, int ldb,
                                       __half* __restrict__ C, int ldc)
{
    __shared__ __half tA[TS][TS];
    __shared__ __half tB[TS][TS];
    const int r = blockIdx.y * TS + threadIdx.y;
    const int c = blockIdx.x * TS + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TS) {
        // tB[k][n]: thread (y, x) reads B's column c0 + y at row k0 + x (coalesced along K)
        const int bn = blockIdx.x * TS + threadIdx.y;
        tA[threadIdx.y][threadIdx.x] = (r < M && k0 + threadIdx.x < K)
            ? A[(size_t)r * lda + k0 + threadIdx.x] : __float2half(0.f);
        tB[threadIdx.x][threadIdx.y] = (bn < N && k0 + threadIdx.x < K)
            ? B[(size_t)bn * ldb + k0 + threadIdx.x] : __float2half(0.f);
        __syncthreads();
        for (int kk = 0; kk < TS; ++kk)
            acc += __half2float(tA[threadIdx.y][kk]) * __half2float(tB[kk][threadIdx.x]);
        __syncthreads();
    }
    if (r < M && c < N)
        C[(size_t)r * ldc + c] = __float2half(acc);
}
