// 2-D max and average pooling over contiguous [n, c, h, w] planes, windows as conv2d's:
// one thread per output (forward) or per input pixel (backward, no atomics, so it is
// deterministic). Max pooling records PyTorch's in-plane indices.

// The output row (or column) that window tap `k` of input position `y` belongs to, or -1.
__device__ __forceinline__ long long pool_origin(usize y, usize k, usize stride, usize pad, usize dilation,
                                                 usize out) {
    long long t = (long long)(y + pad) - (long long)(k * dilation);
    if (t < 0 || t % (long long)stride != 0) return -1;
    long long o = t / (long long)stride;
    return o < (long long)out ? o : -1;
}

// Max pooling, one thread per output of [n, c, oh, ow]: the element and its flat in-plane
// index, the first maximum or the last NaN (PyTorch's `val > max || isnan(val)`); padding
// never wins (the host keeps padding at most half the window, so a window holds an input).
template <typename T>
__device__ void max_pool2d(Conv2d g, const T* x, T* out, long long* indices) {
    typedef typename Elem<T>::Acc A;
    GRID_STRIDE(k, g.n * g.c * g.oh * g.ow) {
        usize ox = k % g.ow, oy = (k / g.ow) % g.oh, plane = k / (g.ow * g.oh);
        const T* src = x + plane * g.h * g.w;
        A best = neg_infinity<A>();
        long long at = -1;
        for (usize ki = 0; ki < g.kh; ++ki) {
            long long y = (long long)(oy * g.sh + ki * g.dh) - (long long)g.ph;
            if (y < 0 || y >= (long long)g.h) continue;
            for (usize kj = 0; kj < g.kw; ++kj) {
                long long xx = (long long)(ox * g.sw + kj * g.dw) - (long long)g.pw;
                if (xx < 0 || xx >= (long long)g.w) continue;
                long long i = y * (long long)g.w + xx;
                A v = Elem<T>::load(src[i]);
                if (at < 0 || v > best || v != v) {
                    best = v;
                    at = i;
                }
            }
        }
        out[k] = at < 0 ? T() : src[at];
        indices[k] = at;
    }
}

// Average pooling's divisor of output (oy, ox), as PyTorch: mode 0 the window clipped to
// the padded input (count_include_pad), 1 the input elements in it, 2 `fixed`
// (divisor_override).
__device__ __forceinline__ long long avg_divisor(Conv2d g, usize oy, usize ox, unsigned long long mode,
                                                 unsigned long long fixed) {
    if (mode == 2) return (long long)fixed;
    long long hs = (long long)(oy * g.sh) - (long long)g.ph, ws = (long long)(ox * g.sw) - (long long)g.pw;
    long long he = hs + (long long)g.kh, we = ws + (long long)g.kw;
    long long hi = (long long)(g.h + (mode == 0 ? g.ph : 0)), wi = (long long)(g.w + (mode == 0 ? g.pw : 0));
    long long lo_h = mode == 0 ? hs : (hs < 0 ? 0 : hs), lo_w = mode == 0 ? ws : (ws < 0 ? 0 : ws);
    he = he < hi ? he : hi;
    we = we < wi ? we : wi;
    return (he - lo_h) * (we - lo_w);
}

// Average pooling over avg_divisor, one thread per output.
template <typename T>
__device__ void avg_pool2d(Conv2d g, const T* x, T* out, unsigned long long mode, unsigned long long fixed) {
    typedef typename Elem<T>::Acc A;
    GRID_STRIDE(k, g.n * g.c * g.oh * g.ow) {
        usize ox = k % g.ow, oy = (k / g.ow) % g.oh, plane = k / (g.ow * g.oh);
        A count = (A)avg_divisor(g, oy, ox, mode, fixed);
        const T* src = x + plane * g.h * g.w;
        A sum = A(0);
        for (usize ki = 0; ki < g.kh; ++ki) {
            long long y = (long long)(oy * g.sh + ki * g.dh) - (long long)g.ph;
            if (y < 0 || y >= (long long)g.h) continue;
            for (usize kj = 0; kj < g.kw; ++kj) {
                long long xx = (long long)(ox * g.sw + kj * g.dw) - (long long)g.pw;
                if (xx < 0 || xx >= (long long)g.w) continue;
                sum += Elem<T>::load(src[y * (long long)g.w + xx]);
            }
        }
        out[k] = Elem<T>::store(sum / count);
    }
}

// The input gradient of either pooling, one thread per input pixel (no atomics,
// deterministic): the gradients of the outputs whose window covers the pixel, for max
// pooling (`indices` given) only those that chose it, for average pooling each over its
// divisor.
template <typename T>
__device__ void pool2d_backward(Conv2d g, const T* grad, const long long* indices, T* dx, unsigned long long mode,
                                unsigned long long fixed) {
    typedef typename Elem<T>::Acc A;
    GRID_STRIDE(k, g.n * g.c * g.h * g.w) {
        usize x = k % g.w, y = (k / g.w) % g.h, plane = k / (g.w * g.h);
        long long self = (long long)(y * g.w + x);
        usize base = plane * g.oh * g.ow;
        A acc = A(0);
        for (usize ki = 0; ki < g.kh; ++ki) {
            long long oy = pool_origin(y, ki, g.sh, g.ph, g.dh, g.oh);
            if (oy < 0) continue;
            for (usize kj = 0; kj < g.kw; ++kj) {
                long long ox = pool_origin(x, kj, g.sw, g.pw, g.dw, g.ow);
                if (ox < 0) continue;
                usize o = base + (usize)oy * g.ow + (usize)ox;
                if (indices) {
                    if (indices[o] == self) acc += Elem<T>::load(grad[o]);
                } else {
                    acc += Elem<T>::load(grad[o]) / (A)avg_divisor(g, (usize)oy, (usize)ox, mode, fixed);
                }
            }
        }
        dx[k] = Elem<T>::store(acc);
    }
}

#define POOL_F(T, SUFFIX)                                                                                      \
    extern "C" __global__ void max_pool2d_##SUFFIX(Conv2d g, const T* x, T* out, long long* indices) {         \
        max_pool2d<T>(g, x, out, indices);                                                                     \
    }                                                                                                          \
    extern "C" __global__ void max_pool2d_backward_##SUFFIX(Conv2d g, const T* grad, const long long* indices,  \
                                                            T* dx) {                                           \
        pool2d_backward<T>(g, grad, indices, dx, 0, 0);                                                        \
    }                                                                                                          \
    extern "C" __global__ void avg_pool2d_##SUFFIX(Conv2d g, const T* x, T* out, unsigned long long mode,      \
                                                   unsigned long long fixed) {                                 \
        avg_pool2d<T>(g, x, out, mode, fixed);                                                                 \
    }                                                                                                          \
    extern "C" __global__ void avg_pool2d_backward_##SUFFIX(Conv2d g, const T* grad, T* dx,                    \
                                                            unsigned long long mode, unsigned long long fixed) { \
        pool2d_backward<T>(g, grad, nullptr, dx, mode, fixed);                                                 \
    }
FOR_FLOATS(POOL_F)
