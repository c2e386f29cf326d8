// Multi-tensor optimizer steps: one launch updates every parameter of a dtype. The host
// uploads a table of `OptSlot`s (addresses, length, the first chunk of the slot in the
// launch's chunk numbering, per-parameter scalars); block b finds its slot by binary
// search over `first_chunk` and updates one chunk of OPT_CHUNK elements of it. The math
// is the CPU's `adam_step`/`sgd_step`/... (kernels/src/fused/optim/), in the accumulator type;
// states are stored in the parameter's dtype and read back (`rnd`), as on the CPU.

#define OPT_CHUNK 4096

struct OptSlot {
    usize param, grad, s0, s1, s2;  // s0/s1/s2: exp_avg/exp_avg_sq/max_exp_avg_sq, or s0 = momentum buffer
    usize n;
    usize first_chunk;
    usize flags;  // bit 0: max_exp_avg_sq present (AMSGrad); bit 1: first SGD step (buffer = grad)
    // This parameter's step-dependent scalars (each parameter counts its own steps):
    // Adam: step_size, sqrt(bias_correction2); Adagrad/Adamax: clr; NAdam:
    // bias_correction2, grad_coef, avg_coef; RAdam: bias_correction1,
    // sqrt(bias_correction2), rect, rectified (0 or 1).
    double sc[4];
};

// AdamStep and SgdStep (the hyper-parameters) are declared before this source from their
// Rust definitions (kernels/src/fused/optim/mod.rs, `hyper_params!`).

// The last slot whose first chunk is at or before `chunk`.
__device__ __forceinline__ const OptSlot& find_slot(const OptSlot* slots, unsigned int n_slots, usize chunk) {
    unsigned int lo = 0, hi = n_slots - 1;
    while (lo < hi) {
        unsigned int mid = (lo + hi + 1) / 2;
        if (slots[mid].first_chunk <= chunk) lo = mid; else hi = mid - 1;
    }
    return slots[lo];
}

template <typename T>
__device__ void adam_multi(const OptSlot* slots, unsigned int n_slots, AdamStep h) {
    typedef typename Elem<T>::Acc A;
    const OptSlot& s = find_slot(slots, n_slots, blockIdx.x);
    usize start = (blockIdx.x - s.first_chunk) * OPT_CHUNK;
    usize end = start + OPT_CHUNK < s.n ? start + OPT_CHUNK : s.n;
    T* p = reinterpret_cast<T*>(s.param);
    const T* g = reinterpret_cast<const T*>(s.grad);
    T* m = reinterpret_cast<T*>(s.s0);
    T* v = reinterpret_cast<T*>(s.s1);
    T* vmax = (s.flags & 1u) ? reinterpret_cast<T*>(s.s2) : 0;
    const A lr = (A)h.lr, b2 = (A)h.beta2, eps = (A)h.eps, wd = (A)h.weight_decay;
    const A one_b1 = (A)(1.0 - h.beta1), one_b2 = (A)(1.0 - h.beta2);
    const A step_size = (A)s.sc[0], bc2 = (A)s.sc[1];
    const bool decay = h.decoupled && h.weight_decay != 0.0, l2 = !h.decoupled && h.weight_decay != 0.0;
    const A decay_factor = A(1) - lr * wd;
    for (usize i = start + threadIdx.x; i < end; i += blockDim.x) {
        A pi = Elem<T>::load(p[i]);
        A gi = Elem<T>::load(g[i]);
        if (h.maximize) gi = -gi;
        if (l2) gi = gi + wd * pi;
        if (decay) pi = pi * decay_factor;
        A mi = Elem<T>::load(m[i]);
        mi = mi + one_b1 * (gi - mi);
        A vi = Elem<T>::load(v[i]) * b2 + one_b2 * gi * gi;
        m[i] = Elem<T>::store(mi);
        v[i] = Elem<T>::store(vi);
        mi = Elem<T>::load(m[i]);
        vi = Elem<T>::load(v[i]);
        A second = vi;
        if (vmax) {
            A top = Elem<T>::load(vmax[i]);
            top = vi > top ? vi : top;
            vmax[i] = Elem<T>::store(top);
            second = top;
        }
        A denom = d_sqrt(second) / bc2 + eps;
        p[i] = Elem<T>::store(pi - step_size * (mi / denom));
    }
}

template <typename T>
__device__ void sgd_multi(const OptSlot* slots, unsigned int n_slots, SgdStep h) {
    typedef typename Elem<T>::Acc A;
    const OptSlot& s = find_slot(slots, n_slots, blockIdx.x);
    usize start = (blockIdx.x - s.first_chunk) * OPT_CHUNK;
    usize end = start + OPT_CHUNK < s.n ? start + OPT_CHUNK : s.n;
    T* p = reinterpret_cast<T*>(s.param);
    const T* g = reinterpret_cast<const T*>(s.grad);
    T* buf = reinterpret_cast<T*>(s.s0);
    const bool first = (s.flags & 2u) != 0;
    const A lr = (A)h.lr, mom = (A)h.momentum, damp = (A)(1.0 - h.dampening), wd = (A)h.weight_decay;
    for (usize i = start + threadIdx.x; i < end; i += blockDim.x) {
        A pi = Elem<T>::load(p[i]);
        A gi = Elem<T>::load(g[i]);
        if (h.maximize) gi = -gi;
        if (h.weight_decay != 0.0) gi = gi + wd * pi;
        if (buf) {
            A bi = first ? gi : Elem<T>::load(buf[i]) * mom + damp * gi;
            buf[i] = Elem<T>::store(bi);
            bi = Elem<T>::load(buf[i]);
            gi = h.nesterov ? gi + mom * bi : bi;
        }
        p[i] = Elem<T>::store(pi - lr * gi);
    }
}


// A state value rounded through the parameter's dtype (a store and reload).
template <typename T>
__device__ __forceinline__ typename Elem<T>::Acc rnd(typename Elem<T>::Acc x) {
    return Elem<T>::load(Elem<T>::store(x));
}

// The slot of this block and the element range [start, end) of its chunk.
#define OPT_PROLOGUE                                                          \
    typedef typename Elem<T>::Acc A;                                          \
    const OptSlot& s = find_slot(slots, n_slots, blockIdx.x);                 \
    usize start = (blockIdx.x - s.first_chunk) * OPT_CHUNK;                   \
    usize end = start + OPT_CHUNK < s.n ? start + OPT_CHUNK : s.n;            \
    T* p = reinterpret_cast<T*>(s.param);                                     \
    const T* g = reinterpret_cast<const T*>(s.grad);                          \
    T* s0 = reinterpret_cast<T*>(s.s0);                                       \
    T* s1 = reinterpret_cast<T*>(s.s1);                                       \
    T* s2 = reinterpret_cast<T*>(s.s2);

template <typename T>
__device__ __forceinline__ typename Elem<T>::Acc eff_grad(const T* g, usize i, typename Elem<T>::Acc pi,
                                                          bool maximize, double wd) {
    typedef typename Elem<T>::Acc A;
    A gi = Elem<T>::load(g[i]);
    if (maximize) gi = -gi;
    if (wd != 0.0) gi = gi + (A)wd * pi;
    return gi;
}

// s0 = square_avg, s1 = momentum buffer (or 0), s2 = grad_avg (or 0).
template <typename T>
__device__ void rmsprop_multi(const OptSlot* slots, unsigned int n_slots, RmspropStep h) {
    OPT_PROLOGUE
    const A lr = (A)h.lr, alpha = (A)h.alpha, one_alpha = (A)(1.0 - h.alpha), eps = (A)h.eps, mom = (A)h.momentum;
    for (usize i = start + threadIdx.x; i < end; i += blockDim.x) {
        A pi = Elem<T>::load(p[i]);
        A gi = eff_grad<T>(g, i, pi, h.maximize, h.weight_decay);
        A sq = rnd<T>(Elem<T>::load(s0[i]) * alpha + one_alpha * gi * gi);
        s0[i] = Elem<T>::store(sq);
        A avg;
        if (s2) {
            A a = Elem<T>::load(s2[i]);
            a = rnd<T>(a + one_alpha * (gi - a));
            s2[i] = Elem<T>::store(a);
            A var = sq - a * a;  // floored at 0 as on the CPU (half-precision underflow)
            avg = d_sqrt(var > A(0) ? var : A(0));
        } else {
            avg = d_sqrt(sq);
        }
        avg = avg + eps;
        if (s1) {
            A b = rnd<T>(Elem<T>::load(s1[i]) * mom + gi / avg);
            s1[i] = Elem<T>::store(b);
            p[i] = Elem<T>::store(pi - lr * b);
        } else {
            p[i] = Elem<T>::store(pi - lr * (gi / avg));
        }
    }
}

// s0 = sum; sc[0] = clr.
template <typename T>
__device__ void adagrad_multi(const OptSlot* slots, unsigned int n_slots, AdagradStep h) {
    OPT_PROLOGUE
    const A clr = (A)s.sc[0], eps = (A)h.eps;
    for (usize i = start + threadIdx.x; i < end; i += blockDim.x) {
        A pi = Elem<T>::load(p[i]);
        A gi = eff_grad<T>(g, i, pi, h.maximize, h.weight_decay);
        A sum = rnd<T>(Elem<T>::load(s0[i]) + gi * gi);
        s0[i] = Elem<T>::store(sum);
        p[i] = Elem<T>::store(pi - clr * (gi / (d_sqrt(sum) + eps)));
    }
}

// s0 = square_avg, s1 = acc_delta.
template <typename T>
__device__ void adadelta_multi(const OptSlot* slots, unsigned int n_slots, AdadeltaStep h) {
    OPT_PROLOGUE
    const A lr = (A)h.lr, rho = (A)h.rho, one_rho = (A)(1.0 - h.rho), eps = (A)h.eps;
    for (usize i = start + threadIdx.x; i < end; i += blockDim.x) {
        A pi = Elem<T>::load(p[i]);
        A gi = eff_grad<T>(g, i, pi, h.maximize, h.weight_decay);
        A sq = rnd<T>(Elem<T>::load(s0[i]) * rho + one_rho * gi * gi);
        s0[i] = Elem<T>::store(sq);
        A ad = Elem<T>::load(s1[i]);
        A delta = rnd<T>(d_sqrt(ad + eps) / d_sqrt(sq + eps) * gi);
        s1[i] = Elem<T>::store(ad * rho + one_rho * delta * delta);
        p[i] = Elem<T>::store(pi - lr * delta);
    }
}

// s0 = exp_avg, s1 = exp_inf; sc[0] = clr.
template <typename T>
__device__ void adamax_multi(const OptSlot* slots, unsigned int n_slots, AdamaxStep h) {
    OPT_PROLOGUE
    const A clr = (A)s.sc[0], one_b1 = (A)(1.0 - h.beta1), b2 = (A)h.beta2, eps = (A)h.eps;
    for (usize i = start + threadIdx.x; i < end; i += blockDim.x) {
        A pi = Elem<T>::load(p[i]);
        A gi = eff_grad<T>(g, i, pi, h.maximize, h.weight_decay);
        A m = Elem<T>::load(s0[i]);
        m = rnd<T>(m + one_b1 * (gi - m));
        s0[i] = Elem<T>::store(m);
        A decayed = rnd<T>(Elem<T>::load(s1[i]) * b2);
        A mag = (gi < A(0) ? -gi : gi) + eps;
        A u = rnd<T>(decayed > mag ? decayed : mag);
        s1[i] = Elem<T>::store(u);
        p[i] = Elem<T>::store(pi - clr * (m / u));
    }
}

// s0 = exp_avg, s1 = exp_avg_sq; sc = bias_correction2, grad_coef, avg_coef.
template <typename T>
__device__ void nadam_multi(const OptSlot* slots, unsigned int n_slots, NadamStep h) {
    OPT_PROLOGUE
    const A one_b1 = (A)(1.0 - h.beta1), b2 = (A)h.beta2, one_b2 = (A)(1.0 - h.beta2), eps = (A)h.eps;
    const A bc2 = (A)s.sc[0], cg = (A)s.sc[1], cm = (A)s.sc[2];
    const bool decay = h.decoupled && h.weight_decay != 0.0;
    const A decay_factor = A(1) - (A)h.lr * (A)h.weight_decay;
    const double l2 = h.decoupled ? 0.0 : h.weight_decay;
    for (usize i = start + threadIdx.x; i < end; i += blockDim.x) {
        A pi = Elem<T>::load(p[i]);
        if (decay) pi = rnd<T>(pi * decay_factor);
        A gi = eff_grad<T>(g, i, pi, h.maximize, l2);
        A m = Elem<T>::load(s0[i]);
        m = rnd<T>(m + one_b1 * (gi - m));
        s0[i] = Elem<T>::store(m);
        A v = rnd<T>(Elem<T>::load(s1[i]) * b2 + one_b2 * gi * gi);
        s1[i] = Elem<T>::store(v);
        A denom = d_sqrt(v / bc2) + eps;
        pi = rnd<T>(pi + cg * (gi / denom));
        p[i] = Elem<T>::store(pi + cm * (m / denom));
    }
}

// s0 = exp_avg, s1 = exp_avg_sq; sc = bias_correction1, sqrt(bias_correction2), rect, rectified.
template <typename T>
__device__ void radam_multi(const OptSlot* slots, unsigned int n_slots, RadamStep h) {
    OPT_PROLOGUE
    const A lr = (A)h.lr, one_b1 = (A)(1.0 - h.beta1), b2 = (A)h.beta2, one_b2 = (A)(1.0 - h.beta2), eps = (A)h.eps;
    const A bc1 = (A)s.sc[0], bc2 = (A)s.sc[1], rect = (A)s.sc[2];
    const bool rectified = s.sc[3] != 0.0;
    const bool decay = h.decoupled && h.weight_decay != 0.0;
    const A decay_factor = A(1) - lr * (A)h.weight_decay;
    const double l2 = h.decoupled ? 0.0 : h.weight_decay;
    for (usize i = start + threadIdx.x; i < end; i += blockDim.x) {
        A pi = Elem<T>::load(p[i]);
        if (decay) pi = rnd<T>(pi * decay_factor);
        A gi = eff_grad<T>(g, i, pi, h.maximize, l2);
        A m = Elem<T>::load(s0[i]);
        m = rnd<T>(m + one_b1 * (gi - m));
        s0[i] = Elem<T>::store(m);
        A v = rnd<T>(Elem<T>::load(s1[i]) * b2 + one_b2 * gi * gi);
        s1[i] = Elem<T>::store(v);
        A corrected = m / bc1;
        A update = rectified ? corrected * lr * (bc2 / (d_sqrt(v) + eps)) * rect : corrected * lr;
        p[i] = Elem<T>::store(pi - update);
    }
}

#define OPT_KERNEL(T, S, NAME, H)                                                                 \
    extern "C" __global__ void NAME##_multi_##S(const OptSlot* slots, unsigned int n_slots, H h) { \
        NAME##_multi<T>(slots, n_slots, h);                                                          \
    }
#define OPT_F(T, S)                                                                                      \
    extern "C" __global__ void adam_multi_##S(const OptSlot* slots, unsigned int n_slots, AdamStep h) { \
        adam_multi<T>(slots, n_slots, h);                                                                \
    }                                                                                                    \
    extern "C" __global__ void sgd_multi_##S(const OptSlot* slots, unsigned int n_slots, SgdStep h) {   \
        sgd_multi<T>(slots, n_slots, h);                                                                 \
    }                                                                                                    \
    OPT_KERNEL(T, S, rmsprop, RmspropStep)                                                               \
    OPT_KERNEL(T, S, adagrad, AdagradStep)                                                               \
    OPT_KERNEL(T, S, adadelta, AdadeltaStep)                                                             \
    OPT_KERNEL(T, S, adamax, AdamaxStep)                                                                 \
    OPT_KERNEL(T, S, nadam, NadamStep)                                                                   \
    OPT_KERNEL(T, S, radam, RadamStep)
FOR_FLOATS(OPT_F)
