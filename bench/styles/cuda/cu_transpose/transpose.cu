// Out-of-place transpose of an fp32 (rows, cols) matrix through a 32x33 shared-memory tile
// (the extra column keeps the column reads free of bank conflicts). Blocks of 32x8 threads,
// each thread moving four elements of the tile.
#define TILE_DIM 32
#define BLOCK_ROWS 8

extern "C" __global__ void transpose_tiled(float* out, const float* in, int rows, int cols)
{
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (x < cols && y + j < rows)
            tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE_DIM + threadIdx.x;
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (x < rows && y + j < cols)
            out[(size_t)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}
