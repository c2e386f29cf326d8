// Fused layer norm, one block (or one warp, for short rows) per row of a contiguous [rows, len] buffer: the forward
// (output, per-row mean and reciprocal std), the input gradient, and banded partial sums
// of the weight and bias gradients. Half types accumulate in f32, as the CPU kernel
// (kernels/src/fused/layer_norm/mod.rs) does.

// Forward writes y and the row's mean and 1/sqrt(var + eps) in the accumulator type (two
// passes over the row: mean, then squared deviations, as the CPU kernel). `weight`/`bias`
// are null when absent.

template <typename T>
__device__ void layer_norm_rows(usize len, const T* x, const T* weight, const T* bias, double eps, T* y,
                                typename Elem<T>::Acc* mean_out, typename Elem<T>::Acc* rstd_out) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    // One row per block, or (blockDim.x == 32) one per warp of a (32, rows) block.
    const usize r = (usize)blockIdx.x * blockDim.y + threadIdx.y;
    const T* row = x + r * len;
    T* dst = y + r * len;
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
        mean_out[r] = mean;
        rstd_out[r] = rstd;
    }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight, per row.
template <typename T>
__device__ void layer_norm_backward_rows(usize len, const T* dy, const T* x, const typename Elem<T>::Acc* mean,
                                         const typename Elem<T>::Acc* rstd, const T* weight, T* dx) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    const usize r = (usize)blockIdx.x * blockDim.y + threadIdx.y;
    usize base = r * len;
    A mu = mean[r], rs = rstd[r];
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

#define LAYER_NORM_F(T, S)                                                                                      \
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
    }
FOR_FLOATS(LAYER_NORM_F)
