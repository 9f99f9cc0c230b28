// fp32 D = alpha * (A @ B) + beta * C + bias (bias broadcast over rows), written over C.
// 32x32 tiles, 32x16 threads, each thread two results (rows ty and ty + 16).
#define TILE 32

extern "C" __global__ void gemm_epilogue(int M, int N, int K, float alpha, const float* A,
                                         const float* B, float beta, float* C, const float* bias)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * TILE + tx;
    const int row0 = blockIdx.y * TILE + ty, row1 = row0 + 16;
    float acc0 = 0.f, acc1 = 0.f;
    for (int kb = 0; kb < K; kb += TILE) {
        for (int h = 0; h < 2; ++h) {
            const int rr = ty + 16 * h;
            const int ar = blockIdx.y * TILE + rr;
            As[rr][tx] = (ar < M && kb + tx < K) ? A[ar * K + kb + tx] : 0.f;
            Bs[rr][tx] = (kb + rr < K && col < N) ? B[(kb + rr) * N + col] : 0.f;
        }
        __syncthreads();
        for (int k = 0; k < TILE; ++k) {
            const float b = Bs[k][tx];
            acc0 += As[ty][k] * b;
            acc1 += As[ty + 16][k] * b;
        }
        __syncthreads();
    }
    if (col < N) {
        if (row0 < M) C[row0 * N + col] = alpha * acc0 + beta * C[row0 * N + col] + bias[col];
        if (row1 < M) C[row1 * N + col] = alpha * acc1 + beta * C[row1 * N + col] + bias[col];
    }
}
