// Fused scaled-dot-product attention forward (flash-attention style): one thread per query
// row, blocks of ATT_ROWS rows of one (batch, head) problem; keys and values are staged
// through shared memory ATT_KEYS at a time and folded into a running (max, sum, output)
// with the online softmax, so no [Tq, Tk] matrix exists and the extra memory is O(T * d).
// Scores are scaled, masked (causal top-left; boolean or additive masks read through
// strides: problem b = outer * heads + inner starts at m_off + outer * ms_outer + inner *
// ms_inner, then ms_q, ms_k) and dropped out with the Philox stream of the CPU kernel
// (kernels/src/fused/attention/mod.rs: word j % 4 of philox([j / 4, i, b, 0], seed)).
// Rows with no visible key give zeros and lse = -inf. q, k, v, out contiguous.

#define ATT_ROWS 64
#define ATT_KEYS 16
#define ATT_MAX_D 128

template <typename T>
__device__ void attention_forward(const T* q, const T* k, const T* v, T* out, typename Elem<T>::Acc* lse,
                                  usize tq, usize tk, usize d, usize dv, double scale, usize mask_kind,
                                  const void* mask, usize m_off, usize heads, usize ms_outer, usize ms_inner,
                                  usize ms_q, usize ms_k, double p, usize seed) {
    typedef typename Elem<T>::Acc A;
    extern __shared__ unsigned char shared_bytes[];
    A* ks = reinterpret_cast<A*>(shared_bytes);  // [ATT_KEYS][d]
    A* vs = ks + ATT_KEYS * d;                   // [ATT_KEYS][dv]
    const usize b = blockIdx.y;
    const usize i = (usize)blockIdx.x * ATT_ROWS + threadIdx.x;
    const bool active = i < tq;
    const usize mask_base = m_off + (b / heads) * ms_outer + (b % heads) * ms_inner + i * ms_q;
    const A keep_scale = p > 0.0 ? (A)(1.0 / (1.0 - p)) : A(1);
    A qr[ATT_MAX_D];
    A acc[ATT_MAX_D];
    if (active) {
        for (usize c = 0; c < d; ++c) qr[c] = Elem<T>::load(q[(b * tq + i) * d + c]);
    }
    for (usize c = 0; c < dv; ++c) acc[c] = A(0);
    A m = neg_infinity<A>(), l = A(0);
    usize last_row = (usize)blockIdx.x * ATT_ROWS + ATT_ROWS;
    usize limit = mask_kind == 1 ? (last_row < tk ? last_row : tk) : tk;
    for (usize j0 = 0; j0 < limit; j0 += ATT_KEYS) {
        __syncthreads();
        for (usize idx = threadIdx.x; idx < ATT_KEYS * d; idx += blockDim.x) {
            usize jj = idx / d, c = idx % d;
            ks[idx] = j0 + jj < tk ? Elem<T>::load(k[(b * tk + j0 + jj) * d + c]) : A(0);
        }
        for (usize idx = threadIdx.x; idx < ATT_KEYS * dv; idx += blockDim.x) {
            usize jj = idx / dv, c = idx % dv;
            vs[idx] = j0 + jj < tk ? Elem<T>::load(v[(b * tk + j0 + jj) * dv + c]) : A(0);
        }
        __syncthreads();
        if (!active) continue;
        for (usize jj = 0; jj < ATT_KEYS && j0 + jj < tk; ++jj) {
            usize j = j0 + jj;
            if (mask_kind == 1 && j > i) break;
            if (mask_kind == 2 && !reinterpret_cast<const bool*>(mask)[mask_base + j * ms_k]) continue;
            A s = A(0);
            for (usize c = 0; c < d; ++c) s += qr[c] * ks[jj * d + c];
            s *= (A)scale;
            if (mask_kind == 3) s += Elem<T>::load(reinterpret_cast<const T*>(mask)[mask_base + j * ms_k]);
            if (s == neg_infinity<A>()) continue;
            A m_new = s > m ? s : m;
            A corr = d_exp(m - m_new);
            A e = d_exp(s - m_new);
            l = l * corr + e;
            A w = e;
            if (p > 0.0) {
                unsigned int c4[4] = {(unsigned int)(j / 4), (unsigned int)i, (unsigned int)b, 0u};
                philox4x32_10(c4, (unsigned int)seed, (unsigned int)(seed >> 32));
                double u = (double)(c4[j % 4] >> 8) * (1.0 / 16777216.0);
                w = u >= p ? w * keep_scale : A(0);
            }
            for (usize c = 0; c < dv; ++c) acc[c] = acc[c] * corr + w * vs[jj * dv + c];
            m = m_new;
        }
    }
    if (!active) return;
    T* o = out + (b * tq + i) * dv;
    if (l == A(0)) {
        for (usize c = 0; c < dv; ++c) o[c] = Elem<T>::store(A(0));
        lse[b * tq + i] = neg_infinity<A>();
    } else {
        for (usize c = 0; c < dv; ++c) o[c] = Elem<T>::store(acc[c] / l);
        lse[b * tq + i] = m + d_log(l);
    }
}

#define ATTENTION_F(T, S)                                                                                      \
    extern "C" __global__ void attention_forward_##S(                                                          \
        const T* q, const T* k, const T* v, T* out, typename Elem<T>::Acc* lse, usize tq, usize tk, usize d,   \
        usize dv, double scale, usize mask_kind, const void* mask, usize m_off, usize heads, usize ms_outer,    \
        usize ms_inner, usize ms_q, usize ms_k, double p, usize seed) {                                        \
        attention_forward<T>(q, k, v, out, lse, tq, tk, d, dv, scale, mask_kind, mask, m_off, heads, ms_outer, \
                             ms_inner, ms_q, ms_k, p, seed);                                                   \
    }
FOR_FLOATS(ATTENTION_F)
