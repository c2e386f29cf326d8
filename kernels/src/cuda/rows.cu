// Reductions over one dim of a contiguous [outer, r, inner] buffer, the fused softmax
// family with its backward, and cumsum. Two shapes of launch: when inner == 1 the reduced
// elements are adjacent, and one block reduces a row through shared memory (`*_rows_*`); otherwise
// adjacent threads own adjacent outputs and walk r with coalesced loads (`*_cols_*`).
// Half types accumulate in f32, as the CPU kernels do.

template <typename T, typename Red>
__device__ void reduce_rows(usize len, const T* src, T* out) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    const T* row = src + blockIdx.x * len;
    A acc = Red::template init<A>();
    for (usize j = threadIdx.x; j < len; j += blockDim.x) acc = Red::template combine<A>(acc, Elem<T>::load(row[j]));
    A total = block_reduce<A, Red>(acc, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = Elem<T>::store(total);
}

template <typename T, typename Red>
__device__ void reduce_cols(usize outer, usize r, usize inner, const T* src, T* out) {
    typedef typename Elem<T>::Acc A;
    GRID_STRIDE(k, outer * inner) {
        usize o = k / inner, i = k % inner;
        const T* p = src + o * r * inner + i;
        A acc = Red::template init<A>();
        for (usize j = 0; j < r; ++j) acc = Red::template combine<A>(acc, Elem<T>::load(p[j * inner]));
        out[k] = Elem<T>::store(acc);
    }
}

// Reductions too few outputs to fill the device with one thread (or block) each are
// split along r: blocks reduce chunks of `chunk` elements into accumulator-typed partials
// `[outer, splits, inner]`, then `*_finish_*` combines each output's partials in order
// (a fixed order, so deterministic mode holds).

// Block (x: chunk, y: row) reduces its chunk of a contiguous row into
// partials[row * gridDim.x + chunk].
template <typename T, typename Red>
__device__ void reduce_row_chunks(usize len, usize chunk, const T* src, typename Elem<T>::Acc* partials) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    const T* row = src + (usize)blockIdx.y * len;
    usize begin = (usize)blockIdx.x * chunk;
    usize end = begin + chunk < len ? begin + chunk : len;
    A acc = Red::template init<A>();
    for (usize j = begin + threadIdx.x; j < end; j += blockDim.x) acc = Red::template combine<A>(acc, Elem<T>::load(row[j]));
    A total = block_reduce<A, Red>(acc, scratch);
    if (threadIdx.x == 0) partials[(usize)blockIdx.y * gridDim.x + blockIdx.x] = total;
}

// A (32, 8) block owns 32 adjacent columns of one outer index (coalesced row reads) and
// rows [z * chunk, (z + 1) * chunk) of r (z = blockIdx.z), its 8 thread rows striding
// through them; the 8 partial results per column combine through shared memory. With one
// chunk the result goes straight to `out`, else to partials[(o * splits + z) * inner + c].
template <typename T, typename Red>
__device__ void reduce_cols_tiled(usize outer, usize r, usize inner, usize chunk, const T* src, T* out,
                                  typename Elem<T>::Acc* partials) {
    typedef typename Elem<T>::Acc A;
    __shared__ A tile[8][33];
    const usize c = (usize)blockIdx.x * 32 + threadIdx.x;
    const usize o = blockIdx.y, z = blockIdx.z;
    const usize begin = z * chunk;
    const usize end = begin + chunk < r ? begin + chunk : r;
    A acc = Red::template init<A>();
    if (c < inner) {
        const T* p = src + o * r * inner + c;
        for (usize j = begin + threadIdx.y; j < end; j += 8) acc = Red::template combine<A>(acc, Elem<T>::load(p[j * inner]));
    }
    tile[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < inner) {
        for (int y = 1; y < 8; ++y) acc = Red::template combine<A>(acc, tile[y][threadIdx.x]);
        if (gridDim.z == 1) {
            out[o * inner + c] = Elem<T>::store(acc);
        } else {
            partials[(o * gridDim.z + z) * inner + c] = acc;
        }
    }
}

// out[o, c] = the partials [outer, splits, inner] of (o, c) combined in order.
template <typename T, typename Red>
__device__ void reduce_finish(usize outer, usize splits, usize inner, const typename Elem<T>::Acc* partials, T* out) {
    typedef typename Elem<T>::Acc A;
    GRID_STRIDE(k, outer * inner) {
        usize o = k / inner, c = k % inner;
        const A* p = partials + o * splits * inner + c;
        A acc = p[0];
        for (usize z = 1; z < splits; ++z) acc = Red::template combine<A>(acc, p[z * inner]);
        out[k] = Elem<T>::store(acc);
    }
}

#define REDUCE_ONE(NAME, RED, T, SUFFIX)                                                                      \
    extern "C" __global__ void NAME##_rows_##SUFFIX(usize len, const T* src, T* out) {                        \
        reduce_rows<T, RED>(len, src, out);                                                                   \
    }                                                                                                         \
    extern "C" __global__ void NAME##_cols_##SUFFIX(usize outer, usize r, usize inner, const T* src, T* out) { \
        reduce_cols<T, RED>(outer, r, inner, src, out);                                                       \
    }                                                                                                         \
    extern "C" __global__ void NAME##_row_chunks_##SUFFIX(usize len, usize chunk, const T* src,              \
                                                          typename Elem<T>::Acc* partials) {                 \
        reduce_row_chunks<T, RED>(len, chunk, src, partials);                                                 \
    }                                                                                                         \
    extern "C" __global__ void NAME##_cols_tiled_##SUFFIX(usize outer, usize r, usize inner, usize chunk,     \
                                                          const T* src, T* out, typename Elem<T>::Acc* partials) { \
        reduce_cols_tiled<T, RED>(outer, r, inner, chunk, src, out, partials);                                \
    }                                                                                                         \
    extern "C" __global__ void NAME##_finish_##SUFFIX(usize outer, usize splits, usize inner,                 \
                                                      const typename Elem<T>::Acc* partials, T* out) {        \
        reduce_finish<T, RED>(outer, splits, inner, partials, out);                                           \
    }
#define SUM_F(T, S) REDUCE_ONE(sum, SumRed, T, S)
#define PROD_F(T, S) REDUCE_ONE(prod, ProdRed, T, S)
FOR_FLOATS(SUM_F)
FOR_FLOATS(PROD_F)
REDUCE_ONE(sum, SumRed, long long, i64)
REDUCE_ONE(prod, ProdRed, long long, i64)

// ---- max/min with their index: the first NaN wins and stays, else the first strictly
// better value (the CPU's `arg_reduce_dim`). ---------------------------------------------

template <typename A, bool IS_MAX>
__device__ __forceinline__ bool arg_better(A v, long long j, A best, long long best_j) {
    bool best_nan = best != best, v_nan = v != v;
    if (best_nan) return v_nan && j < best_j;
    if (v_nan) return true;
    if (IS_MAX ? v > best : v < best) return true;
    return v == best && j < best_j;
}

template <typename T, bool IS_MAX>
__device__ void arg_reduce_rows(usize len, const T* src, T* values, long long* indices) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* vals = reinterpret_cast<A*>(shared_bytes);
    long long* idxs = reinterpret_cast<long long*>(shared_bytes + blockDim.x * sizeof(A) + (8 - (blockDim.x * sizeof(A)) % 8) % 8);
    const T* row = src + blockIdx.x * len;
    unsigned int t = threadIdx.x;
    A best = A(0);
    long long best_j = -1;
    for (usize j = t; j < len; j += blockDim.x) {
        A v = Elem<T>::load(row[j]);
        if (best_j < 0 || arg_better<A, IS_MAX>(v, (long long)j, best, best_j)) {
            best = v;
            best_j = (long long)j;
        }
    }
    vals[t] = best;
    idxs[t] = best_j;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) {
            long long oj = idxs[t + stride];
            if (oj >= 0 && (idxs[t] < 0 || arg_better<A, IS_MAX>(vals[t + stride], oj, vals[t], idxs[t]))) {
                vals[t] = vals[t + stride];
                idxs[t] = oj;
            }
        }
        __syncthreads();
    }
    if (t == 0) {
        values[blockIdx.x] = Elem<T>::store(vals[0]);
        indices[blockIdx.x] = idxs[0];
    }
}

template <typename T, bool IS_MAX>
__device__ void arg_reduce_cols(usize outer, usize r, usize inner, const T* src, T* values, long long* indices) {
    typedef typename Elem<T>::Acc A;
    GRID_STRIDE(k, outer * inner) {
        usize o = k / inner, i = k % inner;
        const T* p = src + o * r * inner + i;
        A best = Elem<T>::load(p[0]);
        long long best_j = 0;
        for (usize j = 1; j < r; ++j) {
            A v = Elem<T>::load(p[j * inner]);
            if (arg_better<A, IS_MAX>(v, (long long)j, best, best_j)) {
                best = v;
                best_j = (long long)j;
            }
        }
        values[k] = Elem<T>::store(best);
        indices[k] = best_j;
    }
}

#define ARG_ONE(NAME, IS_MAX, T, SUFFIX)                                                                       \
    extern "C" __global__ void NAME##_rows_##SUFFIX(usize len, const T* src, T* values, long long* indices) {   \
        arg_reduce_rows<T, IS_MAX>(len, src, values, indices);                                                 \
    }                                                                                                          \
    extern "C" __global__ void NAME##_cols_##SUFFIX(usize outer, usize r, usize inner, const T* src, T* values, \
                                                    long long* indices) {                                      \
        arg_reduce_cols<T, IS_MAX>(outer, r, inner, src, values, indices);                                     \
    }
#define ARGMAX_F(T, S) ARG_ONE(argmax, true, T, S)
#define ARGMIN_F(T, S) ARG_ONE(argmin, false, T, S)
FOR_ALL(ARGMAX_F)
FOR_ALL(ARGMIN_F)

// ---- softmax and log-softmax, one block (or one warp) per row of a contiguous [rows, len] buffer

template <typename T>
__device__ void softmax_rows(usize len, const T* src, T* out, bool log) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    // One row per block, or (blockDim.x == 32) one per warp of a (32, rows) block.
    const usize r = (usize)blockIdx.x * blockDim.y + threadIdx.y;
    const T* row = src + r * len;
    T* dst = out + r * len;
    A m = neg_infinity<A>();
    for (usize j = threadIdx.x; j < len; j += blockDim.x) m = MaxRed::combine<A>(m, Elem<T>::load(row[j]));
    A max = block_reduce<A, MaxRed>(m, scratch);
    // An all -inf row: shift by 0 so the result is NaN-free where PyTorch's is.
    A shift0 = (max == neg_infinity<A>()) ? A(0) : max;
    A acc = A(0);
    for (usize j = threadIdx.x; j < len; j += blockDim.x) acc += d_exp(Elem<T>::load(row[j]) - shift0);
    A total = block_reduce<A, SumRed>(acc, scratch);
    if (log) {
        A shift = shift0 + d_log(total);
        for (usize j = threadIdx.x; j < len; j += blockDim.x) dst[j] = Elem<T>::store(Elem<T>::load(row[j]) - shift);
    } else {
        A inv = A(1) / total;
        for (usize j = threadIdx.x; j < len; j += blockDim.x) dst[j] = Elem<T>::store(d_exp(Elem<T>::load(row[j]) - shift0) * inv);
    }
}

// The softmax (or log-softmax) input gradient from the output y and its gradient g, one
// block (or one warp) per row: y (g - sum g y), or g - e^y sum g.
template <typename T>
__device__ void softmax_backward_rows(usize len, const T* y, const T* g, T* out, bool log) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    const usize r = (usize)blockIdx.x * blockDim.y + threadIdx.y;
    const T* yr = y + r * len;
    const T* gr = g + r * len;
    T* dst = out + r * len;
    A acc = A(0);
    if (log) {
        for (usize j = threadIdx.x; j < len; j += blockDim.x) acc += Elem<T>::load(gr[j]);
    } else {
        for (usize j = threadIdx.x; j < len; j += blockDim.x) acc += Elem<T>::load(yr[j]) * Elem<T>::load(gr[j]);
    }
    A total = block_reduce<A, SumRed>(acc, scratch);
    if (log) {
        for (usize j = threadIdx.x; j < len; j += blockDim.x)
            dst[j] = Elem<T>::store(Elem<T>::load(gr[j]) - d_exp(Elem<T>::load(yr[j])) * total);
    } else {
        for (usize j = threadIdx.x; j < len; j += blockDim.x)
            dst[j] = Elem<T>::store(Elem<T>::load(yr[j]) * (Elem<T>::load(gr[j]) - total));
    }
}

// Inclusive prefix sums along the middle dim of a contiguous [outer, r, inner] buffer,
// one thread per (outer, inner) line, accumulating in order as the CPU does.
template <typename T>
__device__ void cumsum_cols(usize outer, usize r, usize inner, const T* src, T* out) {
    typedef typename Elem<T>::Acc A;
    GRID_STRIDE(k, outer * inner) {
        usize base = (k / inner) * r * inner + k % inner;
        A acc = A(0);
        for (usize j = 0; j < r; ++j) {
            acc += Elem<T>::load(src[base + j * inner]);
            out[base + j * inner] = Elem<T>::store(acc);
        }
    }
}

#define SOFTMAX_F(T, SUFFIX)                                                                                  \
    extern "C" __global__ void softmax_rows_##SUFFIX(usize len, const T* src, T* out) {                       \
        softmax_rows<T>(len, src, out, false);                                                                \
    }                                                                                                         \
    extern "C" __global__ void log_softmax_rows_##SUFFIX(usize len, const T* src, T* out) {                   \
        softmax_rows<T>(len, src, out, true);                                                                 \
    }                                                                                                         \
    extern "C" __global__ void softmax_backward_rows_##SUFFIX(usize len, const T* y, const T* g, T* out) {      \
        softmax_backward_rows<T>(len, y, g, out, false);                                                      \
    }                                                                                                         \
    extern "C" __global__ void log_softmax_backward_rows_##SUFFIX(usize len, const T* y, const T* g, T* out) {  \
        softmax_backward_rows<T>(len, y, g, out, true);                                                       \
    }                                                                                                         \
    extern "C" __global__ void cumsum_cols_##SUFFIX(usize outer, usize r, usize inner, const T* src, T* out) { \
        cumsum_cols<T>(outer, r, inner, src, out);                                                            \
    }
FOR_FLOATS(SOFTMAX_F)
extern "C" __global__ void cumsum_cols_i64(usize outer, usize r, usize inner, const long long* src, long long* out) {
    cumsum_cols<long long>(outer, r, inner, src, out);
}
