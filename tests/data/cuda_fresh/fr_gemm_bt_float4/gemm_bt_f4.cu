// C = A @ B^T in fp32 with B stored (N, K), both K-contiguous. 32x32 tiles of C per block of
// 16x16 threads (2x2 each), K in steps of 16 read as float4 where all four are inside (the host requires K % 4 == 0,
// so the vector loads are aligned), element by element at the edges.
#define TILE 32
#define KSTEP 16

extern "C" __global__ void gemm_abt_f4(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float a_tile[TILE][KSTEP + 1];
    __shared__ float b_tile[TILE][KSTEP + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * 16 + tx;
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    float c00 = 0.f, c01 = 0.f, c10 = 0.f, c11 = 0.f;
    for (int k0 = 0; k0 < K; k0 += KSTEP) {
        // 32 rows x 4 float4 per tile: 128 loads per operand, threads 0..127
        if (tid < TILE * KSTEP / 4) {
            const int r = tid / (KSTEP / 4), q = tid % (KSTEP / 4);
            const int kq = k0 + q * 4;
            if (row0 + r < M && kq + 3 < K) {
                const float4 va = *reinterpret_cast<const float4*>(&A[(size_t)(row0 + r) * K + kq]);
                a_tile[r][q * 4 + 0] = va.x; a_tile[r][q * 4 + 1] = va.y;
                a_tile[r][q * 4 + 2] = va.z; a_tile[r][q * 4 + 3] = va.w;
            } else {
                for (int i = 0; i < 4; ++i)
                    a_tile[r][q * 4 + i] = (row0 + r < M && kq + i < K) ? A[(size_t)(row0 + r) * K + kq + i] : 0.f;
            }
            if (col0 + r < N && kq + 3 < K) {
                const float4 vb = *reinterpret_cast<const float4*>(&B[(size_t)(col0 + r) * K + kq]);
                b_tile[r][q * 4 + 0] = vb.x; b_tile[r][q * 4 + 1] = vb.y;
                b_tile[r][q * 4 + 2] = vb.z; b_tile[r][q * 4 + 3] = vb.w;
            } else {
                for (int i = 0; i < 4; ++i)
                    b_tile[r][q * 4 + i] = (col0 + r < N && kq + i < K) ? B[(size_t)(col0 + r) * K + kq + i] : 0.f;
            }
        }
        __syncthreads();
        for (int kk = 0; kk < KSTEP; ++kk) {
            const float a0 = a_tile[ty * 2][kk], a1 = a_tile[ty * 2 + 1][kk];
            const float b0 = b_tile[tx * 2][kk], b1 = b_tile[tx * 2 + 1][kk];
            c00 += a0 * b0; c01 += a0 * b1;
            c10 += a1 * b0; c11 += a1 * b1;
        }
        __syncthreads();
    }
    const int r = row0 + ty * 2, c = col0 + tx * 2;
    if (r < M && c < N) C[(size_t)r * N + c] = c00;
    if (r < M && c + 1 < N) C[(size_t)r * N + c + 1] = c01;
    if (r + 1 < M && c < N) C[(size_t)(r + 1) * N + c] = c10;
    if (r + 1 < M && c + 1 < N) C[(size_t)(r + 1) * N + c + 1] = c11;
}
