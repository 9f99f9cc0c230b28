// log-sum-exp of bf16 rows in one reading pass. Each thread keeps the largest value it saw
// and the sum of 2^((v - max) * log2 e) over its values, rescaling the sum when the max
// grows; the block merges the (max, sum) pairs in a shared tree, scaling the sums in place.
#include <cuda_bf16.h>

#define LOG2E 1.4426950408889634f
#define THREADS 256

extern "C" __global__ void row_logsumexp(const __nv_bfloat16* x, float* lse, int n)
{
    __shared__ float run_max[THREADS];
    __shared__ float run_sum[THREADS];
    const int tid = threadIdx.x;
    const __nv_bfloat16* row = x + (long)blockIdx.x * n;

    float m = __int_as_float(0xff800000);  // -inf: no value seen yet
    float z = 0.f;
    for (int i = tid; i < n; i += THREADS) {
        const float v = __bfloat162float(row[i]);
        if (v > m) {
            z = z * exp2f((m - v) * LOG2E) + 1.f;
            m = v;
        } else {
            z += exp2f((v - m) * LOG2E);
        }
    }
    run_max[tid] = m;
    run_sum[tid] = z;
    __syncthreads();

    for (int off = THREADS / 2; off > 0; off /= 2) {
        if (tid < off) {
            const float other_max = run_max[tid + off];
            const float mine = run_max[tid];
            const float top = mine > other_max ? mine : other_max;
            run_sum[tid] *= exp2f((mine - top) * LOG2E);
            run_sum[tid] += run_sum[tid + off] * exp2f((other_max - top) * LOG2E);
            run_max[tid] = top;
        }
        __syncthreads();
    }
    if (tid == 0) lse[blockIdx.x] = run_max[0] + logf(run_sum[0]);
}
