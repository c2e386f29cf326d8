// Row-wise kernels over a contiguous [rows, len] buffer, one block per row: sum,
// softmax and log-softmax in one launch each (max, exponentials and their sum reduced
// in shared memory), accumulating in f32 for half types.

template <typename A>
__device__ A block_reduce(A value, A* scratch, bool is_max) {
    unsigned int t = threadIdx.x;
    scratch[t] = value;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) {
            A other = scratch[t + stride];
            scratch[t] = is_max ? ((other > scratch[t] || other != other) ? other : scratch[t]) : scratch[t] + other;
        }
        __syncthreads();
    }
    A result = scratch[0];
    __syncthreads();
    return result;
}

template <typename T>
__device__ void sum_rows(usize len, const T* src, T* out) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    const T* row = src + blockIdx.x * len;
    A acc = A(0);
    for (usize j = threadIdx.x; j < len; j += blockDim.x) acc += Elem<T>::load(row[j]);
    A total = block_reduce(acc, scratch, false);
    if (threadIdx.x == 0) out[blockIdx.x] = Elem<T>::store(total);
}

template <typename T>
__device__ void softmax_rows(usize len, const T* src, T* out, bool log) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* scratch = reinterpret_cast<A*>(shared_bytes);
    const T* row = src + blockIdx.x * len;
    T* dst = out + blockIdx.x * len;
    A m = neg_infinity<A>();
    for (usize j = threadIdx.x; j < len; j += blockDim.x) {
        A v = Elem<T>::load(row[j]);
        m = (v > m || v != v) ? v : m;
    }
    A max = block_reduce(m, scratch, true);
    A acc = A(0);
    for (usize j = threadIdx.x; j < len; j += blockDim.x) acc += d_exp(Elem<T>::load(row[j]) - max);
    A total = block_reduce(acc, scratch, false);
    if (log) {
        A shift = max + d_log(total);
        for (usize j = threadIdx.x; j < len; j += blockDim.x) dst[j] = Elem<T>::store(Elem<T>::load(row[j]) - shift);
    } else {
        A inv = A(1) / total;
        for (usize j = threadIdx.x; j < len; j += blockDim.x) dst[j] = Elem<T>::store(d_exp(Elem<T>::load(row[j]) - max) * inv);
    }
}

#define ROWS(T, SUFFIX)                                                                                          \
    extern "C" __global__ void sum_rows_##SUFFIX(usize len, const T* src, T* out) { sum_rows<T>(len, src, out); } \
    extern "C" __global__ void softmax_rows_##SUFFIX(usize len, const T* src, T* out) {                          \
        softmax_rows<T>(len, src, out, false);                                                                   \
    }                                                                                                            \
    extern "C" __global__ void log_softmax_rows_##SUFFIX(usize len, const T* src, T* out) {                      \
        softmax_rows<T>(len, src, out, true);                                                                    \
    }

ROWS(float, f32)
ROWS(double, f64)
ROWS(Half, f16)
ROWS(BFloat, bf16)
