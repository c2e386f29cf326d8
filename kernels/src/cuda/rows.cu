// Reductions over one dim of a contiguous [outer, r, inner] buffer, the fused softmax
// family and cumsum. Two shapes of launch: when inner == 1 the reduced elements are
// adjacent, and one block reduces a row through shared memory (`*_rows_*`); otherwise
// adjacent threads own adjacent outputs and walk r with coalesced loads (`*_cols_*`).
// Half types accumulate in f32, as the CPU kernels do.

struct SumRed {
    template <typename A> static __device__ A init() { return A(0); }
    template <typename A> static __device__ A combine(A a, A b) { return a + b; }
};
struct ProdRed {
    template <typename A> static __device__ A init() { return A(1); }
    template <typename A> static __device__ A combine(A a, A b) { return a * b; }
};

// Reduces `value` over the block (blockDim.x a power of two); every thread gets the result.
template <typename A, typename Red>
__device__ A block_reduce(A value, A* scratch) {
    unsigned int t = threadIdx.x;
    scratch[t] = value;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) scratch[t] = Red::template combine<A>(scratch[t], scratch[t + stride]);
        __syncthreads();
    }
    A result = scratch[0];
    __syncthreads();
    return result;
}

struct MaxRed {
    // NaN wins, as in PyTorch's max.
    template <typename A> static __device__ A combine(A a, A b) { return (b > a || b != b) ? b : a; }
};

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

#define REDUCE_ONE(NAME, RED, T, SUFFIX)                                                                      \
    extern "C" __global__ void NAME##_rows_##SUFFIX(usize len, const T* src, T* out) {                        \
        reduce_rows<T, RED>(len, src, out);                                                                   \
    }                                                                                                         \
    extern "C" __global__ void NAME##_cols_##SUFFIX(usize outer, usize r, usize inner, const T* src, T* out) { \
        reduce_cols<T, RED>(outer, r, inner, src, out);                                                       \
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

// ---- softmax and log-softmax, one block per row of a contiguous [rows, len] buffer -------

template <typename T>
__device__ void softmax_rows(usize len, const T* src, T* out, bool log) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    const T* row = src + blockIdx.x * len;
    T* dst = out + blockIdx.x * len;
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
    extern "C" __global__ void cumsum_cols_##SUFFIX(usize outer, usize r, usize inner, const T* src, T* out) { \
        cumsum_cols<T>(outer, r, inner, src, out);                                                            \
    }
FOR_FLOATS(SOFTMAX_F)
extern "C" __global__ void cumsum_cols_i64(usize outer, usize r, usize inner, const long long* src, long long* out) {
    cumsum_cols<long long>(outer, r, inner, src, out);
}

// ---- fused layer norm, one block per row of a contiguous [rows, len] buffer --------------
// Forward writes y and the row's mean and 1/sqrt(var + eps) in the accumulator type (two
// passes over the row: mean, then squared deviations, as the CPU kernel). `weight`/`bias`
// are null when absent.

template <typename T>
__device__ void layer_norm_rows(usize len, const T* x, const T* weight, const T* bias, double eps, T* y,
                                typename Elem<T>::Acc* mean_out, typename Elem<T>::Acc* rstd_out) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    const T* row = x + blockIdx.x * len;
    T* dst = y + blockIdx.x * len;
    A s = A(0);
    for (usize j = threadIdx.x; j < len; j += blockDim.x) s += Elem<T>::load(row[j]);
    A mean = block_reduce<A, SumRed>(s, scratch) / (A)len;
    A q = A(0);
    for (usize j = threadIdx.x; j < len; j += blockDim.x) {
        A d = Elem<T>::load(row[j]) - mean;
        q += d * d;
    }
    A var = block_reduce<A, SumRed>(q, scratch) / (A)len;
    A rstd = A(1) / d_sqrt(var + (A)eps);
    for (usize j = threadIdx.x; j < len; j += blockDim.x) {
        A o = (Elem<T>::load(row[j]) - mean) * rstd;
        if (weight) o *= Elem<T>::load(weight[j]);
        if (bias) o += Elem<T>::load(bias[j]);
        dst[j] = Elem<T>::store(o);
    }
    if (threadIdx.x == 0) {
        mean_out[blockIdx.x] = mean;
        rstd_out[blockIdx.x] = rstd;
    }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight, per row.
template <typename T>
__device__ void layer_norm_backward_rows(usize len, const T* dy, const T* x, const typename Elem<T>::Acc* mean,
                                         const typename Elem<T>::Acc* rstd, const T* weight, T* dx) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    usize base = blockIdx.x * len;
    A mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
    A sg = A(0), sgx = A(0);
    for (usize j = threadIdx.x; j < len; j += blockDim.x) {
        A g = Elem<T>::load(dy[base + j]);
        if (weight) g *= Elem<T>::load(weight[j]);
        sg += g;
        sgx += g * (Elem<T>::load(x[base + j]) - mu) * rs;
    }
    A mean_g = block_reduce<A, SumRed>(sg, scratch) / (A)len;
    A mean_gx = block_reduce<A, SumRed>(sgx, scratch) / (A)len;
    for (usize j = threadIdx.x; j < len; j += blockDim.x) {
        A g = Elem<T>::load(dy[base + j]);
        if (weight) g *= Elem<T>::load(weight[j]);
        A xhat = (Elem<T>::load(x[base + j]) - mu) * rs;
        dx[base + j] = Elem<T>::store(rs * (g - mean_g - xhat * mean_gx));
    }
}

// Partial sums of dweight (dy * xhat) and dbias (dy) over a band of rows: grid
// (ceil(len / blockDim.x), parts); column j of part p sums rows p*band .. (p+1)*band into
// dw_part[p * len + j] / db_part[p * len + j] (accumulator type; the host sums the parts).
template <typename T>
__device__ void layer_norm_param_partials(usize rows, usize len, usize band, const T* dy, const T* x,
                                          const typename Elem<T>::Acc* mean, const typename Elem<T>::Acc* rstd,
                                          typename Elem<T>::Acc* dw_part, typename Elem<T>::Acc* db_part) {
    typedef typename Elem<T>::Acc A;
    usize j = blockIdx.x * (usize)blockDim.x + threadIdx.x;
    if (j >= len) return;
    usize start = blockIdx.y * band, end = start + band < rows ? start + band : rows;
    A sw = A(0), sb = A(0);
    for (usize r = start; r < end; ++r) {
        A g = Elem<T>::load(dy[r * len + j]);
        sw += g * (Elem<T>::load(x[r * len + j]) - mean[r]) * rstd[r];
        sb += g;
    }
    dw_part[blockIdx.y * len + j] = sw;
    db_part[blockIdx.y * len + j] = sb;
}

// ---- fused cross-entropy over class-index targets, one block per row of [rows, classes] --
// Per row: lse = log(sum(exp(x))) and, with w_c the class weights (1 when `weight` is
// null) and eps the label smoothing, loss = (1 - eps) * w_t * (lse - x_t) +
// eps / C * sum_c w_c * (lse - x_c), and the row's weight w_t; both 0 for an ignored row.

template <typename T>
__device__ void cross_entropy_rows(usize len, const T* x, const long long* target, IndexCheck check,
                                   const T* weight, long long ignore_index, double smoothing, T* loss, T* row_weight,
                                   typename Elem<T>::Acc* lse_out) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    const T* row = x + blockIdx.x * len;
    A m = neg_infinity<A>();
    for (usize j = threadIdx.x; j < len; j += blockDim.x) m = MaxRed::combine<A>(m, Elem<T>::load(row[j]));
    A max = block_reduce<A, MaxRed>(m, scratch);
    A shift = (max == neg_infinity<A>()) ? A(0) : max;
    A acc = A(0);
    for (usize j = threadIdx.x; j < len; j += blockDim.x) acc += d_exp(Elem<T>::load(row[j]) - shift);
    A lse = shift + d_log(block_reduce<A, SumRed>(acc, scratch));
    A smooth = A(0);
    if (smoothing != 0.0) {
        A s = A(0);
        for (usize j = threadIdx.x; j < len; j += blockDim.x) {
            A w = weight ? Elem<T>::load(weight[j]) : A(1);
            s += w * (lse - Elem<T>::load(row[j]));
        }
        smooth = block_reduce<A, SumRed>(s, scratch);
    }
    if (threadIdx.x == 0) {
        long long t = target[blockIdx.x];
        bool valid = t != ignore_index && index_ok(check, t);  // a bad target is reported, counts as ignored
        A wt = A(0), l = A(0);
        if (valid) {
            wt = weight ? Elem<T>::load(weight[t]) : A(1);
            A e = (A)smoothing;
            l = (A(1) - e) * wt * (lse - Elem<T>::load(row[t])) + e / (A)len * smooth;
        }
        loss[blockIdx.x] = Elem<T>::store(l);
        row_weight[blockIdx.x] = Elem<T>::store(wt);
        lse_out[blockIdx.x] = lse;
    }
}

// d loss_i / d x_c = (1 - eps) * w_t * (p_c - [c == t]) + eps / C * (p_c * W - w_c), with
// p = softmax(x_i) from the saved lse and W = sum_c w_c; scaled by the row's upstream
// gradient grad[i * grad_stride] (stride 0: one scalar for every row).
template <typename T>
__device__ void cross_entropy_backward_rows(usize len, const T* x, const long long* target, const T* weight,
                                            long long ignore_index, double smoothing,
                                            const typename Elem<T>::Acc* lse, const T* grad, usize grad_stride,
                                            T* dx) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    usize base = blockIdx.x * len;
    long long t = target[blockIdx.x];
    bool valid = t != ignore_index && t >= 0 && (usize)t < len;  // the forward pass reported bad ones
    A e = (A)smoothing;
    A total_w = (A)len;
    if (weight && smoothing != 0.0) {
        A s = A(0);
        for (usize j = threadIdx.x; j < len; j += blockDim.x) s += Elem<T>::load(weight[j]);
        total_w = block_reduce<A, SumRed>(s, scratch);
    }
    A g = valid ? Elem<T>::load(grad[blockIdx.x * grad_stride]) : A(0);
    A wt = valid ? (weight ? Elem<T>::load(weight[t]) : A(1)) : A(0);
    A l = lse[blockIdx.x];
    for (usize j = threadIdx.x; j < len; j += blockDim.x) {
        A p = d_exp(Elem<T>::load(x[base + j]) - l);
        A d = (A(1) - e) * wt * (p - ((long long)j == t ? A(1) : A(0)));
        if (smoothing != 0.0) d += e / (A)len * (p * total_w - (weight ? Elem<T>::load(weight[j]) : A(1)));
        dx[base + j] = Elem<T>::store(valid ? g * d : A(0));
    }
}

#define FUSED_F(T, S)                                                                                           \
    extern "C" __global__ void layer_norm_rows_##S(usize len, const T* x, const T* w, const T* b, double eps,    \
                                                   T* y, Elem<T>::Acc* mean, Elem<T>::Acc* rstd) {             \
        layer_norm_rows<T>(len, x, w, b, eps, y, mean, rstd);                                                    \
    }                                                                                                           \
    extern "C" __global__ void layer_norm_backward_rows_##S(usize len, const T* dy, const T* x,                 \
                                                            const Elem<T>::Acc* mean, const Elem<T>::Acc* rstd, \
                                                            const T* w, T* dx) {                                \
        layer_norm_backward_rows<T>(len, dy, x, mean, rstd, w, dx);                                              \
    }                                                                                                           \
    extern "C" __global__ void layer_norm_param_partials_##S(usize rows, usize len, usize band, const T* dy,    \
                                                             const T* x, const Elem<T>::Acc* mean,              \
                                                             const Elem<T>::Acc* rstd, Elem<T>::Acc* dw,        \
                                                             Elem<T>::Acc* db) {                                \
        layer_norm_param_partials<T>(rows, len, band, dy, x, mean, rstd, dw, db);                                \
    }                                                                                                           \
    extern "C" __global__ void cross_entropy_rows_##S(usize len, const T* x, const long long* target,           \
                                                      IndexCheck check, const T* w, long long ignore_index,     \
                                                      double smoothing, T* loss, T* row_weight,                 \
                                                      Elem<T>::Acc* lse) {                                      \
        cross_entropy_rows<T>(len, x, target, check, w, ignore_index, smoothing, loss, row_weight, lse);         \
    }                                                                                                           \
    extern "C" __global__ void cross_entropy_backward_rows_##S(usize len, const T* x, const long long* target,  \
                                                               const T* w, long long ignore_index,              \
                                                               double smoothing, const Elem<T>::Acc* lse,       \
                                                               const T* grad, usize grad_stride, T* dx) {       \
        cross_entropy_backward_rows<T>(len, x, target, w, ignore_index, smoothing, lse, grad, grad_stride, dx);  \
    }
FOR_FLOATS(FUSED_F)
