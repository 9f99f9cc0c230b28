// Batched fp32 GEMM: C[b] = A[b] @ B[b], the batch on blockIdx.z. Each block first moves its
// three pointers to its batch's matrices, then runs a 16x16 shared-tile product.
#define T 16

extern "C" __global__ void bmm_bump(const float* A, const float* B, float* C,
                                    int M, int N, int K,
                                    long long strideA, long long strideB, long long strideC)
{
    A += blockIdx.z * strideA;
    B += blockIdx.z * strideB;
    C += blockIdx.z * strideC;
    __shared__ float a_s[T][T];
    __shared__ float b_s[T][T];
    const int i = blockIdx.y * T + threadIdx.y;
    const int j = blockIdx.x * T + threadIdx.x;
    float v = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T) {
        if (i < M && k0 + threadIdx.x < K) a_s[threadIdx.y][threadIdx.x] = A[i * K + k0 + threadIdx.x];
        else a_s[threadIdx.y][threadIdx.x] = 0.0f;
        if (k0 + threadIdx.y < K && j < N) b_s[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * N + j];
        else b_s[threadIdx.y][threadIdx.x] = 0.0f;
        __syncthreads();
        for (int k = 0; k < T; ++k)
            v += a_s[threadIdx.y][k] * b_s[k][threadIdx.x];
        __syncthreads();
    }
    if (i < M && j < N)
        C[i * N + j] = v;
}
