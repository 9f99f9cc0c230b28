// Shared-memory tiled SGEMM, C = A @ B, TILE x TILE threads per block (test data for the passes).
#define TILE 16

extern "C" __global__ void tiled_mm(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
    __syncthreads();
    for (int k = 0; k < TILE; ++k) {
      const float b = (t * TILE + k < K && col < N) ? B[(t * TILE + k) * N + col] : 0.0f;
      acc += ((row < M && t * TILE + (k) < K) ? A[row * K + t * TILE + (k)] : 0.0f)* b;
    }
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
