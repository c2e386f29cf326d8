//! f32 products against a right operand packed once and used many times: an RNN's
//! recurrent weight, multiplied by every step's few rows of state. The `gemm` crate packs
//! its operands again on every call, and at a step's shape (`[32, 256] @ [256, 1024]`)
//! that packing and its blocking cost as much as the multiply-adds; here the weight is
//! laid out once per sequence in column panels as wide as the microkernel, each thread
//! keeps its own panels in its L2 across the steps, and the left operand's rows are
//! broadcast straight from where they lie.
//!
//! The microkernel holds an `MR x NR` block of the destination in vector registers
//! (AVX-512: 8 rows by 32 columns in 16 `zmm`; AVX2+FMA: 6 by 16 in 12 `ymm`) and runs
//! the whole contracted length with one vector load per 16 (8) columns and one broadcast
//! per row, so it is bound by the FMA ports, not by loads.

use super::pool::HostBuffer;
use super::run_tasks;

/// The instruction sets with a microkernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    /// AVX-512F: `8 x 32` register blocks.
    Avx512,
    /// AVX2 with FMA: `6 x 16` register blocks.
    Avx2,
}

impl Isa {
    /// The best microkernel this CPU runs, if any.
    fn detect() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Some(Isa::Avx512);
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Some(Isa::Avx2);
            }
        }
        None
    }

    /// Columns per panel.
    fn nr(self) -> usize {
        match self {
            Isa::Avx512 => 32,
            Isa::Avx2 => 16,
        }
    }

    /// Rows per register block.
    fn mr(self) -> usize {
        match self {
            Isa::Avx512 => 8,
            Isa::Avx2 => 6,
        }
    }
}

/// A `[k, n]` f32 matrix laid out for [`PackedRhs::matmul_into`]: column panels of the
/// microkernel's width, each `[k, NR]` row-major, the last one zero-padded.
///
/// ```
/// use ferrograd_kernels::cpu::PackedRhs;
/// // b = [[1, 2], [3, 4]] (k = 2, n = 2), row-major.
/// if let Some(b) = PackedRhs::pack(&[1.0, 2.0, 3.0, 4.0], (2, 2), (2, 1)) {
///     let mut dst = [0.0f32; 2];
///     b.matmul_into(&mut dst, 1, &[1.0, 1.0], 2, false, 1);
///     assert_eq!(dst, [4.0, 6.0]);
/// }
/// ```
pub struct PackedRhs {
    isa: Isa,
    k: usize,
    n: usize,
    panels: HostBuffer<f32>,
}

impl std::fmt::Debug for PackedRhs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedRhs")
            .field("isa", &self.isa)
            .field("k", &self.k)
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

impl PackedRhs {
    /// Packs the `[k, n]` matrix whose element `(r, c)` is `b[r * rs + c * cs]` (any
    /// layout: a transposed weight is `(1, k)`). `None` on a CPU without AVX2+FMA or
    /// AVX-512, where the caller multiplies some other way.
    ///
    /// # Panics
    /// When an element lies outside `b`.
    pub fn pack(b: &[f32], shape: (usize, usize), strides: (usize, usize)) -> Option<Self> {
        Some(Self::pack_for(Isa::detect()?, b, shape, strides))
    }

    /// [`PackedRhs::pack`] for the microkernel of `isa`.
    fn pack_for(isa: Isa, b: &[f32], (k, n): (usize, usize), (rs, cs): (usize, usize)) -> Self {
        if k > 0 && n > 0 {
            assert!(
                (k - 1) * rs + (n - 1) * cs < b.len(),
                "PackedRhs::pack: a [{k}, {n}] matrix with strides ({rs}, {cs}) reaches past {} elements",
                b.len()
            );
        }
        let nr = isa.nr();
        let count = n.div_ceil(nr);
        let mut panels = HostBuffer::<f32>::new_uninit(count * k * nr);
        let panel_len = k * nr;
        if panel_len > 0 {
            super::for_each_chunk_mut(&mut panels, panel_len, |p, panel| {
                pack_panel(b, (k, n), (rs, cs), nr, p, panel)
            });
        }
        // SAFETY: every panel's `k * nr` slots were written above (zeros past column
        // `n`), and the panels cover the buffer.
        let panels = unsafe { panels.assume_init() };
        PackedRhs { isa, k, n, panels }
    }

    /// `(k, n)`: the packed matrix's shape.
    pub fn shape(&self) -> (usize, usize) {
        (self.k, self.n)
    }

    /// `dst (+)= a @ self` for row-major `dst` `[m, n]` and `a` `[m, k]` with row stride
    /// `a_rs` (columns contiguous); adds to `dst` when `accumulate`. Runs on up to
    /// `threads` threads of the kernels' team, each over its own column panels.
    ///
    /// # Panics
    /// When `dst` or `a` is too short for the shapes.
    pub fn matmul_into(
        &self,
        dst: &mut [f32],
        m: usize,
        a: &[f32],
        a_rs: usize,
        accumulate: bool,
        threads: usize,
    ) {
        self.matmul_into_strided(dst, m, a, (a_rs, 1), accumulate, threads);
    }

    /// [`PackedRhs::matmul_into`] with `a`'s element `(r, q)` at `r * a_rs + q * a_cs`
    /// (a transposed `a` is `(1, m)`-like: read down its columns, never copied).
    ///
    /// # Panics
    /// When `dst` or `a` is too short for the shapes.
    pub(crate) fn matmul_into_strided(
        &self,
        dst: &mut [f32],
        m: usize,
        a: &[f32],
        (a_rs, a_cs): (usize, usize),
        accumulate: bool,
        threads: usize,
    ) {
        let (k, n) = (self.k, self.n);
        if m == 0 || n == 0 {
            return;
        }
        let a_len = if k == 0 {
            0
        } else {
            (m - 1) * a_rs + (k - 1) * a_cs + 1
        };
        assert!(
            dst.len() >= m * n && a_len <= a.len(),
            "PackedRhs::matmul_into: [{m}, {k}] @ [{k}, {n}] needs {} destination and {a_len} operand elements, got {} and {}",
            m * n,
            dst.len(),
            a.len()
        );
        if k == 0 {
            if !accumulate {
                dst[..m * n].iter_mut().for_each(|v| *v = 0.0);
            }
            return;
        }
        let nr = self.isa.nr();
        let count = n.div_ceil(nr);
        let blocks = threads.clamp(1, count);
        let per = count.div_ceil(blocks);
        let blocks = count.div_ceil(per);
        let out = SendPtr(dst.as_mut_ptr());
        run_tasks(blocks, |t| {
            let panels = t * per..((t + 1) * per).min(count);
            for p in panels {
                let panel = &self.panels[p * k * nr..(p + 1) * k * nr];
                // SAFETY: task `t` writes only columns `p * nr .. p * nr + cols` of its
                // own panels `p`, every row, all inside `dst`'s `m * n` elements (checked
                // above); no other task writes them and nothing reads `dst` meanwhile.
                // `self.isa` was detected on this CPU.
                unsafe {
                    panel_rows(
                        self.isa,
                        (m, k, n, nr.min(n - p * nr)),
                        (a, (a_rs, a_cs)),
                        panel,
                        out.get().add(p * nr),
                        accumulate,
                    );
                }
            }
        });
    }
}

/// Writes column panel `p` (`nr` wide, zero-padded past column `n`) of the `[k, n]`
/// matrix whose element `(r, c)` is `b[r * rs + c * cs]` into `panel` (`k * nr` slots,
/// row-major).
///
/// # Panics
/// When an element lies outside `b` or `panel` is shorter than `k * nr`.
fn pack_panel(
    b: &[f32],
    (k, n): (usize, usize),
    (rs, cs): (usize, usize),
    nr: usize,
    p: usize,
    panel: &mut [std::mem::MaybeUninit<f32>],
) {
    let cols = nr.min(n - p * nr);
    if cs == 1 {
        for (r, row) in panel[..k * nr].chunks_exact_mut(nr).enumerate() {
            let src = &b[r * rs + p * nr..][..cols];
            let (head, tail) = row.split_at_mut(cols);
            for (d, s) in head.iter_mut().zip(src) {
                d.write(*s);
            }
            for d in tail {
                d.write(0.0);
            }
        }
        return;
    }
    // A transposed matrix (`rs == 1`: each column of the panel lies contiguous in `b`):
    // 8 x 8 blocks turned in registers.
    let (rows8, cols8) = if cfg!(target_arch = "x86_64") && rs == 1 {
        (k / 8 * 8, cols / 8 * 8)
    } else {
        (0, 0)
    };
    if rows8 > 0 && cols8 > 0 {
        assert!(
            (p * nr + cols8 - 1) * cs + rows8 - 1 < b.len() && panel.len() >= k * nr,
            "pack_panel: the blocks reach outside the matrix or the panel"
        );
    }
    #[cfg(target_arch = "x86_64")]
    for r0 in (0..rows8).step_by(8) {
        for j0 in (0..cols8).step_by(8) {
            // SAFETY: the block reads `b[(p * nr + j0 + j) * cs + r0 + r]` for `j, r < 8`,
            // inside `b` (checked above: `r0 + 8 <= rows8`, `j0 + 8 <= cols8`), and writes
            // panel rows `r0..r0 + 8`, columns `j0..j0 + 8 <= nr`, inside `panel`; AVX
            // comes with either ISA.
            unsafe {
                transpose8(
                    b.as_ptr().add((p * nr + j0) * cs + r0),
                    cs,
                    panel.as_mut_ptr().add(r0 * nr + j0).cast::<f32>(),
                    nr,
                );
            }
        }
    }
    // The rest column by column: reads along `b`'s rows.
    for j in 0..nr {
        let base = (p * nr + j) * cs;
        let from = if j < cols8 { rows8 } else { 0 };
        for r in from..k {
            let v = if j < cols { b[base + r * rs] } else { 0.0 };
            panel[r * nr + j].write(v);
        }
    }
}

/// Writes the transpose of the 8 x 8 block whose column `j` is the 8 contiguous floats
/// at `src + j * src_stride` into 8 rows of 8 at `dst`, `dst_stride` apart.
///
/// # Safety
/// Every address named must be valid (reads, writes), and the CPU must support AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose8(src: *const f32, src_stride: usize, dst: *mut f32, dst_stride: usize) {
    use std::arch::x86_64::*;
    // SAFETY: as the caller promised.
    unsafe {
        let c: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(src.add(j * src_stride)));
        let t0 = _mm256_unpacklo_ps(c[0], c[1]);
        let t1 = _mm256_unpackhi_ps(c[0], c[1]);
        let t2 = _mm256_unpacklo_ps(c[2], c[3]);
        let t3 = _mm256_unpackhi_ps(c[2], c[3]);
        let t4 = _mm256_unpacklo_ps(c[4], c[5]);
        let t5 = _mm256_unpackhi_ps(c[4], c[5]);
        let t6 = _mm256_unpacklo_ps(c[6], c[7]);
        let t7 = _mm256_unpackhi_ps(c[6], c[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        let rows = [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ];
        for (r, v) in rows.into_iter().enumerate() {
            _mm256_storeu_ps(dst.add(r * dst_stride), v);
        }
    }
}

/// `s` as f32 elements when `T` is `f32` (generic kernels take the packed path with it).
pub(crate) fn as_f32<T: 'static>(s: &[T]) -> Option<&[f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()).then(|| {
        // SAFETY: `T` is `f32` (same type id), so this is the same slice.
        unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) }
    })
}

/// [`as_f32`] for a mutable slice.
pub(crate) fn as_f32_mut<T: 'static>(s: &mut [T]) -> Option<&mut [f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()).then(|| {
        // SAFETY: `T` is `f32` (same type id), so this is the same slice, still borrowed
        // mutably once.
        unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<f32>(), s.len()) }
    })
}

/// [`as_f32`] for a mutable slice of possibly-uninitialised values.
pub(crate) fn as_f32_uninit<T: 'static>(
    s: &mut [std::mem::MaybeUninit<T>],
) -> Option<&mut [std::mem::MaybeUninit<f32>]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()).then(|| {
        // SAFETY: `T` is `f32` (same type id), so `MaybeUninit<T>` is `MaybeUninit<f32>`
        // and this is the same slice, still borrowed mutably once.
        unsafe {
            std::slice::from_raw_parts_mut(
                s.as_mut_ptr().cast::<std::mem::MaybeUninit<f32>>(),
                s.len(),
            )
        }
    })
}

thread_local! {
    /// One column panel of a small product's right operand, per thread
    /// ([`small_products`]): packed, used, and overwritten by the next.
    static PANEL: std::cell::RefCell<Vec<std::mem::MaybeUninit<f32>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A batch of small f32 products, `out[b] = lhs[b] @ rhs[b]` (`[m, k] @ [k, n]`, each
/// result row-major `[m, n]` in turn in `out`), the batch spread over the kernels' team
/// and each product on one thread through the microkernel: attention's per-head
/// products (`[T, d] @ [d, T]` and back, for every batch and head), where the `gemm`
/// crate's packing and blocking per call cost as much as the multiply-adds. The left
/// operands are read where they lie, through their strides, so one of the two must be 1
/// (a transposed left operand is read down its columns); each right operand is packed a
/// panel at a time into a per-thread buffer that stays in L1. Matrix `b` of an operand
/// starts at its `offs[b]`. Returns `false`, having written nothing, when this CPU has no
/// microkernel or the left operand has no unit stride.
///
/// # Panics
/// When a matrix reaches outside its operand, or `out` is shorter than the batch.
#[allow(clippy::type_complexity)]
pub(crate) fn small_products(
    out: &mut [std::mem::MaybeUninit<f32>],
    lhs: (&[f32], &[usize], (usize, usize)),
    rhs: (&[f32], &[usize], (usize, usize)),
    (m, k, n): (usize, usize, usize),
) -> bool {
    match Isa::detect() {
        Some(isa) => small_products_on(isa, out, lhs, rhs, (m, k, n)),
        None => false,
    }
}

/// One small f32 product `dst (+)= a @ b` (`[m, k] @ [k, n]`, row-major `dst`; adds when
/// `accumulate`) on this thread through the microkernel: `a` read through its (row,
/// column) strides, one of which must be 1; `b` packed a panel at a time into this
/// thread's buffer. `None` when this CPU has no microkernel or `a` has no unit stride
/// (nothing written).
///
/// # Panics
/// When a matrix reaches outside its slice.
pub(crate) fn small_product(
    dst: &mut [f32],
    (m, k, n): (usize, usize, usize),
    a: (&[f32], (usize, usize)),
    b: (&[f32], (usize, usize)),
    accumulate: bool,
) -> Option<()> {
    let isa = Isa::detect()?;
    let (a_rs, a_cs) = a.1;
    if !(a_cs == 1 || a_rs == 1) {
        return None;
    }
    // SAFETY: `isa` was detected on this CPU.
    unsafe { one_product(isa, dst, (m, k, n), a, b, accumulate) };
    Some(())
}

/// [`small_product`] through the microkernel of `isa`, `a` with a unit stride.
///
/// # Safety
/// The CPU must support `isa`; `dst` may be uninitialised only when not `accumulate`.
unsafe fn one_product(
    isa: Isa,
    dst: &mut [f32],
    (m, k, n): (usize, usize, usize),
    (a, (a_rs, a_cs)): (&[f32], (usize, usize)),
    (b, (b_rs, b_cs)): (&[f32], (usize, usize)),
    accumulate: bool,
) {
    if m == 0 || n == 0 || k == 0 {
        if !accumulate {
            dst[..m * n].iter_mut().for_each(|v| *v = 0.0);
        }
        return;
    }
    assert!(
        dst.len() >= m * n
            && (m - 1) * a_rs + (k - 1) * a_cs < a.len()
            && (k - 1) * b_rs + (n - 1) * b_cs < b.len(),
        "small product: [{m}, {k}] @ [{k}, {n}] reaches outside its operands"
    );
    let nr = isa.nr();
    PANEL.with_borrow_mut(|buf| {
        if buf.len() < k * nr {
            buf.resize(k * nr, std::mem::MaybeUninit::uninit());
        }
        for p in 0..n.div_ceil(nr) {
            pack_panel(b, (k, n), (b_rs, b_cs), nr, p, &mut buf[..k * nr]);
            // SAFETY: `pack_panel` wrote all `k * nr` slots.
            let panel = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<f32>(), k * nr) };
            // SAFETY: columns `p * nr ..` of `dst`'s `[m, n]` (checked above); the CPU
            // supports `isa` (caller).
            unsafe {
                panel_rows(
                    isa,
                    (m, k, n, nr.min(n - p * nr)),
                    (a, (a_rs, a_cs)),
                    panel,
                    dst.as_mut_ptr().add(p * nr),
                    accumulate,
                );
            }
        }
    });
}

/// [`small_products`] through the microkernel of `isa`.
#[allow(clippy::type_complexity)]
fn small_products_on(
    isa: Isa,
    out: &mut [std::mem::MaybeUninit<f32>],
    (lhs, l_offs, (l_rs, l_cs)): (&[f32], &[usize], (usize, usize)),
    (rhs, r_offs, (r_rs, r_cs)): (&[f32], &[usize], (usize, usize)),
    (m, k, n): (usize, usize, usize),
) -> bool {
    if !(l_cs == 1 || l_rs == 1) || m == 0 || n == 0 || k == 0 {
        return false;
    }
    assert!(
        l_offs.len() == r_offs.len() && out.len() >= l_offs.len() * m * n,
        "small_products: {} and {} matrices into {} elements of [{m}, {n}]",
        l_offs.len(),
        r_offs.len(),
        out.len()
    );
    let product = |bi: usize, dst: &mut [std::mem::MaybeUninit<f32>]| {
        // SAFETY: a `MaybeUninit<f32>` slice written through as `f32` (no read before the
        // write: not accumulating); `isa` was detected on this CPU.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<f32>(), dst.len()) };
        // SAFETY: `isa` was detected on this CPU (`small_products`, or the test's ISAs).
        unsafe {
            one_product(
                isa,
                dst,
                (m, k, n),
                (&lhs[l_offs[bi]..], (l_rs, l_cs)),
                (&rhs[r_offs[bi]..], (r_rs, r_cs)),
                false,
            )
        };
    };
    // Each thread a contiguous run of the products, so it reads and writes the rows of
    // the batch that the step's ops cut by rows leave in its cache (and the next ones
    // read there).
    let batch = l_offs.len();
    let per = batch.div_ceil(super::num_threads().max(1));
    super::for_each_chunk_mut(&mut out[..batch * m * n], per * m * n, |t, run| {
        for (j, dst) in run.chunks_exact_mut(m * n).enumerate() {
            product(t * per + j, dst);
        }
    });
    true
}

/// The destination shared by the tasks of [`PackedRhs::matmul_into`].
struct SendPtr(*mut f32);
// SAFETY: the tasks write disjoint column ranges of the destination (see the call).
unsafe impl Sync for SendPtr {}
impl SendPtr {
    fn get(&self) -> *mut f32 {
        self.0
    }
}

/// Every row of `a` (`[m, k]`, element `(r, q)` at `r * a_rs + q * a_cs`) times one
/// packed panel, `MR` rows at a time, into `c`: the first of the panel's `cols` columns
/// in row 0 of a row-major `[m, n]` destination.
///
/// # Safety
/// `c` must point at `m` rows of `cols` writable elements `n` apart that nothing else
/// touches meanwhile, and the CPU must support `isa`.
unsafe fn panel_rows(
    isa: Isa,
    (m, k, n, cols): (usize, usize, usize, usize),
    (a, (a_rs, a_cs)): (&[f32], (usize, usize)),
    panel: &[f32],
    c: *mut f32,
    accumulate: bool,
) {
    let mut i = 0;
    while i < m {
        let rows = isa.mr().min(m - i);
        let a_rows = &a[i * a_rs..=(i + rows - 1) * a_rs + (k - 1) * a_cs];
        // SAFETY: rows `i .. i + rows` of the caller's destination block.
        unsafe {
            block(
                isa,
                rows,
                k,
                a_rows,
                (a_rs, a_cs),
                panel,
                c.add(i * n),
                n,
                cols,
                accumulate,
            )
        };
        i += rows;
    }
}

/// One register block: rows `0..rows` of `a` (`k` columns; element `(r, q)` at
/// `r * a_rs + q * a_cs`) times one panel, into `c` (row stride `ldc`, `cols` valid
/// columns).
///
/// # Safety
/// `c` must point at `rows` rows of `cols` writable elements `ldc` apart, and the CPU
/// must support `isa`.
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    isa: Isa,
    rows: usize,
    k: usize,
    a: &[f32],
    (a_rs, a_cs): (usize, usize),
    panel: &[f32],
    c: *mut f32,
    ldc: usize,
    cols: usize,
    accumulate: bool,
) {
    macro_rules! by_rows {
        ($f:ident, $($r:literal)*) => {
            match rows {
                $($r => $f::<$r>(k, a, (a_rs, a_cs), panel, c, ldc, cols, accumulate),)*
                _ => unreachable!("more rows than the register block"),
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `isa` was detected on this CPU (`Isa::detect`); the pointers as the caller
    // promised.
    unsafe {
        match isa {
            Isa::Avx512 => by_rows!(kernel_avx512, 1 2 3 4 5 6 7 8),
            Isa::Avx2 => by_rows!(kernel_avx2, 1 2 3 4 5 6),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, rows, k, a, a_rs, a_cs, panel, c, ldc, cols, accumulate);
        unreachable!("no microkernel off x86-64");
    }
}

/// Writes (or adds) a finished block: `tile` holds `R` rows of `nr` columns.
///
/// # Safety
/// As [`block`].
#[inline(always)]
unsafe fn store_partial<const R: usize>(
    tile: &[f32],
    nr: usize,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    accumulate: bool,
) {
    for r in 0..R {
        for j in 0..cols {
            // SAFETY: row `r < R`, column `j < cols` of the caller's block.
            unsafe {
                let d = c.add(r * ldc + j);
                *d = if accumulate {
                    *d + tile[r * nr + j]
                } else {
                    tile[r * nr + j]
                };
            }
        }
    }
}

/// Defines one ISA's microkernel `$name::<R>`: `R` rows of `a` times a panel of `$nr`
/// columns (two vectors of `$half` lanes), kept in `2 R` vector registers over the whole
/// contracted length, then written or added into `c`.
macro_rules! microkernel {
    ($name:ident, $feature:literal, $nr:literal, $half:literal, $mr:literal,
     $zero:ident, $load:ident, $store:ident, $set1:ident, $fma:ident, $add:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feature)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name<const R: usize>(
            k: usize,
            a: &[f32],
            (a_rs, a_cs): (usize, usize),
            panel: &[f32],
            c: *mut f32,
            ldc: usize,
            cols: usize,
            accumulate: bool,
        ) {
            use std::arch::x86_64::*;
            assert!(
                k > 0 && panel.len() >= k * $nr && a.len() > (R - 1) * a_rs + (k - 1) * a_cs,
                "microkernel: the operands are shorter than the block"
            );
            let mut lo = [$zero(); R];
            let mut hi = [$zero(); R];
            // One pointer per row, so each broadcast is one load at `row + off` (no
            // address arithmetic in the loop).
            let rows: [*const f32; R] = std::array::from_fn(|r| a[r * a_rs..].as_ptr());
            let bp = panel.as_ptr();
            if accumulate {
                // The block is read back at the end: start bringing it in now, hidden
                // behind the contraction (an RNN step's block is a cold row of a
                // sequence-long buffer).
                for r in 0..R {
                    for off in (0..cols).step_by(16) {
                        // SAFETY: a prefetch never faults; the address is inside the
                        // caller's block anyway.
                        unsafe { _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + off).cast::<i8>()) };
                    }
                }
            }
            let mut off = 0;
            for kk in 0..k {
                // SAFETY: `kk < k` and the panel holds `k` rows of `$nr`; row `r < R` of
                // `a` holds element `kk` at `r * a_rs + kk * a_cs` (checked above).
                unsafe {
                    let b0 = $load(bp.add(kk * $nr));
                    let b1 = $load(bp.add(kk * $nr + $half));
                    for r in 0..R {
                        let av = $set1(*rows[r].add(off));
                        lo[r] = $fma(av, b0, lo[r]);
                        hi[r] = $fma(av, b1, hi[r]);
                    }
                }
                off += a_cs;
            }
            if cols == $nr {
                for r in 0..R {
                    // SAFETY: row `r` of the block has `$nr` writable columns.
                    unsafe {
                        let d = c.add(r * ldc);
                        let (mut x, mut y) = (lo[r], hi[r]);
                        if accumulate {
                            x = $add(x, $load(d));
                            y = $add(y, $load(d.add($half)));
                        }
                        $store(d, x);
                        $store(d.add($half), y);
                    }
                }
            } else {
                let mut tile = [0.0f32; $mr * $nr];
                for r in 0..R {
                    // SAFETY: `tile` holds `$mr >= R` rows of `$nr`.
                    unsafe {
                        $store(tile.as_mut_ptr().add(r * $nr), lo[r]);
                        $store(tile.as_mut_ptr().add(r * $nr + $half), hi[r]);
                    }
                }
                // SAFETY: as the caller promised.
                unsafe { store_partial::<R>(&tile, $nr, c, ldc, cols, accumulate) };
            }
        }
    };
}

microkernel!(
    kernel_avx512,
    "avx512f",
    32,
    16,
    8,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_add_ps
);
microkernel!(
    kernel_avx2,
    "avx2,fma",
    16,
    8,
    6,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_add_ps
);

#[cfg(test)]
mod tests;
