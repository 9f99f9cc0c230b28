// 3x3 convolution, stride 1, padding 1, NHWC fp32 input, KRSC weights, NHWK output, as an
// implicit GEMM: rows are output pixels, columns output channels, the reduction runs over
// (r, s, c) with c fastest. 32x32 output tiles, 8 reduction steps a stage, 256 threads with a
// 2x2 patch each; the input patch is gathered into shared memory (zero outside the image).
#define TM 32
#define TN 32
#define TK 8

__device__ __forceinline__ float pixel(const float* x, int n, int h, int w, int c,
                                       int H, int W, int C)
{
    if (h < 0 || h >= H || w < 0 || w >= W) return 0.f;
    return x[((n * H + h) * W + w) * C + c];
}

extern "C" __global__ void conv_nhwc(const float* x, const float* wt, float* y,
                                     int N, int H, int W, int C, int K)
{
    __shared__ float xs[TM][TK + 1];
    __shared__ float ws[TK][TN];
    const int tid = threadIdx.x;
    const int P = N * H * W, R = 9 * C;
    const int p0 = blockIdx.x * TM, k0 = blockIdx.y * TN;
    const int tr = tid / 16, tc = tid % 16;
    float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    for (int r0 = 0; r0 < R; r0 += TK) {
        {
            const int i = tid / TK, j = tid % TK;      // 32 x 8 gather
            const int p = p0 + i, rr = r0 + j;
            float v = 0.f;
            if (p < P && rr < R) {
                const int n = p / (H * W), hw = p % (H * W);
                const int c = rr % C, rs = rr / C;
                v = pixel(x, n, hw / W + rs / 3 - 1, hw % W + rs % 3 - 1, c, H, W, C);
            }
            xs[i][j] = v;
        }
        {
            const int j = tid / TN, i = tid % TN;      // 8 x 32 weights
            ws[j][i] = (k0 + i < K && r0 + j < R) ? wt[(size_t)(k0 + i) * R + r0 + j] : 0.f;
        }
        __syncthreads();
        for (int kk = 0; kk < TK; ++kk)
            for (int a = 0; a < 2; ++a)
                for (int b = 0; b < 2; ++b)
                    acc[a][b] += xs[tr * 2 + a][kk] * ws[kk][tc * 2 + b];
        __syncthreads();
    }
    for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) {
            const int p = p0 + tr * 2 + a, k = k0 + tc * 2 + b;
            if (p < P && k < K) y[(size_t)p * K + k] = acc[a][b];
        }
}
