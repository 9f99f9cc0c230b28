// 3x3 convolution, stride 1, padding 1, NCHW bf16, as an implicit GEMM: rows are output
// pixels (n, p, q), columns are output channels, the reduction runs over (c, r, s). The input
// patch tile is gathered into shared memory on the fly (no im2col buffer); 64x64 output tiles,
// 16 reduction steps per stage, 256 threads with 4x4 results each.
#include <cuda_bf16.h>

#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void conv3x3_igemm(const __nv_bfloat16* __restrict__ x,
                                         const __nv_bfloat16* __restrict__ w,
                                         __nv_bfloat16* __restrict__ y,
                                         int N, int C, int H, int W, int K)
{
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int HW = H * W;
    const int GM = N * HW;
    const int GK = C * 9;
    const int m0 = blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int ty = tid / 16, tx = tid % 16;
    float acc[4][4] = {};

    for (int k0 = 0; k0 < GK; k0 += BK) {
        for (int i = tid; i < BM * BK; i += 256) {
            int m = i % BM, kk = i / BM;
            int gm = m0 + m, gk = k0 + kk;
            float v = 0.f;
            if (gm < GM && gk < GK) {
                int img = gm / HW, pq = gm % HW;
                int p = pq / W, q = pq % W;
                int c = gk / 9, rs = gk % 9;
                int ih = p + rs / 3 - 1, iw = q + rs % 3 - 1;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                    v = __bfloat162float(x[((size_t)(img * C + c) * H + ih) * W + iw]);
            }
            As[kk][m] = v;
        }
        for (int i = tid; i < BN * BK; i += 256) {
            int kk = i % BK, n = i / BK;
            int gk = k0 + kk, gn = n0 + n;
            Bs[kk][n] = (gk < GK && gn < K) ? __bfloat162float(w[(size_t)gn * GK + gk]) : 0.f;
        }
        __syncthreads();
        for (int kk = 0; kk < BK; ++kk) {
            float a[4], b[4];
            for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];
            for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx * 4 + j];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i) {
        int gm = m0 + ty * 4 + i;
        if (gm >= GM) continue;
        int img = gm / HW, pq = gm % HW;
        for (int j = 0; j < 4; ++j) {
            int gn = n0 + tx * 4 + j;
            if (gn < K) y[((size_t)img * K + gn) * HW + pq] = __float2bfloat16(acc[i][j]);
        }
    }
}
