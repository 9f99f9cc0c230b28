/* Per-row absolute maximum. A few blocks walk the rows (grid-stride); each folds its
 * partial maxima with a while loop that halves the stride. */
#define NT 128

extern "C" __global__ void row_absmax(const float *in, float *out, int rows, int cols)
{
    __shared__ float red[NT];
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        float m = 0.0f;
        for (int c = threadIdx.x; c < cols; c += NT)
            m = fmaxf(m, fabsf(in[row * cols + c]));
        red[threadIdx.x] = m;
        __syncthreads();
        unsigned s = NT >> 1;
        while (s > 0) {
            if (threadIdx.x < s)
                red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
            __syncthreads();
            s >>= 1;
        }
        if (threadIdx.x == 0)
            out[row] = red[0];
        __syncthreads();
    }
}
