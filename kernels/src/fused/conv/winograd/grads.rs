//! The input and weight gradients through Winograd F(2×2, 3×3).

use super::*;

/// The input gradient of a convolution [`input_grad_applies`] serves: the convolution
/// of `gout` `[n, out_channels, oh, ow]` by the filters flipped in space with input and
/// output channels swapped, padded by `2 - padding`: `[n, c, h, w]`.
pub(crate) fn conv2d_winograd_input_grad<T: Float>(
    gout: &[T],
    w: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    input_grad(gout, w, g, out_channels, None)
}

/// [`conv2d_winograd_input_grad`] with the given variant (`None`: [`forward_tile`]'s).
pub(super) fn input_grad<T: Float>(
    gout: &[T],
    w: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
    tile: Option<Tile>,
) -> HostBuffer<T> {
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let gg = Conv2dGeometry {
        n: g.n,
        c: out_channels,
        input: [oh, ow],
        kernel: [3, 3],
        stride: [1, 1],
        padding: [2 - g.padding[0], 2 - g.padding[1]],
        dilation: [1, 1],
    };
    debug_assert_eq!(gg.output(), Some(g.input));
    // F(4×4) as the forward would take it: at 7², 512 channels, batch 8 (the Zen 5,
    // alternated four times) 3.58–3.76 ms against F(2×2)'s 4.09–4.17.
    let tile = tile.unwrap_or_else(|| forward_tile(&gg));
    winograd(gout, w, None, &gg, g.c, true, tile)
}

/// The weight gradient of a convolution [`applies`] serves, `[out_channels, c, 3, 3]`:
/// with `M = U ⊙ V` per tile and `y = Aᵀ M A`, the gradient of `U` is
/// `Σ_t (A gy_t Aᵀ) ⊙ V_t` (`alpha²` GEMMs of `[o, tiles]` by `[tiles, i]`) and that of
/// the filters `Gᵀ dU G` (one GEMM by `T = G ⊗ G`) — the exact gradient of the
/// transformed forward, which equals the convolution's.
pub(crate) fn conv2d_winograd_weight_grad<T: Float>(
    gout: &[T],
    x: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
) -> HostBuffer<T> {
    // The forward's variant: ResNet-18 at batch 8 on the Zen 5 (alternated four times),
    // 28², 128 channels: 3.57–3.70 ms by F(2×2), 2.44–2.62 by F(4×4); 14², 256: 2.76–2.85
    // against 2.61–2.79.
    weight_grad(gout, x, g, out_channels, forward_tile(g))
}

/// [`conv2d_winograd_weight_grad`] with the given variant.
pub(super) fn weight_grad<T: Float>(
    gout: &[T],
    x: &[T],
    g: &Conv2dGeometry,
    out_channels: usize,
    tile: Tile,
) -> HostBuffer<T> {
    assert!(
        g.kernel == [3, 3] && g.stride == [1, 1] && g.dilation == [1, 1],
        "conv2d_winograd_weight_grad: a 3x3 kernel with unit stride and dilation, got {g:?}"
    );
    let [oh, ow] = g.output().expect("conv geometry checked by the caller");
    let (ic, oc) = (g.c, out_channels);
    let (m, xis) = (tile.m(), tile.xis());
    let (th, tw) = (oh.div_ceil(m), ow.div_ceil(m));
    let (Some(x), Some(gy)) = (as_f32(x), as_f32(gout)) else {
        panic!("conv2d_winograd_weight_grad: f32 only");
    };
    assert!(
        x.len() == g.n * ic * g.input[0] * g.input[1] && gy.len() == g.n * oc * oh * ow,
        "conv2d_winograd_weight_grad: slices do not match {g:?} with {oc} outputs"
    );
    let mut dw = HostBuffer::<T>::zeroed(oc * ic * 9);
    let n = g.n * th * tw;
    if n == 0 || oc * ic == 0 {
        return dw;
    }
    let threads = Parallelism::Threads(num_threads());
    let v = transform_input(x, g, th, tw, tile);

    // The output gradient, channels last, padded to whole tiles: `[n, m th, m tw, oc]`.
    let (hp, wp) = (m * th, m * tw);
    let gp = channels_last(gy, g.n, oc, [oh, ow], [hp, wp], [0, 0]);
    // Z[ξ][t][o] = (A gy_t Aᵀ)[ξ].
    let z = per_tile(g.n, [th, tw], oc, xis, |s, ty, tx, out| {
        let row = |i: usize| &gp[((s * hp + m * ty + i) * wp + m * tx) * oc..][..m * oc];
        match tile {
            Tile::F2 => with_simd(Separable::<GradLine2, 2, 4>::new(
                std::array::from_fn(row),
                out,
                oc,
            )),
            Tile::F4 => with_simd(Separable::<GradLine4, 4, 6>::new(
                std::array::from_fn(row),
                out,
                oc,
            )),
        }
    });
    drop(gp);

    // dU[ξ] = Z[ξ]ᵀ V[ξ]: [oc, n] by [n, ic].
    let mut du = HostBuffer::<f32>::new_uninit(xis * oc * ic);
    for xi in 0..xis {
        // SAFETY: destination `(o, i)` at `o * ic + i` inside `du` (block ξ), every
        // element written (`read_dst` false); `Z[ξ]` `(o, t)` at `t * oc + o` and `V[ξ]`
        // `(t, i)` at `t * ic + i` inside `z` and `v`; nothing overlaps.
        unsafe {
            gemm(
                oc,
                ic,
                n,
                du.as_mut_ptr().cast::<f32>().add(xi * oc * ic),
                1,
                ic as isize,
                false,
                z.as_ptr().add(xi * n * oc),
                oc as isize,
                1,
                v.as_ptr().add(xi * n * ic),
                1,
                ic as isize,
                1.0,
                1.0,
                threads,
            );
        }
    }
    // SAFETY: the `xis` GEMMs wrote every element.
    let du = unsafe { du.assume_init() };
    drop((z, v));
    // dW[(o, i)][k] = Σ_ξ dU[ξ][(o, i)] T[k][ξ].
    let t = filter_matrix(tile);
    let dwf = as_f32_mut(&mut dw).expect("f32");
    // SAFETY: destination `[oc * ic, 9]` row-major (`dw`, every element written);
    // `dU` `(r, ξ)` at `ξ * oc * ic + r`, `T` `(ξ, k)` at `k * xis + ξ`; nothing overlaps.
    unsafe {
        gemm(
            oc * ic,
            9,
            xis,
            dwf.as_mut_ptr(),
            1,
            9,
            false,
            du.as_ptr(),
            (oc * ic) as isize,
            1,
            t.as_ptr(),
            xis as isize,
            1,
            1.0,
            1.0,
            threads,
        );
    }
    dw
}
