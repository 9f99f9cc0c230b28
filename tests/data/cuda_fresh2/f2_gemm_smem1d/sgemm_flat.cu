// fp32 C = A @ B, row-major. 32x32 output tiles, one result per thread; the shared tiles are
// flat 1-D arrays indexed row * TILE + col, and K is walked in TILE-wide slabs.
#define TILE 32

extern "C" __global__ void sgemm_flat(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[TILE * TILE];
    __shared__ float Bs[TILE * TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float sum = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ak = t * TILE + tx;
        int bk = t * TILE + ty;
        As[ty * TILE + tx] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[ty * TILE + tx] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k)
            sum += As[ty * TILE + k] * Bs[k * TILE + tx];
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = sum;
}
