// Multi-tensor optimizer steps: one launch updates every parameter of a dtype. The host
// uploads a table of `OptSlot`s (addresses, length, the first chunk of the slot in the
// launch's chunk numbering, per-parameter scalars); block b finds its slot by binary
// search over `first_chunk` and updates one chunk of OPT_CHUNK elements of it. The math
// is the CPU's `adam_step`/`sgd_step` (kernels/src/fused/optim/mod.rs), in the accumulator type.

#define OPT_CHUNK 4096

struct OptSlot {
    usize param, grad, s0, s1, s2;  // s0/s1/s2: exp_avg/exp_avg_sq/max_exp_avg_sq, or s0 = momentum buffer
    usize n;
    usize first_chunk;
    usize flags;  // bit 0: max_exp_avg_sq present (AMSGrad); bit 1: first SGD step (buffer = grad)
    double step_size;  // Adam: lr / (1 - beta1^step)
    double bc2_sqrt;   // Adam: sqrt(1 - beta2^step)
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
    const A step_size = (A)s.step_size, bc2 = (A)s.bc2_sqrt;
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

#define OPT_F(T, S)                                                                                      \
    extern "C" __global__ void adam_multi_##S(const OptSlot* slots, unsigned int n_slots, AdamStep h) { \
        adam_multi<T>(slots, n_slots, h);                                                                \
    }                                                                                                    \
    extern "C" __global__ void sgd_multi_##S(const OptSlot* slots, unsigned int n_slots, SgdStep h) {   \
        sgd_multi<T>(slots, n_slots, h);                                                                 \
    }
FOR_FLOATS(OPT_F)
