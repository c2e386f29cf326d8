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

// Storage type -> accumulator type, as the CPU kernels do (f32 for half types).
template <typename T> struct Elem;
template <> struct Elem<float> {
    typedef float Acc;
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float store(float x) { return x; }
};
template <> struct Elem<double> {
    typedef double Acc;
    static __device__ __forceinline__ double load(double x) { return x; }
    static __device__ __forceinline__ double store(double x) { return x; }
};
template <> struct Elem<Half> {
    typedef float Acc;
    static __device__ __forceinline__ float load(Half x) { return half_to_float(x); }
    static __device__ __forceinline__ Half store(float x) { return float_to_half(x); }
};
template <> struct Elem<BFloat> {
    typedef float Acc;
    static __device__ __forceinline__ float load(BFloat x) { return bfloat_to_float(x); }
    static __device__ __forceinline__ BFloat store(float x) { return float_to_bfloat(x); }
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

// -inf without math.h.
template <typename A> __device__ __forceinline__ A neg_infinity();
template <> __device__ __forceinline__ float neg_infinity<float>() { return __int_as_float(0xff800000); }
template <> __device__ __forceinline__ double neg_infinity<double>() { return __longlong_as_double(0xfff0000000000000LL); }

// The storage offset of the i-th element (row-major) of a strided view.
__device__ __forceinline__ usize strided_offset(usize i, unsigned int rank, const usize* shape, const usize* strides) {
    usize offset = 0;
    for (int d = (int)rank - 1; d >= 0; --d) {
        offset += (i % shape[d]) * strides[d];
        i /= shape[d];
    }
    return offset;
}
