// CUTLASS-style epilogue with project qualifier macros (the grammar does not know them).
#pragma once

#define KLT_HOST_DEVICE __forceinline__ __host__ __device__
#define KLT_DEVICE __forceinline__ __device__
#define KLT_GLOBAL __global__
#define KLT_MAX_DEVICE_TILES 8

namespace klt {
namespace epilogue {

template <typename T, int N>
struct Array {
  T storage[N];
  KLT_HOST_DEVICE T& operator[](int i) { return storage[i]; }
  KLT_HOST_DEVICE T const& operator[](int i) const { return storage[i]; }
};

template <typename T, int N>
struct LinearCombination {
  struct Params {
    T alpha;
    T beta;
  };
  Params params;

  KLT_HOST_DEVICE
  LinearCombination(Params const& p) : params(p) {}

  KLT_DEVICE Array<T, N> operator()(Array<T, N> const& accum, Array<T, N> const& source) const {
    Array<T, N> out;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      out[i] = params.alpha * accum[i] + params.beta * source[i];
    }
    return out;
  }
};

template <typename Epilogue, int N>
KLT_GLOBAL void __launch_bounds__(256)
    apply_epilogue(typename Epilogue::Params params, float const* __restrict__ acc,
                   float* __restrict__ out, int n) {
  int tiles = KLT_MAX_DEVICE_TILES;
  int idx = (blockIdx.x * blockDim.x + threadIdx.x) * N;
  if (idx + N > n || blockIdx.x >= tiles * gridDim.x) {
    return;
  }
  Array<float, N> a, c;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    a[i] = __ldg(acc + idx + i);
    c[i] = out[idx + i];
  }
  Epilogue op(params);
  Array<float, N> d = op(a, c);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    out[idx + i] = d[i];
  }
}

}  // namespace epilogue
}  // namespace klt
