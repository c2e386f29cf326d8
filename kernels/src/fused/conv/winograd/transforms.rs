//! The tile transforms, one AVX-512 register of channels at a time: the separable
//! line transforms of F(2×2, 3×3) and F(4×4, 3×3) and the kernels that apply them.

use super::*;

/// Channels per vector step of the transforms (one AVX-512 register of f32).
pub(super) const L: usize = 16;

/// `L` consecutive elements of `s` from `at`.
#[inline(always)]
pub(super) fn lanes(s: &[f32], at: usize) -> [f32; L] {
    s[at..at + L].try_into().expect("L elements")
}

/// The first `width` lanes of `v` to the start of `dst`: a whole vector as one
/// fixed-size copy (one store), a short tail element by element (a copy of run-time
/// length called the C library's `memmove` per row, a fifth of the F(4×4) time).
#[inline(always)]
pub(super) fn store(dst: &mut [f32], v: &[f32; L], width: usize) {
    if width == L {
        dst[..L].copy_from_slice(v);
    } else {
        for (d, &x) in dst[..width].iter_mut().zip(v) {
            *d = x;
        }
    }
}

/// Elementwise `f` of two lane arrays.
#[inline(always)]
pub(super) fn zip(a: [f32; L], b: [f32; L], f: impl Fn(f32, f32) -> f32) -> [f32; L] {
    std::array::from_fn(|l| f(a[l], b[l]))
}

/// Lanes `(a, b) ↦ a + k·b`.
#[inline(always)]
pub(super) fn axpy(a: [f32; L], k: f32, b: [f32; L]) -> [f32; L] {
    zip(a, b, |a, b| a + k * b)
}

/// F(2×2)'s `Bᵀ d` along one line of four patch elements, with
/// `Bᵀ = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]`.
#[inline(always)]
pub(super) fn input_line2(d: [[f32; L]; 4]) -> [[f32; L]; 4] {
    let [d0, d1, d2, d3] = d;
    [
        zip(d0, d2, |a, b| a - b),
        zip(d1, d2, |a, b| a + b),
        zip(d2, d1, |a, b| a - b),
        zip(d1, d3, |a, b| a - b),
    ]
}

/// F(2×2)'s `Aᵀ m` along one line of four transformed elements, with
/// `Aᵀ = [[1, 1, 1, 0], [0, 1, -1, -1]]`.
#[inline(always)]
pub(super) fn output_line2(m: [[f32; L]; 4]) -> [[f32; L]; 2] {
    let [m0, m1, m2, m3] = m;
    [
        zip(zip(m0, m1, |a, b| a + b), m2, |a, b| a + b),
        zip(zip(m1, m2, |a, b| a - b), m3, |a, b| a - b),
    ]
}

/// F(2×2)'s `A g` along one line of two output-gradient elements, with
/// `A = [[1, 0], [1, 1], [1, -1], [0, -1]]`.
#[inline(always)]
pub(super) fn grad_line2(g: [[f32; L]; 2]) -> [[f32; L]; 4] {
    let [g0, g1] = g;
    [
        g0,
        zip(g0, g1, |a, b| a + b),
        zip(g0, g1, |a, b| a - b),
        g1.map(|v| -v),
    ]
}

/// F(4×4)'s `Bᵀ d` along one line of six patch elements:
/// `Bᵀ = [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
/// [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]`.
#[inline(always)]
pub(super) fn input_line4(d: [[f32; L]; 6]) -> [[f32; L]; 6] {
    let [d0, d1, d2, d3, d4, d5] = d;
    let s34 = zip(d3, d4, |a, b| a + b);
    let d43 = zip(d4, d3, |a, b| a - b);
    let s12 = zip(d1, d2, |a, b| a + b);
    let d12 = zip(d1, d2, |a, b| a - b);
    let d42 = zip(d4, d2, |a, b| a - b);
    let d31 = zip(d3, d1, |a, b| a - b);
    [
        axpy(axpy(d4, 4.0, d0), -5.0, d2),
        axpy(s34, -4.0, s12),
        axpy(d43, 4.0, d12),
        axpy(d42, 2.0, d31),
        axpy(d42, -2.0, d31),
        axpy(axpy(d5, 4.0, d1), -5.0, d3),
    ]
}

/// F(4×4)'s `Aᵀ m` along one line of six transformed elements:
/// `Aᵀ = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
/// [0, 1, -1, 8, -8, 1]]`.
#[inline(always)]
pub(super) fn output_line4(m: [[f32; L]; 6]) -> [[f32; L]; 4] {
    let [m0, m1, m2, m3, m4, m5] = m;
    let s12 = zip(m1, m2, |a, b| a + b);
    let d12 = zip(m1, m2, |a, b| a - b);
    let s34 = zip(m3, m4, |a, b| a + b);
    let d34 = zip(m3, m4, |a, b| a - b);
    [
        zip(zip(m0, s12, |a, b| a + b), s34, |a, b| a + b),
        axpy(d12, 2.0, d34),
        axpy(s12, 4.0, s34),
        zip(axpy(d12, 8.0, d34), m5, |a, b| a + b),
    ]
}

/// F(4×4)'s `A g` along one line of four output-gradient elements (`A` the transpose of
/// [`output_line4`]'s `Aᵀ`): `(g0, g0 + g1 + g2 + g3, g0 - g1 + g2 - g3,
/// g0 + 2 g1 + 4 g2 + 8 g3, g0 - 2 g1 + 4 g2 - 8 g3, g3)`.
#[inline(always)]
pub(super) fn grad_line4(g: [[f32; L]; 4]) -> [[f32; L]; 6] {
    let [g0, g1, g2, g3] = g;
    let s02 = zip(g0, g2, |a, b| a + b);
    let s13 = zip(g1, g3, |a, b| a + b);
    // g0 + 4 g2 and g1 + 4 g3: the even and (halved) odd parts at ±2.
    let e = axpy(g0, 4.0, g2);
    let o = axpy(g1, 4.0, g3);
    [
        g0,
        zip(s02, s13, |a, b| a + b),
        zip(s02, s13, |a, b| a - b),
        axpy(e, 2.0, o),
        axpy(e, -2.0, o),
        g3,
    ]
}

/// A one-dimensional Winograd transform of `N` lane vectors into `K`, applied along both
/// axes of a tile by [`Separable`] and [`SeparableOut`].
pub(super) trait Line<const N: usize, const K: usize> {
    fn line(v: [[f32; L]; N]) -> [[f32; L]; K];
}

/// Declares a zero-sized [`Line`] for each transform function.
macro_rules! lines {
    ($($(#[$doc:meta])* $name:ident: $n:literal -> $k:literal = $f:ident;)*) => {$(
        $(#[$doc])*
        pub(super) struct $name;

        impl Line<$n, $k> for $name {
            #[inline(always)]
            fn line(v: [[f32; L]; $n]) -> [[f32; L]; $k] {
                $f(v)
            }
        }
    )*};
}

lines! {
    /// F(2×2)'s input transform, [`input_line2`].
    InputLine2: 4 -> 4 = input_line2;
    /// F(2×2)'s output transform, [`output_line2`].
    OutputLine2: 4 -> 2 = output_line2;
    /// F(2×2)'s output-gradient transform, [`grad_line2`].
    GradLine2: 2 -> 4 = grad_line2;
    /// F(4×4)'s input transform, [`input_line4`].
    InputLine4: 6 -> 6 = input_line4;
    /// F(4×4)'s output transform, [`output_line4`].
    OutputLine4: 6 -> 4 = output_line4;
    /// F(4×4)'s output-gradient transform, [`grad_line4`].
    GradLine4: 4 -> 6 = grad_line4;
}

/// One tile's `X (·) Xᵀ` transform for every channel, the channels in vector lanes: step
/// 3's `V[ξ] = (Bᵀ d B)[ξ]` ([`InputLine2`], [`InputLine4`]: `rows[i]` the patch's row
/// `i`, `N` pixels of `width` channels) or the weight gradient's `Z[ξ] = (A gy Aᵀ)[ξ]`
/// ([`GradLine2`], [`GradLine4`]: the output gradient's `N` rows of `N` pixels);
/// `out[i · K + j]` receives element `(i, j)`.
pub(super) struct Separable<'a, 'b, 'o, F, const N: usize, const K: usize> {
    rows: [&'a [f32]; N],
    out: &'b mut [&'o mut [f32]],
    width: usize,
    line: std::marker::PhantomData<F>,
}

impl<'a, 'b, 'o, F: Line<N, K>, const N: usize, const K: usize> Separable<'a, 'b, 'o, F, N, K> {
    pub(super) fn new(rows: [&'a [f32]; N], out: &'b mut [&'o mut [f32]], width: usize) -> Self {
        Separable {
            rows,
            out,
            width,
            line: std::marker::PhantomData,
        }
    }
}

impl<F: Line<N, K>, const N: usize, const K: usize> SimdKernel for Separable<'_, '_, '_, F, N, K> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let wd = self.width;
        let rows = self.rows;
        let out = self.out;
        let step = |c: usize, width: usize, out: &mut [&mut [f32]]| {
            let d = |i: usize, j: usize| -> [f32; L] {
                if width == L {
                    lanes(rows[i], j * wd + c)
                } else {
                    std::array::from_fn(|l| {
                        if l < width {
                            rows[i][j * wd + c + l]
                        } else {
                            0.0
                        }
                    })
                }
            };
            // Along x per row, then along y per column (loops, not nested `from_fn`s:
            // those were left as calls, not inlined).
            let mut r = [[[0.0f32; L]; K]; N];
            for (i, ri) in r.iter_mut().enumerate() {
                let mut line = [[0.0f32; L]; N];
                for (j, v) in line.iter_mut().enumerate() {
                    *v = d(i, j);
                }
                *ri = F::line(line);
            }
            for j in 0..K {
                let mut line = [[0.0f32; L]; N];
                for (v, ri) in line.iter_mut().zip(&r) {
                    *v = ri[j];
                }
                for (i, vi) in F::line(line).iter().enumerate() {
                    store(&mut out[i * K + j][c..], vi, width);
                }
            }
        };
        by_lanes(wd, |c, width| step(c, width, out));
    }
}

/// Step 5 for one tile: `Aᵀ M A + bias` ([`OutputLine2`], [`OutputLine4`]) for every
/// output channel, the channels in vector lanes, from the tile's `N²` rows of `M` (`m[i ·
/// N + j]` its element `(i, j)`, `oc` channels each) into `y` (pixel `(dy, dx)` at
/// `(K dy + dx) · oc`).
pub(super) struct SeparableOut<'a, 'b, F, const N: usize, const K: usize> {
    m: &'b [&'a [f32]],
    bias: &'a [f32],
    y: &'b mut [f32],
    line: std::marker::PhantomData<F>,
}

impl<'a, 'b, F: Line<N, K>, const N: usize, const K: usize> SeparableOut<'a, 'b, F, N, K> {
    pub(super) fn new(m: &'b [&'a [f32]], bias: &'a [f32], y: &'b mut [f32]) -> Self {
        SeparableOut {
            m,
            bias,
            y,
            line: std::marker::PhantomData,
        }
    }
}

impl<F: Line<N, K>, const N: usize, const K: usize> SimdKernel for SeparableOut<'_, '_, F, N, K> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let oc = self.bias.len();
        let (m, bias) = (self.m, self.bias);
        let y = self.y;
        let step = |o: usize, width: usize, y: &mut [f32]| {
            let ld = |s: &[f32]| -> [f32; L] {
                if width == L {
                    lanes(s, o)
                } else {
                    std::array::from_fn(|l| if l < width { s[o + l] } else { 0.0 })
                }
            };
            // Loops, not nested `from_fn`s (see `Separable`).
            let mut c = [[[0.0f32; L]; K]; N];
            for (i, ci) in c.iter_mut().enumerate() {
                let mut line = [[0.0f32; L]; N];
                for (j, v) in line.iter_mut().enumerate() {
                    *v = ld(m[N * i + j]);
                }
                *ci = F::line(line);
            }
            let b = ld(bias);
            for dx in 0..K {
                let mut column = [[0.0f32; L]; N];
                for (v, ci) in column.iter_mut().zip(&c) {
                    *v = ci[dx];
                }
                for (dy, p) in F::line(column).iter().enumerate() {
                    let p = zip(*p, b, |p, b| p + b);
                    store(&mut y[(dy * K + dx) * oc + o..], &p, width);
                }
            }
        };
        by_lanes(oc, |o, width| step(o, width, y));
    }
}
