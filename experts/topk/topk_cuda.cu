// Expert CUDA C++ kernel for `topk`: per-row radix select, compaction, bitonic sort of k.
//
// One thread block owns one row. The row is read once, with 128-bit loads, into registers as
// unsigned keys whose integer order is the float order. Four 8-bit radix passes, most
// significant digit first, each build a shared-memory histogram of the keys that still match
// the threshold prefix (one shared atomic per key; warp aggregation with __match_any_sync is a
// switch, slower on Hopper at this shape) and pick the bin holding the k-th largest key with a
// warp-shuffle suffix scan; the passes stop early once every key left
// in the chosen bin is a winner. The k winners are then compacted into shared memory by one
// block-wide scan and sorted descending by a bitonic network over k (rounded up to a power of
// two) elements only, whose stages within a warp's segment need only a warp barrier.
//
// Compile-time shape (the host passes them as -D defines):
//   TOPK_THREADS  threads per block (a multiple of 32, at most 1024)
//   TOPK_ITEMS    row elements per thread (TOPK_THREADS * TOPK_ITEMS >= L; a multiple of 4
//                 when TOPK_VEC)
//   TOPK_KPOW2    k rounded up to a power of two (the sort width; at most 4096)
//   TOPK_VEC      1: the row is read as float4 (L % 4 == 0 and 16-byte aligned rows)
//   TOPK_AGGREGATE 1: histogram atomics are warp-aggregated with __match_any_sync;
//                 0: one shared atomic per key
//   TOPK_EARLY_EXIT 1: stop the radix passes once the chosen bin holds only winners
//   TOPK_WARP_SYNC 1: warp barriers between the sort stages that stay inside a warp

#ifndef TOPK_THREADS
#define TOPK_THREADS 512
#endif
#ifndef TOPK_ITEMS
#define TOPK_ITEMS 8
#endif
#ifndef TOPK_KPOW2
#define TOPK_KPOW2 512
#endif
#ifndef TOPK_VEC
#define TOPK_VEC 1
#endif
#ifndef TOPK_AGGREGATE
#define TOPK_AGGREGATE 0  // measured on an H200: plain shared atomics 15.4 us, aggregated 18.2 us
#endif
#ifndef TOPK_EARLY_EXIT
#define TOPK_EARLY_EXIT 1
#endif
#ifndef TOPK_WARP_SYNC
#define TOPK_WARP_SYNC 1
#endif

#define RADIX_BITS 8
#define RADIX_BINS (1 << RADIX_BITS)
#define NUM_WARPS (TOPK_THREADS / 32)
#define FULL_MASK 0xffffffffu

#if TOPK_VEC && (TOPK_ITEMS % 4 != 0)
#error "TOPK_ITEMS must be a multiple of 4 with TOPK_VEC"
#endif

typedef unsigned long long u64;

// Unsigned key with the float order: positive floats get the top bit set, negative floats are
// bit-inverted (so larger magnitude sorts lower).
__device__ __forceinline__ unsigned int ordered_key(float v) {
    unsigned int b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_to_float(unsigned int k) {
    unsigned int b = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    return __uint_as_float(b);
}

// Row position of this thread's i-th item. With float4 loads, consecutive threads read
// consecutive 16-byte vectors (coalesced); item i is lane (i % 4) of vector (i / 4).
__device__ __forceinline__ int item_index(int i) {
#if TOPK_VEC
    return 4 * ((int)threadIdx.x + (i / 4) * TOPK_THREADS) + (i % 4);
#else
    return (int)threadIdx.x + i * TOPK_THREADS;
#endif
}

// Exclusive prefix sum of `v` over the block in thread order; `warp_sums` is NUM_WARPS words
// of shared memory. Every thread of the block must call it.
__device__ __forceinline__ unsigned int block_exclusive_scan(unsigned int v, unsigned int* warp_sums) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    unsigned int x = v;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        unsigned int y = __shfl_up_sync(FULL_MASK, x, off);
        if (lane >= off) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        unsigned int w = lane < NUM_WARPS ? warp_sums[lane] : 0u;
        unsigned int s = w;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            unsigned int y = __shfl_up_sync(FULL_MASK, s, off);
            if (lane >= off) s += y;
        }
        if (lane < NUM_WARPS) warp_sums[lane] = s - w;
    }
    __syncthreads();
    return warp_sums[warp] + x - v;
}

extern "C" __global__ void __launch_bounds__(TOPK_THREADS, 1)
topk_radix_select(const float* __restrict__ x, float* __restrict__ values,
                  long long* __restrict__ indices, int L, int K, int ldx) {
    __shared__ unsigned int hist[RADIX_BINS];
    __shared__ unsigned int warp_sums[NUM_WARPS];
    __shared__ unsigned int s_prefix;
    __shared__ int s_remaining;
    __shared__ int s_settled;  // every live key in the chosen bin is a winner
    __shared__ u64 cand[TOPK_KPOW2];

    const int lane = threadIdx.x & 31;
    const float* row = x + (size_t)blockIdx.x * (size_t)ldx;

    // ---- load the row once: keys stay in registers for every pass ----
    unsigned int key[TOPK_ITEMS];
#if TOPK_VEC
    const float4* row4 = reinterpret_cast<const float4*>(row);
#pragma unroll
    for (int j = 0; j < TOPK_ITEMS / 4; ++j) {
        const int v = threadIdx.x + j * TOPK_THREADS;
        float4 f = make_float4(0.f, 0.f, 0.f, 0.f);
        if (4 * v < L) f = __ldg(row4 + v);
        key[4 * j + 0] = ordered_key(f.x);
        key[4 * j + 1] = ordered_key(f.y);
        key[4 * j + 2] = ordered_key(f.z);
        key[4 * j + 3] = ordered_key(f.w);
    }
#else
#pragma unroll
    for (int i = 0; i < TOPK_ITEMS; ++i) {
        const int idx = item_index(i);
        key[i] = idx < L ? ordered_key(__ldg(row + idx)) : 0u;
    }
#endif

    // ---- radix select: find the k-th largest key T, digit by digit ----
    unsigned int prefix = 0;  // digits of T found so far
    int remaining = K;        // winners still to find among keys matching `prefix`
    int cut = 0;              // keys are compared to T by their bits from `cut` up (set per pass)
#pragma unroll
    for (int pass = 0; pass < 32 / RADIX_BITS; ++pass) {
        const int shift = 32 - RADIX_BITS * (pass + 1);
        for (int b = threadIdx.x; b < RADIX_BINS; b += TOPK_THREADS) hist[b] = 0u;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < TOPK_ITEMS; ++i) {
            bool live = item_index(i) < L;
            if (pass > 0) live = live && ((key[i] >> (shift + RADIX_BITS)) == prefix);
            const unsigned int digit = (key[i] >> shift) & (RADIX_BINS - 1);
#if TOPK_AGGREGATE
            const unsigned int live_mask = __ballot_sync(FULL_MASK, live);
            if (live) {
                // One atomic per distinct digit in the warp.
                const unsigned int peers = __match_any_sync(live_mask, digit);
                if (lane == __ffs(peers) - 1) atomicAdd(&hist[digit], (unsigned int)__popc(peers));
            }
#else
            if (live) atomicAdd(&hist[digit], 1u);
#endif
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            // Lane l owns bins [8l, 8l+8); a suffix scan over lanes gives, for each bin, the
            // number of live keys whose digit is at least that bin.
            constexpr int PER_LANE = RADIX_BINS / 32;
            unsigned int c[PER_LANE];
            unsigned int total = 0;
#pragma unroll
            for (int j = 0; j < PER_LANE; ++j) {
                c[j] = hist[lane * PER_LANE + j];
                total += c[j];
            }
            unsigned int suffix = total;
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                unsigned int y = __shfl_down_sync(FULL_MASK, suffix, off);
                if (lane + off < 32) suffix += y;
            }
            unsigned int at_least = suffix - total;  // keys in bins above this lane's
#pragma unroll
            for (int j = PER_LANE - 1; j >= 0; --j) {
                const unsigned int above = at_least;
                at_least += c[j];
                if (above < (unsigned int)remaining && at_least >= (unsigned int)remaining) {
                    s_prefix = (prefix << RADIX_BITS) | (unsigned int)(lane * PER_LANE + j);
                    s_remaining = remaining - (int)above;
                    s_settled = c[j] == (unsigned int)remaining - above;
                }
            }
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
        cut = shift;
#if TOPK_EARLY_EXIT
        if (s_settled) break;  // the same for the whole block: read after the barrier
#endif
    }

    // ---- compaction: keys > T, then the first `remaining` keys == T (in scan order) ----
    // T is `prefix`, compared with the bits of each key above `cut` (all 32 bits unless the
    // passes stopped early, when every key equal to T on those bits is a winner).
    const unsigned int threshold = prefix;
    unsigned int n_above = 0, n_equal = 0;
#pragma unroll
    for (int i = 0; i < TOPK_ITEMS; ++i) {
        const bool ok = item_index(i) < L;
        n_above += (ok && (key[i] >> cut) > threshold);
        n_equal += (ok && (key[i] >> cut) == threshold);
    }
    // Both counts in one scan (each < 65536: the host checks L < 65536).
    const unsigned int before = block_exclusive_scan(n_above | (n_equal << 16), warp_sums);
    unsigned int above_pos = before & 0xffffu;
    unsigned int equal_seen = before >> 16;
#pragma unroll
    for (int i = 0; i < TOPK_ITEMS; ++i) {
        const int idx = item_index(i);
        if (idx >= L) continue;
        const u64 word = ((u64)key[i] << 32) | (unsigned int)idx;
        if ((key[i] >> cut) > threshold) {
            const unsigned int taken_equal = min(equal_seen, (unsigned int)remaining);
            cand[above_pos + taken_equal] = word;
            ++above_pos;
        } else if ((key[i] >> cut) == threshold) {
            if (equal_seen < (unsigned int)remaining) cand[above_pos + equal_seen] = word;
            ++equal_seen;
        }
    }
    for (int p = K + threadIdx.x; p < TOPK_KPOW2; p += TOPK_THREADS) cand[p] = 0ull;
    __syncthreads();

    // ---- bitonic sort of the TOPK_KPOW2 packed (key, index) words, descending ----
#pragma unroll 1
    for (unsigned int size = 2; size <= TOPK_KPOW2; size <<= 1) {
#pragma unroll 1
        for (unsigned int stride = size >> 1; stride > 0; stride >>= 1) {
            for (unsigned int i = threadIdx.x; i < TOPK_KPOW2 / 2; i += TOPK_THREADS) {
                const unsigned int lo = 2 * i - (i & (stride - 1));
                const unsigned int hi = lo + stride;
                const u64 a = cand[lo];
                const u64 b = cand[hi];
                const bool descending = (lo & size) == 0;
                if (descending ? (a < b) : (a > b)) {
                    cand[lo] = b;
                    cand[hi] = a;
                }
            }
            // For strides up to 32, the pairs of the pair indices one warp handles lie in
            // 64-element segments that only this warp touches, so between two such stages a
            // warp barrier suffices; any wider stage (or the end) needs the block barrier.
#if TOPK_WARP_SYNC
            const unsigned int next = stride > 1 ? stride >> 1 : size;
            if (stride > 32 || next > 32 || (size == TOPK_KPOW2 && stride == 1)) {
                __syncthreads();
            } else {
                __syncwarp();
            }
#else
            __syncthreads();
#endif
        }
    }

    // ---- write values and int64 indices ----
    float* vrow = values + (size_t)blockIdx.x * (size_t)K;
    long long* irow = indices + (size_t)blockIdx.x * (size_t)K;
    for (int p = threadIdx.x; p < K; p += TOPK_THREADS) {
        const u64 w = cand[p];
        vrow[p] = key_to_float((unsigned int)(w >> 32));
        irow[p] = (long long)(w & 0xffffffffull);
    }
}
