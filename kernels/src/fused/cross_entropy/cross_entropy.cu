// Fused cross-entropy over class-index targets, one block per row of [rows, classes]:
// per-row loss, target weight and log-sum-exp forward; the logits' gradient backward.
// Targets are checked on the device as they are read (see `IndexCheck` in common.cuh).

// Per row: lse = log(sum(exp(x))), kept as the pair (max, log(sum(exp(x - max)))) and used as
// (max - x) + log(sum): max + log(sum) would round at max's scale (see mod.rs); and, with w_c the class weights (1 when `weight` is
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
    A log_total = d_log(block_reduce<A, SumRed>(acc, scratch));
    A smooth = A(0);
    if (smoothing != 0.0) {
        A s = A(0);
        for (usize j = threadIdx.x; j < len; j += blockDim.x) {
            A w = weight ? Elem<T>::load(weight[j]) : A(1);
            s += w * ((shift - Elem<T>::load(row[j])) + log_total);
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
            l = (A(1) - e) * wt * ((shift - Elem<T>::load(row[t])) + log_total) + e / (A)len * smooth;
        }
        loss[blockIdx.x] = Elem<T>::store(l);
        row_weight[blockIdx.x] = Elem<T>::store(wt);
        lse_out[2 * blockIdx.x] = shift;
        lse_out[2 * blockIdx.x + 1] = log_total;
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
    A shift = lse[2 * blockIdx.x], log_total = lse[2 * blockIdx.x + 1];
    for (usize j = threadIdx.x; j < len; j += blockDim.x) {
        A p = d_exp((Elem<T>::load(x[base + j]) - shift) - log_total);
        A d = (A(1) - e) * wt * (p - ((long long)j == t ? A(1) : A(0)));
        if (smoothing != 0.0) d += e / (A)len * (p * total_w - (weight ? Elem<T>::load(weight[j]) : A(1)));
        dx[base + j] = Elem<T>::store(valid ? g * d : A(0));
    }
}

#define CROSS_ENTROPY_F(T, S)                                                                                   \
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
FOR_FLOATS(CROSS_ENTROPY_F)
