// Elementwise kernels over strided, broadcast views; the output is contiguous.
// `info` holds [shape (rank), lhs strides (rank), rhs strides (rank)]; rank 0 means both
// inputs are contiguous, the fast path. Grid-stride loops: any launch size is correct.

struct AddOp { template <typename A> static __device__ A apply(A a, A b) { return a + b; } };
struct SubOp { template <typename A> static __device__ A apply(A a, A b) { return a - b; } };
struct MulOp { template <typename A> static __device__ A apply(A a, A b) { return a * b; } };
struct DivOp { template <typename A> static __device__ A apply(A a, A b) { return a / b; } };
// NaN propagates, as in PyTorch's maximum/minimum.
struct MaxOp { template <typename A> static __device__ A apply(A a, A b) { return (a != a || a > b) ? a : b; } };
struct MinOp { template <typename A> static __device__ A apply(A a, A b) { return (a != a || a < b) ? a : b; } };
struct PowOp { template <typename A> static __device__ A apply(A a, A b) { return d_pow(a, b); } };

template <typename T, typename Op>
__device__ void binary(usize n, unsigned int rank, const usize* info, const T* lhs, usize lhs_offset,
                       const T* rhs, usize rhs_offset, T* out) {
    typedef typename Elem<T>::Acc A;
    for (usize i = blockIdx.x * (usize)blockDim.x + threadIdx.x; i < n; i += (usize)blockDim.x * gridDim.x) {
        usize lo = lhs_offset + i, ro = rhs_offset + i;
        if (rank > 0) {
            lo = lhs_offset + strided_offset(i, rank, info, info + rank);
            ro = rhs_offset + strided_offset(i, rank, info, info + 2 * rank);
        }
        A a = Elem<T>::load(lhs[lo]);
        A b = Elem<T>::load(rhs[ro]);
        out[i] = Elem<T>::store(Op::template apply<A>(a, b));
    }
}

#define BINARY(NAME, OP, T, SUFFIX)                                                                    \
    extern "C" __global__ void NAME##_##SUFFIX(usize n, unsigned int rank, const usize* info,         \
                                               const T* lhs, usize lhs_offset, const T* rhs,           \
                                               usize rhs_offset, T* out) {                             \
        binary<T, OP>(n, rank, info, lhs, lhs_offset, rhs, rhs_offset, out);                           \
    }

#define BINARY_ALL(NAME, OP)        \
    BINARY(NAME, OP, float, f32)    \
    BINARY(NAME, OP, double, f64)   \
    BINARY(NAME, OP, Half, f16)     \
    BINARY(NAME, OP, BFloat, bf16)

BINARY_ALL(add, AddOp)
BINARY_ALL(sub, SubOp)
BINARY_ALL(mul, MulOp)
BINARY_ALL(div, DivOp)
BINARY_ALL(maximum, MaxOp)
BINARY_ALL(minimum, MinOp)
BINARY_ALL(pow, PowOp)

// Unary kernels: `info` holds [shape, strides]; rank 0 means contiguous input.
struct ExpOp { template <typename A> static __device__ A apply(A x) { return d_exp(x); } };
struct LogOp { template <typename A> static __device__ A apply(A x) { return d_log(x); } };
struct SqrtOp { template <typename A> static __device__ A apply(A x) { return d_sqrt(x); } };
struct RsqrtOp { template <typename A> static __device__ A apply(A x) { return d_rsqrt(x); } };
struct SinOp { template <typename A> static __device__ A apply(A x) { return d_sin(x); } };
struct CosOp { template <typename A> static __device__ A apply(A x) { return d_cos(x); } };
struct TanhOp { template <typename A> static __device__ A apply(A x) { return d_tanh(x); } };
struct NegOp { template <typename A> static __device__ A apply(A x) { return -x; } };
struct AbsOp { template <typename A> static __device__ A apply(A x) { return d_abs(x); } };
struct ReluOp { template <typename A> static __device__ A apply(A x) { return x > A(0) ? x : A(0); } };
struct ErfOp { template <typename A> static __device__ A apply(A x) { return d_erf(x); } };
// Stable for either sign: e^-|x| never overflows.
struct SigmoidOp {
    template <typename A> static __device__ A apply(A x) {
        A e = d_exp(-d_abs(x));
        A r = A(1) / (A(1) + e);
        return x >= A(0) ? r : e * r;
    }
};
struct SiluOp { template <typename A> static __device__ A apply(A x) { return x / (A(1) + d_exp(-x)); } };
struct GeluOp {
    template <typename A> static __device__ A apply(A x) { return A(0.5) * x * (A(1) + d_erf(x * A(0.70710678118654752440))); }
};
struct GeluTanhOp {
    template <typename A> static __device__ A apply(A x) {
        A inner = A(0.79788456080286535588) * (x + A(0.044715) * x * x * x);
        return A(0.5) * x * (A(1) + d_tanh(inner));
    }
};

template <typename T, typename Op>
__device__ void unary(usize n, unsigned int rank, const usize* info, const T* src, usize src_offset, T* out) {
    typedef typename Elem<T>::Acc A;
    for (usize i = blockIdx.x * (usize)blockDim.x + threadIdx.x; i < n; i += (usize)blockDim.x * gridDim.x) {
        usize o = rank > 0 ? src_offset + strided_offset(i, rank, info, info + rank) : src_offset + i;
        out[i] = Elem<T>::store(Op::template apply<A>(Elem<T>::load(src[o])));
    }
}

#define UNARY(NAME, OP, T, SUFFIX)                                                                     \
    extern "C" __global__ void NAME##_##SUFFIX(usize n, unsigned int rank, const usize* info,         \
                                               const T* src, usize src_offset, T* out) {               \
        unary<T, OP>(n, rank, info, src, src_offset, out);                                             \
    }

#define UNARY_ALL(NAME, OP)        \
    UNARY(NAME, OP, float, f32)    \
    UNARY(NAME, OP, double, f64)   \
    UNARY(NAME, OP, Half, f16)     \
    UNARY(NAME, OP, BFloat, bf16)

UNARY_ALL(exp, ExpOp)
UNARY_ALL(log, LogOp)
UNARY_ALL(sqrt, SqrtOp)
UNARY_ALL(rsqrt, RsqrtOp)
UNARY_ALL(sin, SinOp)
UNARY_ALL(cos, CosOp)
UNARY_ALL(tanh, TanhOp)
UNARY_ALL(neg, NegOp)
UNARY_ALL(abs, AbsOp)
UNARY_ALL(relu, ReluOp)
UNARY_ALL(erf, ErfOp)
UNARY_ALL(sigmoid, SigmoidOp)
UNARY_ALL(silu, SiluOp)
UNARY_ALL(gelu, GeluOp)
UNARY_ALL(gelu_tanh, GeluTanhOp)
