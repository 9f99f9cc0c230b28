// bf16 GEMM C = A @ B, one output per thread, 16x16 shared tiles; every global read in the
// K loop goes through __ldg (the read-only path), with a ternary for the edges.
#include <cuda_bf16.h>

#define TS 16

extern "C" __global__ void bf16_gemm_ldg(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                         __nv_bfloat16* C, int M, int N, int K)
{
    __shared__ __nv_bfloat16 As[TS][TS];
    __shared__ __nv_bfloat16 Bs[TS][TS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TS + ty;
    const int col = blockIdx.x * TS + tx;
    float sum = 0.0f;
    const __nv_bfloat16 zero = __float2bfloat16(0.0f);
    for (int t = 0; t < (K + TS - 1) / TS; ++t) {
        const int ka = t * TS + tx, kb = t * TS + ty;
        As[ty][tx] = (row < M && ka < K) ? __ldg(&A[row * K + ka]) : zero;
        Bs[ty][tx] = (kb < K && col < N) ? __ldg(&B[kb * N + col]) : zero;
        __syncthreads();
        for (int k = 0; k < TS; ++k)
            sum += __bfloat162float(As[ty][k]) * __bfloat162float(Bs[k][tx]);
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = __float2bfloat16(sum);
}
