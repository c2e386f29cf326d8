// Shared by every ferrograd CUDA kernel source. No toolkit headers: NVRTC compiles this
// on machines that have only the driver, so half types are plain 16-bit containers
// converted with PTX `cvt`, and math comes from NVRTC's built-in device functions.

typedef unsigned long long usize;

struct Half { unsigned short bits; };
struct BFloat { unsigned short bits; };

__device__ __forceinline__ float half_to_float(Half h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
}
__device__ __forceinline__ Half float_to_half(float f) {
    Half h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
    return h;
}
__device__ __forceinline__ float bfloat_to_float(BFloat b) {
    return __uint_as_float(((unsigned int)b.bits) << 16);
}
__device__ __forceinline__ BFloat float_to_bfloat(float f) {
    unsigned int u = __float_as_uint(f);
    BFloat b;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        b.bits = (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
        b.bits = (unsigned short)(u >> 16);
    }
    return b;
}

// Storage type -> accumulator type, as the CPU kernels do (f32 for half types, the type
// itself for integers), plus the conversions through f64 that the CPU's casts use
// (`U::from_f64(x.to_f64())`: integers truncate towards zero and saturate, NaN gives 0).
template <typename T> struct Elem;
template <> struct Elem<float> {
    typedef float Acc;
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float store(float x) { return x; }
    static __device__ __forceinline__ double to_f64(float x) { return (double)x; }
    static __device__ __forceinline__ float from_f64(double v) { return (float)v; }
};
template <> struct Elem<double> {
    typedef double Acc;
    static __device__ __forceinline__ double load(double x) { return x; }
    static __device__ __forceinline__ double store(double x) { return x; }
    static __device__ __forceinline__ double to_f64(double x) { return x; }
    static __device__ __forceinline__ double from_f64(double v) { return v; }
};
template <> struct Elem<Half> {
    typedef float Acc;
    static __device__ __forceinline__ float load(Half x) { return half_to_float(x); }
    static __device__ __forceinline__ Half store(float x) { return float_to_half(x); }
    static __device__ __forceinline__ double to_f64(Half x) { return (double)half_to_float(x); }
    static __device__ __forceinline__ Half from_f64(double v) {
        Half h;
        asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h.bits) : "d"(v));  // one rounding, as half::f16::from_f64
        return h;
    }
};
template <> struct Elem<BFloat> {
    typedef float Acc;
    static __device__ __forceinline__ float load(BFloat x) { return bfloat_to_float(x); }
    static __device__ __forceinline__ BFloat store(float x) { return float_to_bfloat(x); }
    static __device__ __forceinline__ double to_f64(BFloat x) { return (double)bfloat_to_float(x); }
    static __device__ __forceinline__ BFloat from_f64(double v) { return float_to_bfloat((float)v); }
};
template <> struct Elem<long long> {
    typedef long long Acc;
    static __device__ __forceinline__ long long load(long long x) { return x; }
    static __device__ __forceinline__ long long store(long long x) { return x; }
    static __device__ __forceinline__ double to_f64(long long x) { return (double)x; }
    static __device__ __forceinline__ long long from_f64(double v) {
        if (v != v) return 0;
        if (v >= 9223372036854775807.0) return 9223372036854775807LL;
        if (v <= -9223372036854775808.0) return (-9223372036854775807LL - 1);
        return (long long)v;
    }
};
template <> struct Elem<unsigned char> {
    typedef unsigned char Acc;
    static __device__ __forceinline__ unsigned char load(unsigned char x) { return x; }
    static __device__ __forceinline__ unsigned char store(unsigned char x) { return x; }
    static __device__ __forceinline__ double to_f64(unsigned char x) { return (double)x; }
    static __device__ __forceinline__ unsigned char from_f64(double v) {
        if (v != v || v <= 0.0) return 0;
        if (v >= 255.0) return 255;
        return (unsigned char)v;
    }
};
template <> struct Elem<bool> {
    typedef bool Acc;
    static __device__ __forceinline__ bool load(bool x) { return x; }
    static __device__ __forceinline__ bool store(bool x) { return x; }
    static __device__ __forceinline__ double to_f64(bool x) { return x ? 1.0 : 0.0; }
    static __device__ __forceinline__ bool from_f64(double v) { return v != 0.0; }
};

// Overloads so templates pick the f32 or f64 device function.
__device__ __forceinline__ float d_exp(float x) { return expf(x); }
__device__ __forceinline__ double d_exp(double x) { return exp(x); }
__device__ __forceinline__ float d_log(float x) { return logf(x); }
__device__ __forceinline__ double d_log(double x) { return log(x); }
__device__ __forceinline__ float d_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double d_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float d_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double d_rsqrt(double x) { return rsqrt(x); }
__device__ __forceinline__ float d_sin(float x) { return sinf(x); }
__device__ __forceinline__ double d_sin(double x) { return sin(x); }
__device__ __forceinline__ float d_cos(float x) { return cosf(x); }
__device__ __forceinline__ double d_cos(double x) { return cos(x); }
__device__ __forceinline__ float d_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double d_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float d_erf(float x) { return erff(x); }
__device__ __forceinline__ double d_erf(double x) { return erf(x); }
__device__ __forceinline__ float d_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double d_abs(double x) { return fabs(x); }
__device__ __forceinline__ float d_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double d_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float d_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double d_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float d_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double d_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float d_atan2(float y, float x) { return atan2f(y, x); }
__device__ __forceinline__ double d_atan2(double y, double x) { return atan2(y, x); }

// -inf without math.h.
template <typename A> __device__ __forceinline__ A neg_infinity();
template <> __device__ __forceinline__ float neg_infinity<float>() { return __int_as_float(0xff800000); }
template <> __device__ __forceinline__ double neg_infinity<double>() { return __longlong_as_double(0xfff0000000000000LL); }

// The index space of an elementwise launch after the host merged contiguous dims: at most
// MAX_DIMS dims, and per operand (up to three) its strides. Passed by value (256 bytes of
// kernel parameters), so a launch needs no device allocation. Bit k of `contiguous` says
// operand k is laid out as the index space itself (element i at i), the fast path.
// When the whole index space is below 2^31 (`narrow`), an index splits into coordinates
// by 32-bit multiplications with the host's `magic` and `shift` per dim instead of 64-bit
// divisions (which the GPU emulates in dozens of instructions): q = (umulhi(i, magic) + i)
// >> shift is i / shape for every i < 2^31.
#define MAX_DIMS 6
struct Geometry {
    usize shape[MAX_DIMS];
    usize strides[3][MAX_DIMS];
    unsigned int rank;
    unsigned int contiguous;
    unsigned int magic[MAX_DIMS];
    unsigned int shift[MAX_DIMS];
    unsigned int narrow;
    unsigned int reserved;
};

// The element offset of the i-th element (row-major) of operand k. The outermost dim
// needs no division: what is left of i after the inner dims is its coordinate.
__device__ __forceinline__ usize geo_offset(const Geometry& g, int k, usize i) {
    if (g.contiguous & (1u << k)) return i;
    usize offset = 0;
    if (g.narrow) {
        unsigned int r = (unsigned int)i;
        for (int d = (int)g.rank - 1; d > 0; --d) {
            unsigned int q = (__umulhi(r, g.magic[d]) + r) >> g.shift[d];
            offset += (usize)(r - q * (unsigned int)g.shape[d]) * g.strides[k][d];
            r = q;
        }
        return offset + (usize)r * g.strides[k][0];
    }
    for (int d = (int)g.rank - 1; d > 0; --d) {
        usize s = g.shape[d];
        offset += (i % s) * g.strides[k][d];
        i /= s;
    }
    return offset + i * g.strides[k][0];
}

#define GRID_STRIDE(i, n) for (usize i = blockIdx.x * (usize)blockDim.x + threadIdx.x; i < (n); i += (usize)blockDim.x * gridDim.x)

// Bounds checking of indices that live on the device (index_select, gather, scatter_add,
// cross-entropy targets): an index must lie in [0, size). A kernel that meets a bad one
// skips that element and records it in the device's report, `report[0]` = this launch's id
// (ids start at 1; the first bad index of any launch wins) and `report[1]` = the value. The
// host reads the report the next time it waits for the device and panics with the op's
// message, as CUDA reports kernel errors asynchronously; nothing reads out of bounds.
struct IndexCheck {
    usize* report;
    usize launch;
    usize size;
};

__device__ __forceinline__ bool index_ok(const IndexCheck& c, long long v) {
    if (v >= 0 && (usize)v < c.size) return true;
    if (atomicCAS(c.report, 0ull, c.launch) == 0ull) c.report[1] = (usize)v;
    return false;
}

// Instantiation lists: F(TYPE, SUFFIX) for each element type of a category.
#define FOR_FLOATS(F) F(float, f32) F(double, f64) F(Half, f16) F(BFloat, bf16)
#define FOR_NUMS(F) FOR_FLOATS(F) F(long long, i64) F(unsigned char, u8)
#define FOR_ALL(F) FOR_NUMS(F) F(bool, bool)

// ---- shared by several modules ----------------------------------------------------------

// Block-wide reductions (rows.cu, layer_norm.cu, cross_entropy.cu).
struct SumRed {
    template <typename A> static __device__ A init() { return A(0); }
    template <typename A> static __device__ A combine(A a, A b) { return a + b; }
};
struct ProdRed {
    template <typename A> static __device__ A init() { return A(1); }
    template <typename A> static __device__ A combine(A a, A b) { return a * b; }
};

// One butterfly step of a warp reduction: lane i gets lane i ^ offset's value (the
// one-byte accumulators of u8 and bool travel as ints).
template <typename A> __device__ A shfl_xor(A v, int offset) { return __shfl_xor_sync(0xffffffffu, v, offset); }
template <> __device__ unsigned char shfl_xor(unsigned char v, int offset) {
    return (unsigned char)__shfl_xor_sync(0xffffffffu, (unsigned int)v, offset);
}
template <> __device__ bool shfl_xor(bool v, int offset) { return __shfl_xor_sync(0xffffffffu, (int)v, offset) != 0; }

// Reduces `value` over the block (blockDim.x a power of two); every thread gets the result.
// Each warp reduces by shuffles, then every thread combines the warps' results from shared
// memory in warp order: two barriers instead of one per halving, and the same order on
// every run (so deterministic mode holds).
template <typename A, typename Red>
__device__ A block_reduce(A value, A* scratch) {
    unsigned int t = threadIdx.x;
    if (blockDim.x < 32) {
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
    for (int offset = 16; offset > 0; offset >>= 1) value = Red::template combine<A>(value, shfl_xor(value, offset));
    unsigned int warps = blockDim.x >> 5;
    if (warps == 1) return value;
    if ((t & 31) == 0) scratch[t >> 5] = value;
    __syncthreads();
    A result = scratch[0];
    for (unsigned int w = 1; w < warps; ++w) result = Red::template combine<A>(result, scratch[w]);
    __syncthreads();
    return result;
}

struct MaxRed {
    // NaN wins, as in PyTorch's max.
    template <typename A> static __device__ A combine(A a, A b) { return (b > a || b != b) ? b : a; }
};

// The geometry of a 2-D convolution, as the CPU's `Conv2dGeometry` (plus the output size).
struct Conv2d {
    usize n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
};

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3") in place on
// the counter `c` with key (k0, k1): the CPU's `cpu::philox4x32_10`, so dropout masks
// (dropout.cu, attention.cu) are the same on every device.
__device__ __forceinline__ void philox4x32_10(unsigned int c[4], unsigned int k0, unsigned int k1) {
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        unsigned int hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        unsigned int hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        unsigned int n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
}
