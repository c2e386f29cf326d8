// Indexing kernels (index_select, gather, scatter_add with atomics) and the im2col pair
// behind conv2d (unfold: input -> kernel-major columns; fold: its adjoint, one thread per
// input pixel so no atomics are needed). Indices are i64 on the device, checked as they are
// read (`index_ok` in common.cuh).

// ---- atomics for every numeric type -------------------------------------------------------

// A 16-bit add through a compare-and-swap on the aligned 32-bit word holding it.
template <typename T>
__device__ void atomic_add_16(T* address, float value) {
    usize addr = (usize)address;
    unsigned int* word = (unsigned int*)(addr & ~(usize)3);
    unsigned int shift = (addr & 2) ? 16 : 0;
    unsigned int old = *word, assumed;
    do {
        assumed = old;
        T current;
        current.bits = (unsigned short)((assumed >> shift) & 0xffffu);
        T sum = Elem<T>::store(Elem<T>::load(current) + value);
        unsigned int updated = (assumed & ~(0xffffu << shift)) | ((unsigned int)sum.bits << shift);
        old = atomicCAS(word, assumed, updated);
    } while (assumed != old);
}

__device__ __forceinline__ void atomic_add(float* a, float v) { atomicAdd(a, v); }
__device__ __forceinline__ void atomic_add(double* a, double v) { atomicAdd(a, v); }
__device__ __forceinline__ void atomic_add(Half* a, float v) { atomic_add_16(a, v); }
__device__ __forceinline__ void atomic_add(BFloat* a, float v) { atomic_add_16(a, v); }
__device__ __forceinline__ void atomic_add(long long* a, long long v) {
    atomicAdd((unsigned long long*)a, (unsigned long long)v);  // two's complement: same bits
}
__device__ void atomic_add(unsigned char* address, unsigned char value) {
    usize addr = (usize)address;
    unsigned int* word = (unsigned int*)(addr & ~(usize)3);
    unsigned int shift = (unsigned int)(addr & 3) * 8;
    unsigned int old = *word, assumed;
    do {
        assumed = old;
        unsigned int byte = ((assumed >> shift) + value) & 0xffu;  // wraps, as u8 addition
        old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (byte << shift));
    } while (assumed != old);
}

// ---- index_select, gather, scatter_add ----------------------------------------------------

// out[o, j, i] = src[o, index[j], i] over contiguous [outer, r, inner] and [outer, m, inner]
// (r is `check.size`); an out-of-range index is reported and gives 0.
template <typename T>
__device__ void index_select(usize outer, usize inner, usize m, const long long* index, IndexCheck check,
                             const T* src, T* out) {
    usize r = check.size;
    GRID_STRIDE(k, outer * m * inner) {
        usize i = k % inner, j = (k / inner) % m, o = k / (inner * m);
        long long t = index[j];
        out[k] = index_ok(check, t) ? src[(o * r + (usize)t) * inner + i] : T();
    }
}

// out[p] = src[p with p[dim] = index[p]]: operand 0 walks src with dim's stride zeroed, and
// the index adds `dim_stride` per step; `index` is contiguous in the index space.
template <typename T>
__device__ void gather(usize n, const Geometry& g, const long long* index, IndexCheck check, usize dim_stride,
                       const T* src, T* out) {
    GRID_STRIDE(i, n) {
        long long t = index[i];
        out[i] = index_ok(check, t) ? src[geo_offset(g, 0, i) + (usize)t * dim_stride] : T();
    }
}

// dst[p with p[dim] = index[p]] += src[p]: operand 0 walks the contiguous dst with dim's
// stride zeroed, operand 1 walks the src view. Atomic, since indices may repeat.
template <typename T>
__device__ void scatter_add(usize n, const Geometry& g, const long long* index, IndexCheck check,
                            usize dim_stride, T* dst, const T* src) {
    GRID_STRIDE(i, n) {
        long long t = index[i];
        if (!index_ok(check, t)) continue;
        atomic_add(dst + geo_offset(g, 0, i) + (usize)t * dim_stride, Elem<T>::load(src[geo_offset(g, 1, i)]));
    }
}

#define INDEX_ALL(T, SUFFIX)                                                                                   \
    extern "C" __global__ void index_select_##SUFFIX(usize outer, usize inner, usize m, const long long* index, \
                                                     IndexCheck check, const T* src, T* out) {                  \
        index_select<T>(outer, inner, m, index, check, src, out);                                              \
    }                                                                                                          \
    extern "C" __global__ void gather_##SUFFIX(usize n, Geometry g, const long long* index, IndexCheck check,   \
                                               usize dim_stride, const T* src, T* out) {                       \
        gather<T>(n, g, index, check, dim_stride, src, out);                                                   \
    }
#define SCATTER_ALL(T, SUFFIX)                                                                                 \
    extern "C" __global__ void scatter_add_##SUFFIX(usize n, Geometry g, const long long* index,               \
                                                    IndexCheck check, usize dim_stride, T* dst, const T* src) { \
        scatter_add<T>(n, g, index, check, dim_stride, dst, src);                                              \
    }
FOR_ALL(INDEX_ALL)
FOR_NUMS(SCATTER_ALL)

// ---- im2col for conv2d --------------------------------------------------------------------


// cols[(c*kh + ki)*kw + kj, (n*oh + oy)*ow + ox] = x[n, c, oy*sh - ph + ki*dh, ox*sw - pw + kj*dw]
// (0 outside the image), over a contiguous [n, c, h, w] input.
template <typename T>
__device__ void unfold2d(Conv2d g, const T* src, T* cols) {
    usize row_len = g.n * g.oh * g.ow;
    GRID_STRIDE(k, g.c * g.kh * g.kw * row_len) {
        usize col = k % row_len, row = k / row_len;
        usize ox = col % g.ow, oy = (col / g.ow) % g.oh, n = col / (g.ow * g.oh);
        usize kj = row % g.kw, ki = (row / g.kw) % g.kh, c = row / (g.kw * g.kh);
        long long y = (long long)(oy * g.sh + ki * g.dh) - (long long)g.ph;
        long long x = (long long)(ox * g.sw + kj * g.dw) - (long long)g.pw;
        bool inside = y >= 0 && y < (long long)g.h && x >= 0 && x < (long long)g.w;
        cols[k] = inside ? src[((n * g.c + c) * g.h + (usize)y) * g.w + (usize)x] : Elem<T>::store(typename Elem<T>::Acc(0));
    }
}

// The adjoint: each input pixel sums the column entries that read it, taps in (ki, kj)
// order as the CPU does.
template <typename T>
__device__ void fold2d(Conv2d g, const T* cols, T* dst) {
    typedef typename Elem<T>::Acc A;
    usize row_len = g.n * g.oh * g.ow;
    GRID_STRIDE(k, g.n * g.c * g.h * g.w) {
        usize x = k % g.w, y = (k / g.w) % g.h, c = (k / (g.w * g.h)) % g.c, n = k / (g.w * g.h * g.c);
        A acc = A(0);
        for (usize ki = 0; ki < g.kh; ++ki) {
            long long ty = (long long)(y + g.ph) - (long long)(ki * g.dh);
            if (ty < 0 || ty % (long long)g.sh != 0) continue;
            usize oy = (usize)(ty / (long long)g.sh);
            if (oy >= g.oh) continue;
            for (usize kj = 0; kj < g.kw; ++kj) {
                long long tx = (long long)(x + g.pw) - (long long)(kj * g.dw);
                if (tx < 0 || tx % (long long)g.sw != 0) continue;
                usize ox = (usize)(tx / (long long)g.sw);
                if (ox >= g.ow) continue;
                usize row = (c * g.kh + ki) * g.kw + kj;
                acc += Elem<T>::load(cols[row * row_len + (n * g.oh + oy) * g.ow + ox]);
            }
        }
        dst[k] = Elem<T>::store(acc);
    }
}

#define CONV_ALL(T, SUFFIX)                                                                                    \
    extern "C" __global__ void unfold2d_##SUFFIX(Conv2d g, const T* src, T* cols) { unfold2d<T>(g, src, cols); } \
    extern "C" __global__ void fold2d_##SUFFIX(Conv2d g, const T* cols, T* dst) { fold2d<T>(g, cols, dst); }
FOR_NUMS(CONV_ALL)
