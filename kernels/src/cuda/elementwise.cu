// Elementwise kernels over strided, broadcast views (see `Geometry`): binary and unary
// ops, scalar ops, comparisons, `where`, casts and copies, fills, and the in-place forms
// that write through a strided destination. Grid-stride loops: any launch size is correct.
// Every op computes in the accumulator type (f32 for half types), as the CPU kernels do.

// ---- binary ops ---------------------------------------------------------------------------

struct AddOp { template <typename A> static __device__ A apply(A a, A b) { return a + b; } };
struct SubOp { template <typename A> static __device__ A apply(A a, A b) { return a - b; } };
struct MulOp { template <typename A> static __device__ A apply(A a, A b) { return a * b; } };
struct DivOp { template <typename A> static __device__ A apply(A a, A b) { return a / b; } };
// NaN propagates, as in PyTorch's maximum/minimum (a != a is false for integers).
struct MaxOp { template <typename A> static __device__ A apply(A a, A b) { return (a != a || a > b) ? a : b; } };
struct MinOp { template <typename A> static __device__ A apply(A a, A b) { return (a != a || a < b) ? a : b; } };
struct PowOp { template <typename A> static __device__ A apply(A a, A b) { return d_pow(a, b); } };
struct Atan2Op { template <typename A> static __device__ A apply(A a, A b) { return d_atan2(a, b); } };
// The fused backwards of GELU (erf and tanh forms) and SiLU: a = incoming gradient, b = x.
struct GeluBackwardOp {
    template <typename A> static __device__ A apply(A g, A x) {
        A cdf = (A)0.5 * ((A)1 + d_erf(x * (A)0.70710678118654752440));
        A pdf = d_exp((A)-0.5 * x * x) * (A)0.39894228040143267794;
        return g * (cdf + x * pdf);
    }
};
struct GeluTanhBackwardOp {
    template <typename A> static __device__ A apply(A g, A x) {
        const A k = (A)0.79788456080286535588, c = (A)0.044715;
        A t = d_tanh(k * (x + c * x * x * x));
        A inner = k * ((A)1 + (A)3 * c * x * x);
        return g * ((A)0.5 * ((A)1 + t) + (A)0.5 * x * ((A)1 - t * t) * inner);
    }
};
// ReLU's backward (PyTorch's threshold_backward): no gradient where x <= 0, so a NaN input
// passes its gradient through.
struct ReluBackwardOp {
    template <typename A> static __device__ A apply(A g, A x) { return x <= (A)0 ? (A)0 : g; }
};
struct SiluBackwardOp {
    template <typename A> static __device__ A apply(A g, A x) {
        A s = (A)1 / ((A)1 + d_exp(-x));
        return g * s * ((A)1 + x * ((A)1 - s));
    }
};
// `copy_` and region writes: the destination takes the source.
struct AssignOp { template <typename A> static __device__ A apply(A, A b) { return b; } };

// Every binary kernel scales its second operand by `alpha` first (in the accumulator
// type, skipped when it is 1), so `add` with alpha is PyTorch's `add(b, alpha=...)` and
// the optimizer update `p += -lr * g` is one launch.
template <typename A>
__device__ __forceinline__ A scaled(A y, double alpha) {
    return alpha == 1.0 ? y : (A)(y * (A)alpha);
}

// out[i] = op(a[i], alpha * b[i]); out is contiguous.
template <typename T, typename Op>
__device__ void binary(usize n, const Geometry& g, const T* a, const T* b, T* out, double alpha) {
    typedef typename Elem<T>::Acc A;
    GRID_STRIDE(i, n) {
        A x = Elem<T>::load(a[geo_offset(g, 0, i)]);
        A y = scaled(Elem<T>::load(b[geo_offset(g, 1, i)]), alpha);
        out[i] = Elem<T>::store(Op::template apply<A>(x, y));
    }
}

// dst[i] = op(dst[i], alpha * src[i]) through dst's strides (operand 0) and src's (operand 1).
template <typename T, typename Op>
__device__ void binary_inplace(usize n, const Geometry& g, T* dst, const T* src, double alpha) {
    typedef typename Elem<T>::Acc A;
    GRID_STRIDE(i, n) {
        usize o = geo_offset(g, 0, i);
        A x = Elem<T>::load(dst[o]);
        A y = scaled(Elem<T>::load(src[geo_offset(g, 1, i)]), alpha);
        dst[o] = Elem<T>::store(Op::template apply<A>(x, y));
    }
}

#define BINARY_ONE(NAME, OP, T, SUFFIX)                                                                  \
    extern "C" __global__ void NAME##_##SUFFIX(usize n, Geometry g, const T* a, const T* b, T* out,     \
                                               double alpha) {                                           \
        binary<T, OP>(n, g, a, b, out, alpha);                                                           \
    }                                                                                                    \
    extern "C" __global__ void NAME##_inplace_##SUFFIX(usize n, Geometry g, T* dst, const T* src,       \
                                                       double alpha) {                                   \
        binary_inplace<T, OP>(n, g, dst, src, alpha);                                                    \
    }

#define ADD_F(T, S) BINARY_ONE(add, AddOp, T, S)
#define SUB_F(T, S) BINARY_ONE(sub, SubOp, T, S)
#define MUL_F(T, S) BINARY_ONE(mul, MulOp, T, S)
#define DIV_F(T, S) BINARY_ONE(div, DivOp, T, S)
#define MAX_F(T, S) BINARY_ONE(maximum, MaxOp, T, S)
#define MIN_F(T, S) BINARY_ONE(minimum, MinOp, T, S)
#define POW_F(T, S) BINARY_ONE(pow, PowOp, T, S)
#define ATAN2_F(T, S) BINARY_ONE(atan2, Atan2Op, T, S)
#define GELU_BACKWARD_F(T, S) BINARY_ONE(gelu_backward, GeluBackwardOp, T, S)
#define GELU_TANH_BACKWARD_F(T, S) BINARY_ONE(gelu_tanh_backward, GeluTanhBackwardOp, T, S)
#define SILU_BACKWARD_F(T, S) BINARY_ONE(silu_backward, SiluBackwardOp, T, S)
#define RELU_BACKWARD_F(T, S) BINARY_ONE(relu_backward, ReluBackwardOp, T, S)
#define ASSIGN_F(T, S) BINARY_ONE(assign, AssignOp, T, S)
FOR_NUMS(ADD_F)
FOR_NUMS(SUB_F)
FOR_NUMS(MUL_F)
FOR_NUMS(DIV_F)
FOR_NUMS(MAX_F)
FOR_NUMS(MIN_F)
FOR_FLOATS(POW_F)
FOR_FLOATS(ATAN2_F)
FOR_FLOATS(GELU_BACKWARD_F)
FOR_FLOATS(GELU_TANH_BACKWARD_F)
FOR_FLOATS(SILU_BACKWARD_F)
FOR_FLOATS(RELU_BACKWARD_F)
FOR_ALL(ASSIGN_F)

// out = a && b for bool tensors (`alpha` is the binary kernels' shared parameter, unused).
extern "C" __global__ void logical_and_bool(usize n, Geometry g, const bool* a, const bool* b, bool* out, double) {
    GRID_STRIDE(i, n) { out[i] = a[geo_offset(g, 0, i)] && b[geo_offset(g, 1, i)]; }
}

// ---- unary float ops, with up to two scalar parameters ------------------------------------

// Parameters arrive as f64 and are converted to the accumulator type, as the CPU does.
struct ExpOp { template <typename A> static __device__ A apply(A x, A, A) { return d_exp(x); } };
struct LogOp { template <typename A> static __device__ A apply(A x, A, A) { return d_log(x); } };
struct SqrtOp { template <typename A> static __device__ A apply(A x, A, A) { return d_sqrt(x); } };
struct RsqrtOp { template <typename A> static __device__ A apply(A x, A, A) { return A(1) / d_sqrt(x); } };
struct SinOp { template <typename A> static __device__ A apply(A x, A, A) { return d_sin(x); } };
struct CosOp { template <typename A> static __device__ A apply(A x, A, A) { return d_cos(x); } };
struct TanhOp { template <typename A> static __device__ A apply(A x, A, A) { return d_tanh(x); } };
struct NegOp { template <typename A> static __device__ A apply(A x, A, A) { return -x; } };
struct AbsOp { template <typename A> static __device__ A apply(A x, A, A) { return d_abs(x); } };
struct SignOp { template <typename A> static __device__ A apply(A x, A, A) { return x > A(0) ? A(1) : (x < A(0) ? A(-1) : A(0)); } };
struct ReluOp { template <typename A> static __device__ A apply(A x, A, A) { return x > A(0) ? x : A(0); } };
struct ErfOp { template <typename A> static __device__ A apply(A x, A, A) { return d_erf(x); } };
// Stable for either sign: e^-|x| never overflows.
struct SigmoidOp {
    template <typename A> static __device__ A apply(A x, A, A) {
        A e = d_exp(-d_abs(x));
        A r = A(1) / (A(1) + e);
        return x >= A(0) ? r : e * r;
    }
};
struct SiluOp { template <typename A> static __device__ A apply(A x, A, A) { return x / (A(1) + d_exp(-x)); } };
struct GeluOp {
    template <typename A> static __device__ A apply(A x, A, A) { return A(0.5) * x * (A(1) + d_erf(x * A(0.70710678118654752440))); }
};
struct GeluTanhOp {
    template <typename A> static __device__ A apply(A x, A, A) {
        A inner = A(0.79788456080286535588) * (x + A(0.044715) * x * x * x);
        return A(0.5) * x * (A(1) + d_tanh(inner));
    }
};
// p0: negative slope.
struct LeakyReluOp { template <typename A> static __device__ A apply(A x, A slope, A) { return x > A(0) ? x : x * slope; } };
// p0: alpha.
struct EluOp { template <typename A> static __device__ A apply(A x, A alpha, A) { return x > A(0) ? x : alpha * d_expm1(x); } };
// p0: beta, p1: threshold above which softplus is the identity.
struct SoftplusOp {
    template <typename A> static __device__ A apply(A x, A beta, A threshold) {
        A bx = x * beta;
        return bx > threshold ? x : d_log1p(d_exp(bx)) / beta;
    }
};
// relu6(x + 3) / 6, as PyTorch computes it.
struct HardsigmoidOp {
    template <typename A> static __device__ A apply(A x, A, A) {
        A y = x + A(3);
        y = y < A(0) ? A(0) : y;
        return (y > A(6) ? A(6) : y) / A(6);
    }
};
struct HardswishOp {
    template <typename A> static __device__ A apply(A x, A, A) {
        A y = x + A(3);
        y = y < A(0) ? A(0) : y;
        return x * (y > A(6) ? A(6) : y) / A(6);
    }
};
struct MishOp { template <typename A> static __device__ A apply(A x, A, A) { return x * d_tanh(d_log1p(d_exp(x))); } };
// x * p0 + p1 (scalar add/sub/mul and their in-place forms).
struct AffineOp { template <typename A> static __device__ A apply(A x, A mul, A add) { return x * mul + add; } };
struct DivScalarOp { template <typename A> static __device__ A apply(A x, A d, A) { return x / d; } };
struct RdivScalarOp { template <typename A> static __device__ A apply(A x, A v, A) { return v / x; } };
struct PowScalarOp { template <typename A> static __device__ A apply(A x, A e, A) { return e == A(2) ? x * x : d_pow(x, e); } };
// Branch-free (two selects); NaN propagates since both comparisons are false.
struct ClampOp {
    template <typename A> static __device__ A apply(A x, A lo, A hi) {
        A y = x < lo ? lo : x;
        return y > hi ? hi : y;
    }
};

template <typename T, typename Op>
__device__ void unary(usize n, const Geometry& g, const T* src, T* out, double p0, double p1) {
    typedef typename Elem<T>::Acc A;
    A a0 = (A)p0, a1 = (A)p1;
    GRID_STRIDE(i, n) { out[i] = Elem<T>::store(Op::template apply<A>(Elem<T>::load(src[geo_offset(g, 0, i)]), a0, a1)); }
}

template <typename T, typename Op>
__device__ void unary_inplace(usize n, const Geometry& g, T* dst, double p0, double p1) {
    typedef typename Elem<T>::Acc A;
    A a0 = (A)p0, a1 = (A)p1;
    GRID_STRIDE(i, n) {
        usize o = geo_offset(g, 0, i);
        dst[o] = Elem<T>::store(Op::template apply<A>(Elem<T>::load(dst[o]), a0, a1));
    }
}

#define UNARY_ONE(NAME, OP, T, SUFFIX)                                                                        \
    extern "C" __global__ void NAME##_##SUFFIX(usize n, Geometry g, const T* src, T* out, double p0, double p1) { \
        unary<T, OP>(n, g, src, out, p0, p1);                                                                 \
    }                                                                                                         \
    extern "C" __global__ void NAME##_inplace_##SUFFIX(usize n, Geometry g, T* dst, double p0, double p1) {   \
        unary_inplace<T, OP>(n, g, dst, p0, p1);                                                              \
    }

#define EXP_F(T, S) UNARY_ONE(exp, ExpOp, T, S)
#define LOG_F(T, S) UNARY_ONE(log, LogOp, T, S)
#define SQRT_F(T, S) UNARY_ONE(sqrt, SqrtOp, T, S)
#define RSQRT_F(T, S) UNARY_ONE(rsqrt, RsqrtOp, T, S)
#define SIN_F(T, S) UNARY_ONE(sin, SinOp, T, S)
#define COS_F(T, S) UNARY_ONE(cos, CosOp, T, S)
#define TANH_F(T, S) UNARY_ONE(tanh, TanhOp, T, S)
#define NEG_F(T, S) UNARY_ONE(neg, NegOp, T, S)
#define ABS_F(T, S) UNARY_ONE(abs, AbsOp, T, S)
#define SIGN_F(T, S) UNARY_ONE(sign, SignOp, T, S)
#define RELU_F(T, S) UNARY_ONE(relu, ReluOp, T, S)
#define ERF_F(T, S) UNARY_ONE(erf, ErfOp, T, S)
#define SIGMOID_F(T, S) UNARY_ONE(sigmoid, SigmoidOp, T, S)
#define SILU_F(T, S) UNARY_ONE(silu, SiluOp, T, S)
#define GELU_F(T, S) UNARY_ONE(gelu, GeluOp, T, S)
#define GELU_TANH_F(T, S) UNARY_ONE(gelu_tanh, GeluTanhOp, T, S)
#define LEAKY_RELU_F(T, S) UNARY_ONE(leaky_relu, LeakyReluOp, T, S)
#define ELU_F(T, S) UNARY_ONE(elu, EluOp, T, S)
#define SOFTPLUS_F(T, S) UNARY_ONE(softplus, SoftplusOp, T, S)
#define HARDSIGMOID_F(T, S) UNARY_ONE(hardsigmoid, HardsigmoidOp, T, S)
#define HARDSWISH_F(T, S) UNARY_ONE(hardswish, HardswishOp, T, S)
#define MISH_F(T, S) UNARY_ONE(mish, MishOp, T, S)
#define AFFINE_F(T, S) UNARY_ONE(affine, AffineOp, T, S)
#define DIV_SCALAR_F(T, S) UNARY_ONE(div_scalar, DivScalarOp, T, S)
#define RDIV_SCALAR_F(T, S) UNARY_ONE(rdiv_scalar, RdivScalarOp, T, S)
#define POW_SCALAR_F(T, S) UNARY_ONE(pow_scalar, PowScalarOp, T, S)
#define CLAMP_F(T, S) UNARY_ONE(clamp, ClampOp, T, S)
FOR_FLOATS(EXP_F)
FOR_FLOATS(LOG_F)
FOR_FLOATS(SQRT_F)
FOR_FLOATS(RSQRT_F)
FOR_FLOATS(SIN_F)
FOR_FLOATS(COS_F)
FOR_FLOATS(TANH_F)
FOR_FLOATS(NEG_F)
FOR_FLOATS(ABS_F)
FOR_FLOATS(SIGN_F)
FOR_FLOATS(RELU_F)
FOR_FLOATS(ERF_F)
FOR_FLOATS(SIGMOID_F)
FOR_FLOATS(SILU_F)
FOR_FLOATS(GELU_F)
FOR_FLOATS(GELU_TANH_F)
FOR_FLOATS(LEAKY_RELU_F)
FOR_FLOATS(ELU_F)
FOR_FLOATS(SOFTPLUS_F)
FOR_FLOATS(HARDSIGMOID_F)
FOR_FLOATS(HARDSWISH_F)
FOR_FLOATS(MISH_F)
FOR_FLOATS(AFFINE_F)
FOR_FLOATS(DIV_SCALAR_F)
FOR_FLOATS(RDIV_SCALAR_F)
FOR_FLOATS(POW_SCALAR_F)
FOR_FLOATS(CLAMP_F)

// ---- comparisons and where ----------------------------------------------------------------

struct EqCmp { template <typename A> static __device__ bool apply(A a, A b) { return a == b; } };
struct NeCmp { template <typename A> static __device__ bool apply(A a, A b) { return a != b; } };
struct LtCmp { template <typename A> static __device__ bool apply(A a, A b) { return a < b; } };
struct LeCmp { template <typename A> static __device__ bool apply(A a, A b) { return a <= b; } };
struct GtCmp { template <typename A> static __device__ bool apply(A a, A b) { return a > b; } };
struct GeCmp { template <typename A> static __device__ bool apply(A a, A b) { return a >= b; } };

template <typename T, typename Cmp>
__device__ void compare(usize n, const Geometry& g, const T* a, const T* b, bool* out) {
    typedef typename Elem<T>::Acc A;
    GRID_STRIDE(i, n) {
        A x = Elem<T>::load(a[geo_offset(g, 0, i)]);
        A y = Elem<T>::load(b[geo_offset(g, 1, i)]);
        out[i] = Cmp::template apply<A>(x, y);
    }
}

// Launched like the binary kernels, so they take (and ignore) `alpha` too.
#define CMP_ONE(NAME, CMP, T, SUFFIX)                                                                       \
    extern "C" __global__ void NAME##_##SUFFIX(usize n, Geometry g, const T* a, const T* b, bool* out,     \
                                               double) {                                                    \
        compare<T, CMP>(n, g, a, b, out);                                                                   \
    }
#define EQ_F(T, S) CMP_ONE(eq, EqCmp, T, S)
#define NE_F(T, S) CMP_ONE(ne, NeCmp, T, S)
#define LT_F(T, S) CMP_ONE(lt, LtCmp, T, S)
#define LE_F(T, S) CMP_ONE(le, LeCmp, T, S)
#define GT_F(T, S) CMP_ONE(gt, GtCmp, T, S)
#define GE_F(T, S) CMP_ONE(ge, GeCmp, T, S)
FOR_ALL(EQ_F)
FOR_ALL(NE_F)
FOR_ALL(LT_F)
FOR_ALL(LE_F)
FOR_ALL(GT_F)
FOR_ALL(GE_F)

// out[i] = cond ? a : b; the condition is operand 0, a and b operands 1 and 2.
#define WHERE_F(T, SUFFIX)                                                                                    \
    extern "C" __global__ void where_##SUFFIX(usize n, Geometry g, const bool* c, const T* a, const T* b, T* out) { \
        GRID_STRIDE(i, n) { out[i] = c[geo_offset(g, 0, i)] ? a[geo_offset(g, 1, i)] : b[geo_offset(g, 2, i)]; } \
    }
FOR_ALL(WHERE_F)

// ---- casts, copies and fills --------------------------------------------------------------

// out[i] = D::from_f64(S::to_f64(src[i])): the CPU's conversion, for every pair of dtypes
// (a same-type pair is a strided copy, as `contiguous`).
template <typename S, typename D>
__device__ void cast(usize n, const Geometry& g, const S* src, D* out) {
    GRID_STRIDE(i, n) { out[i] = Elem<D>::from_f64(Elem<S>::to_f64(src[geo_offset(g, 0, i)])); }
}
template <typename T>
__device__ void copy(usize n, const Geometry& g, const T* src, T* out) {
    GRID_STRIDE(i, n) { out[i] = src[geo_offset(g, 0, i)]; }
}

#define CAST_PAIR(S, SS, D, DS)                                                                            \
    extern "C" __global__ void cast_##SS##_##DS(usize n, Geometry g, const S* src, D* out) { cast<S, D>(n, g, src, out); }
#define CAST_TO_ALL(S, SS)           \
    CAST_PAIR(S, SS, float, f32)     \
    CAST_PAIR(S, SS, double, f64)    \
    CAST_PAIR(S, SS, Half, f16)      \
    CAST_PAIR(S, SS, BFloat, bf16)   \
    CAST_PAIR(S, SS, long long, i64) \
    CAST_PAIR(S, SS, unsigned char, u8) \
    CAST_PAIR(S, SS, bool, bool)
FOR_ALL(CAST_TO_ALL)

#define COPY_F(T, SUFFIX)                                                                                  \
    extern "C" __global__ void copy_##SUFFIX(usize n, Geometry g, const T* src, T* out) { copy<T>(n, g, src, out); }
FOR_ALL(COPY_F)

// dst[i] = value through dst's strides (fill_, zeros, full).
#define FILL_F(T, SUFFIX)                                                                                  \
    extern "C" __global__ void fill_##SUFFIX(usize n, Geometry g, T* dst, double value) {                  \
        T v = Elem<T>::from_f64(value);                                                                    \
        GRID_STRIDE(i, n) { dst[geo_offset(g, 0, i)] = v; }                                                \
    }
FOR_ALL(FILL_F)
