// Dropout with a counter-based generator.
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): element i
// takes word i % 4 of the block philox((i / 4, 0), seed); its top 24 bits give a uniform
// u in [0, 1), kept when u >= p. The CPU (kernels/src/fused/dropout/mod.rs) computes the same
// bits, so a seed gives the same mask on every device. mask = kept ? scale : 0 (what
// backward multiplies by), y = x * mask, both contiguous.

// philox4x32_10 is in common.cuh (shared with attention.cu).

template <typename T>
__device__ void dropout(usize n, usize seed, double p, double scale, const T* x, T* y, T* mask) {
    typedef typename Elem<T>::Acc A;
    const A kept = (A)scale;
    GRID_STRIDE(block, (n + 3) / 4) {
        unsigned int c[4] = {(unsigned int)block, (unsigned int)(block >> 32), 0u, 0u};
        philox4x32_10(c, (unsigned int)seed, (unsigned int)(seed >> 32));
        for (int q = 0; q < 4; ++q) {
            usize i = block * 4 + q;
            if (i >= n) break;
            double u = (double)(c[q] >> 8) * (1.0 / 16777216.0);
            // The stored (rounded) mask scales y, as backward does and as the CPU kernel.
            T m = Elem<T>::store(u >= p ? kept : A(0));
            mask[i] = m;
            y[i] = Elem<T>::store(Elem<T>::load(x[i]) * Elem<T>::load(m));
        }
    }
}

#define DROPOUT_F(T, SUFFIX)                                                                               \
    extern "C" __global__ void dropout_##SUFFIX(usize n, usize seed, double p, double scale, const T* x,   \
                                                T* y, T* mask) {                                           \
        dropout<T>(n, seed, p, scale, x, y, mask);                                                         \
    }
FOR_FLOATS(DROPOUT_F)
