use super::super::lanes::{Lanes, Ymm2, Zmm};
use super::{Level, Plan, blocks};

macro_rules! entry {
    ($name:ident, $avx512:ident, $avx2:ident, ($($arg:ident: $ty:ty),*)) => {
        #[target_feature(enable = "avx512f")]
        unsafe fn $avx512(plan: &Plan, $($arg: $ty),*) {
            // SAFETY: AVX-512F is enabled here; the rest is the caller's contract.
            unsafe { blocks::$name::<Zmm, { Zmm::PX }>(plan, $($arg),*) }
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx2(plan: &Plan, $($arg: $ty),*) {
            // SAFETY: AVX2 and FMA are enabled here; the rest is the caller's contract.
            unsafe { blocks::$name::<Ymm2, { Ymm2::PX }>(plan, $($arg),*) }
        }
        /// # Safety
        /// The CPU has `level`'s features; the rest as the block loop of this name.
        pub(super) unsafe fn $name(level: Level, plan: &Plan, $($arg: $ty),*) {
            // SAFETY: the caller checked the level's features.
            unsafe {
                match level {
                    Level::Avx512 => $avx512(plan, $($arg),*),
                    Level::Avx2 => $avx2(plan, $($arg),*),
                }
            }
        }
    };
}

entry!(sample, sample_avx512, sample_avx2, (x: &[f32], out: &mut [f32]));
#[target_feature(enable = "avx512f")]
unsafe fn sample_unit_stride_avx512(plan: &Plan, x: &[f32], out: &mut [f32]) {
    // SAFETY: AVX-512F is enabled here; the rest is the caller's contract (`plan.px`
    // only picks the block width).
    unsafe {
        if plan.g.dilation == [1, 1] {
            match (plan.px, plan.g.kernel[1]) {
                (8, 3) => return blocks::sample_unit_rows::<Zmm, 8, 3>(plan, x, out),
                (10, 3) => return blocks::sample_unit_rows::<Zmm, 10, 3>(plan, x, out),
                (12, 3) => return blocks::sample_unit_rows::<Zmm, 12, 3>(plan, x, out),
                (14, 3) => return blocks::sample_unit_rows::<Zmm, 14, 3>(plan, x, out),
                (16, 3) => return blocks::sample_unit_rows::<Zmm, 16, 3>(plan, x, out),
                (8, 5) => return blocks::sample_unit_rows::<Zmm, 8, 5>(plan, x, out),
                (10, 5) => return blocks::sample_unit_rows::<Zmm, 10, 5>(plan, x, out),
                (12, 5) => return blocks::sample_unit_rows::<Zmm, 12, 5>(plan, x, out),
                (14, 5) => return blocks::sample_unit_rows::<Zmm, 14, 5>(plan, x, out),
                (16, 5) => return blocks::sample_unit_rows::<Zmm, 16, 5>(plan, x, out),
                _ => {}
            }
        }
        match plan.px {
            10 => blocks::sample_unit_stride::<Zmm, 10>(plan, x, out),
            12 => blocks::sample_unit_stride::<Zmm, 12>(plan, x, out),
            14 => blocks::sample_unit_stride::<Zmm, 14>(plan, x, out),
            16 => blocks::sample_unit_stride::<Zmm, 16>(plan, x, out),
            _ => blocks::sample_unit_stride::<Zmm, { Zmm::PX }>(plan, x, out),
        }
    }
}
#[target_feature(enable = "avx2,fma")]
unsafe fn sample_unit_stride_avx2(plan: &Plan, x: &[f32], out: &mut [f32]) {
    // SAFETY: AVX2 and FMA are enabled here; the rest is the caller's contract.
    unsafe { blocks::sample_unit_stride::<Ymm2, { Ymm2::PX }>(plan, x, out) }
}
/// # Safety
/// The CPU has `level`'s features; the rest as [`blocks::sample_unit_stride`].
pub(super) unsafe fn sample_unit_stride(level: Level, plan: &Plan, x: &[f32], out: &mut [f32]) {
    // SAFETY: the caller checked the level's features.
    unsafe {
        match level {
            Level::Avx512 => sample_unit_stride_avx512(plan, x, out),
            Level::Avx2 => sample_unit_stride_avx2(plan, x, out),
        }
    }
}
entry!(
    weight_grad_sample,
    weight_grad_sample_avx512,
    weight_grad_sample_avx2,
    (x: &[f32], gyt: &[f32], wide: usize, dwt: &mut [f32])
);
