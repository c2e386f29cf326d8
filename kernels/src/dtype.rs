//! Element types and the traits kernels are generic over.

use half::{bf16, f16};
use std::fmt::{Debug, Display};

use crate::cpu::{CpuStorage, HostBuffer};

/// The element type of a tensor, as PyTorch's `torch.dtype`.
///
/// ```
/// use ferrograd_kernels::DType;
/// assert_eq!(DType::promote(DType::I64, DType::F32), DType::F32);
/// assert!(DType::BF16.is_float());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float (`torch.float32`).
    F32,
    /// 64-bit IEEE float (`torch.float64`).
    F64,
    /// 16-bit IEEE half (`torch.float16`); arithmetic accumulates in f32.
    F16,
    /// bfloat16 (`torch.bfloat16`); arithmetic accumulates in f32.
    BF16,
    /// 64-bit signed integer (`torch.int64`), used for indices.
    I64,
    /// 8-bit unsigned integer (`torch.uint8`).
    U8,
    /// Boolean (`torch.bool`), produced by comparisons.
    Bool,
}

impl DType {
    /// Every dtype, in promotion order from lowest to highest category.
    pub const ALL: [DType; 7] = [
        DType::Bool,
        DType::U8,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Bytes per element.
    ///
    /// ```
    /// assert_eq!(ferrograd_kernels::DType::BF16.size_in_bytes(), 2);
    /// ```
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::F16 | DType::BF16 => 2,
            DType::U8 | DType::Bool => 1,
        }
    }

    /// Whether this is a floating-point dtype (the only ones that can require grad).
    ///
    /// ```
    /// assert!(!ferrograd_kernels::DType::I64.is_float());
    /// ```
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// Whether this is a 16-bit float (f16 or bf16), computed in f32.
    ///
    /// ```
    /// assert!(ferrograd_kernels::DType::BF16.is_half());
    /// assert!(!ferrograd_kernels::DType::F32.is_half());
    /// ```
    pub const fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// PyTorch's name for the dtype (`float32`, `int64`, ...).
    ///
    /// ```
    /// assert_eq!(ferrograd_kernels::DType::F16.name(), "float16");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        }
    }

    /// The result dtype of a binary op between tensors of these dtypes, following
    /// PyTorch's category rule: bool < integer < float, and within a category the wider
    /// type wins (`f16` with `bf16` gives `f32`, as in PyTorch).
    ///
    /// ```
    /// use ferrograd_kernels::DType;
    /// assert_eq!(DType::promote(DType::F16, DType::BF16), DType::F32);
    /// assert_eq!(DType::promote(DType::U8, DType::I64), DType::I64);
    /// ```
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a, b) {
            (F16, BF16) | (BF16, F16) => F32,
            (F64, _) | (_, F64) => F64,
            (F32, _) | (_, F32) => F32,
            (BF16, _) | (_, BF16) => BF16,
            (F16, _) | (_, F16) => F16,
            (I64, _) | (_, I64) => I64,
            (U8, _) | (_, U8) => U8,
            _ => Bool,
        }
    }
}

impl Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "torch.{}", self.name())
    }
}

/// A type that can be stored in a tensor.
///
/// ```
/// use ferrograd_kernels::{DType, Element};
/// assert_eq!(<f32 as Element>::DTYPE, DType::F32);
/// assert_eq!(<i64 as Element>::from_f64(3.7), 3);
/// ```
pub trait Element: Copy + Send + Sync + Default + PartialOrd + Debug + Display + 'static {
    /// The dtype tag of this element type.
    const DTYPE: DType;
    /// Converts to f64 (lossless for every supported type but large i64).
    fn to_f64(self) -> f64;
    /// Converts from f64, truncating towards zero for integers as `as` does.
    fn from_f64(v: f64) -> Self;
    /// Borrows the typed slice of a storage of this dtype, if it is one.
    fn slice(storage: &CpuStorage) -> Option<&[Self]>;
    /// Mutably borrows the typed slice of a storage of this dtype, if it is one.
    fn slice_mut(storage: &mut CpuStorage) -> Option<&mut [Self]>;
    /// Wraps a buffer as storage.
    fn into_storage(v: HostBuffer<Self>) -> CpuStorage;
}

/// An element type with arithmetic (every dtype but bool).
pub trait NumElement:
    Element
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// The lowest value (used as the identity of `max`).
    const MIN_VALUE: Self;
    /// The highest value (used as the identity of `min`).
    const MAX_VALUE: Self;
    /// The type sums accumulate in: f32 for the half types, the type itself otherwise.
    type Acc: NumElement;
    /// Widens to the accumulator type.
    fn to_acc(self) -> Self::Acc;
    /// Narrows from the accumulator type (round to nearest for floats).
    fn from_acc(v: Self::Acc) -> Self;
}

/// Scalar math used inside kernels: implemented for the accumulator types f32 and f64.
pub trait Real: num_traits::Float + NumElement + std::iter::Sum {
    /// The error function.
    fn erf(self) -> Self;
    /// `e^x`, written so that loops over it vectorise (f32: about 1 ulp; f64: `std`'s).
    fn exp_vec(self) -> Self;

    /// The error function written so that loops over it vectorise. f32: Abramowitz and
    /// Stegun 7.1.26 over [`Real::exp_vec`] (absolute error below 1e-6; relative error near 0 up to 2e-5, so `Tensor::erf` keeps libm), the formula of
    /// PyTorch's vectorised CPU `erf` and GELU; f64: `libm`'s.
    #[inline(always)]
    fn erf_vec(self) -> Self {
        self.erf()
    }

    /// `e^x` for `x <= 0` or NaN (softmax's `x - max`), as [`Real::exp_vec`] without its
    /// overflow branch; with `FMA` the f32 polynomial runs in fused multiply-adds (only
    /// for code compiled with FMA: see `SimdKernel::run_fma`).
    #[inline(always)]
    fn exp_nonpos<const FMA: bool>(self) -> Self {
        self.exp_vec()
    }

    /// [`Real::exp_nonpos`] that may flush results below the smallest normal number to
    /// 0 (f32: under `e^-87.3`, one power-of-two scale instead of two), for sums such as
    /// softmax's, where such terms never reach a rounded result.
    #[inline(always)]
    fn exp_nonpos_normal<const FMA: bool>(self) -> Self {
        self.exp_nonpos::<FMA>()
    }

    /// The standard normal distribution's CDF `Φ(x) = ½(1 + erf(x/√2))` and density
    /// `φ(x) = e^(-x²/2)/√(2π)` (GELU's forward and backward), written so that loops over
    /// them vectorise. f32: one exponential serves both (the Abramowitz and Stegun erf of
    /// [`Real::erf_vec`] needs `e^(-(x/√2)²)`, which is the density's), with fused
    /// multiply-adds when `FMA` (only for code compiled with FMA: see
    /// `SimdKernel::run_fma`); f64: `libm`'s erf and `std`'s exp.
    #[inline(always)]
    fn normal_cdf_pdf<const FMA: bool>(self) -> (Self, Self) {
        let c = |v: f64| <Self as num_traits::NumCast>::from(v).unwrap_or_else(Self::nan);
        let (half, frac_1_sqrt_2) = (c(0.5), c(std::f64::consts::FRAC_1_SQRT_2));
        let inv_sqrt_2pi = c(0.398_942_280_401_432_7);
        let cdf = half * (Self::one() + (self * frac_1_sqrt_2).erf());
        (cdf, (-half * self * self).exp() * inv_sqrt_2pi)
    }

    /// The standard normal distribution's CDF `Φ(x) = ½(1 + erf(x/√2))` alone (GELU's
    /// forward), written so that loops over it vectorise. f32: a rational approximation
    /// of erf with no exponential (about half the instructions of
    /// [`Real::normal_cdf_pdf`]; absolute error below 4e-7, never past 1), with fused
    /// multiply-adds when `FMA`; f64: `libm`'s erf.
    #[inline(always)]
    fn normal_cdf<const FMA: bool>(self) -> Self {
        self.normal_cdf_pdf::<FMA>().0
    }

    /// The logistic function `1 / (1 + e^-x)` over [`Real::exp_vec`]: `e^-|x|` never
    /// overflows, so both branches are stable, and the select vectorises.
    #[inline(always)]
    fn sigmoid_vec(self) -> Self {
        self.sigmoid_fma::<false>()
    }

    /// [`Real::sigmoid_vec`] with its exponential (`e^-|x|`, never positive in the
    /// exponent: [`Real::exp_nonpos`]) in fused multiply-adds when `FMA`.
    #[inline(always)]
    fn sigmoid_fma<const FMA: bool>(self) -> Self {
        let e = (-self.abs()).exp_nonpos::<FMA>();
        let r = Self::one() / (Self::one() + e);
        if self >= Self::zero() { r } else { e * r }
    }

    /// `tanh` written so that loops over it vectorise. f32: an odd Taylor polynomial
    /// below 0.3 and `(1 - e) / (1 + e)` with `e = e^(-2|x|)` above (within 4 ulp of
    /// libm, tested); f64: `std`'s.
    #[inline(always)]
    fn tanh_vec(self) -> Self {
        self.tanh_fma::<false>()
    }

    /// [`Real::tanh_vec`] with its polynomials in fused multiply-adds when `FMA` (only
    /// for code compiled with FMA: see `SimdKernel::run_fma`).
    #[inline(always)]
    fn tanh_fma<const FMA: bool>(self) -> Self {
        self.tanh()
    }
}

/// `a * b + c`, fused when `FMA` (for code compiled with FMA only: elsewhere `mul_add`
/// is a library call).
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// `e^x` as `(2^-n e^x, n)` for `x` at most 0 (or NaN), `n` integral: `x = n ln 2 + r`
/// with `|r| <= ln 2 / 2` (`ln 2` in two parts), `e^r` by its degree-7 polynomial; the
/// shared core of [`Real::exp_nonpos`] and [`exp_normal_range`], which scale it by `2^n`.
#[inline(always)]
fn exp_reduced<const FMA: bool>(x: f32) -> (f32, f32) {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0;
    let n = madd::<FMA>(x, LOG2E, ROUND) - ROUND;
    let r = madd::<FMA>(n, -LN2_LO, madd::<FMA>(n, -LN2_HI, x));
    let mut p = 1.987_569_1e-4f32;
    p = madd::<FMA>(p, r, 1.398_199_9e-3);
    p = madd::<FMA>(p, r, 8.333_452e-3);
    p = madd::<FMA>(p, r, 4.166_579_6e-2);
    p = madd::<FMA>(p, r, 1.666_666_5e-1);
    p = madd::<FMA>(p, r, 0.5);
    (madd::<FMA>(p, r * r, r) + 1.0, n)
}

/// `2^k` for integral `k` in the normal exponent range, from exponent bits.
#[inline(always)]
fn pow2(k: f32) -> f32 {
    f32::from_bits((k + (127.0 + 8_388_608.0)).to_bits() << 23)
}

/// `e^x` for `x <= 0` or NaN, as [`Real::exp_nonpos`] but 0 below `ln 2^-126` (no
/// subnormal results): one power-of-two scale instead of two. For `e^(-x²)` in erf and
/// the normal density, whose subnormal values never reach a result.
#[inline(always)]
fn exp_normal_range<const FMA: bool>(x: f32) -> f32 {
    const LO: f32 = -87.336_54;
    let (y, n) = exp_reduced::<FMA>(if x < LO { LO } else { x });
    let v = y * pow2(n);
    if x < LO { 0.0 } else { v }
}

/// Abramowitz and Stegun 7.1.26: `erf(x)` given `e = e^(-x²)` (absolute error below
/// 1e-6); NaN passes through.
#[inline(always)]
fn erf_given_exp<const FMA: bool>(x: f32, e: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / madd::<FMA>(0.327_591_1, a, 1.0);
    let mut p = 1.061_405_4f32;
    p = madd::<FMA>(p, t, -1.453_152_1);
    p = madd::<FMA>(p, t, 1.421_413_8);
    p = madd::<FMA>(p, t, -0.284_496_74);
    p = madd::<FMA>(p, t, 0.254_829_6);
    let r = 1.0 - p * t * e;
    // The sign of x, NaN passing through (`r` is NaN for NaN).
    if x < 0.0 { -r } else { r }
}

impl Real for f32 {
    fn erf(self) -> Self {
        libm::erff(self)
    }

    #[inline(always)]
    fn erf_vec(self) -> f32 {
        // `-x²` is never positive, so the exponential needs no overflow branch.
        erf_given_exp::<false>(self, (-self * self).exp_nonpos::<false>())
    }

    /// `erf(z) ≈ z P(z²) / Q(z²)` for `|z| <= 3.92` (beyond, erf rounds to ±1 in f32),
    /// `P` and `Q` of degree 5 fitted for the least largest absolute error
    /// (`tools/fit_erf.py`: 1.9e-8 in exact arithmetic, 3.5e-7 evaluated in f32; the
    /// leading coefficient is 2/√π, the exact slope at 0, one f32 step from the fit's),
    /// clamped to [-1, 1]. NaN passes through every select.
    #[inline(always)]
    fn normal_cdf<const FMA: bool>(self) -> f32 {
        const C: f32 = 3.92;
        const P: [f32; 6] = [
            std::f32::consts::FRAC_2_SQRT_PI,
            0.193_018_97,
            0.053_094_488,
            0.003_879_891_2,
            0.000_287_821_08,
            2.033_334_8e-6,
        ];
        const Q: [f32; 6] = [
            1.0,
            0.504_390_1,
            0.115_190_42,
            0.015_194_665,
            0.001_191_122,
            3.807_533e-5,
        ];
        let z = self * std::f32::consts::FRAC_1_SQRT_2;
        let z = if z < -C { -C } else { z };
        let z = if z > C { C } else { z };
        let t = z * z;
        let (mut p, mut q) = (P[5], Q[5]);
        for i in (0..5).rev() {
            p = madd::<FMA>(p, t, P[i]);
            q = madd::<FMA>(q, t, Q[i]);
        }
        let e = z * p / q;
        let e = if e > 1.0 { 1.0 } else { e };
        let e = if e < -1.0 { -1.0 } else { e };
        madd::<FMA>(0.5, e, 0.5)
    }

    #[inline(always)]
    fn normal_cdf_pdf<const FMA: bool>(self) -> (f32, f32) {
        let z = self * std::f32::consts::FRAC_1_SQRT_2;
        // e^(-z²) = e^(-x²/2): erf(z)'s exponential and, scaled, the density.
        let e = exp_normal_range::<FMA>(-z * z);
        let cdf = madd::<FMA>(0.5, erf_given_exp::<FMA>(z, e), 0.5);
        (cdf, e * 0.398_942_3)
    }

    #[inline(always)]
    fn exp_nonpos_normal<const FMA: bool>(self) -> f32 {
        exp_normal_range::<FMA>(self)
    }

    /// `e^-|x|` with one power-of-two scale (`exp_normal_range`): below `2^-126` it is
    /// 0, so `σ(x)` for `x < -87.3` is 0 where the two-scale exponential gave a subnormal
    /// (PyTorch's `1 / (1 + e^-x)` is 0 there too from `x < -88.7`, where `e^-x`
    /// overflows); everywhere else the same arithmetic.
    #[inline(always)]
    fn sigmoid_fma<const FMA: bool>(self) -> f32 {
        let e = exp_normal_range::<FMA>(-self.abs());
        let r = 1.0 / (1.0 + e);
        if self >= 0.0 { r } else { e * r }
    }

    /// The scheme of [`Real::exp_vec`] for `x <= 0`: below `ln 2^-150` the result is 0;
    /// NaN stays NaN (every step propagates it). Within 2 ulp of `f32::exp`, with or without
    /// FMA (tested).
    #[inline(always)]
    fn exp_nonpos<const FMA: bool>(self) -> f32 {
        const ROUND: f32 = 12_582_912.0;
        const LO: f32 = -103.972_08;
        let (y, n) = exp_reduced::<FMA>(if self < LO { LO } else { self });
        // 2^n as 2^h * 2^(n-h) (n down to -150), from exponent bits as in `exp_vec`.
        let h = madd::<FMA>(n, 0.5, ROUND) - ROUND;
        let v = y * pow2(h) * pow2(n - h);
        if self < LO { 0.0 } else { v }
    }

    #[inline(always)]
    fn tanh_fma<const FMA: bool>(self) -> f32 {
        let a = self.abs();
        // |x| < 0.3: x (1 - x^2/3 + 2x^4/15 - ...), through x^11; the first omitted term
        // is below 3e-9 relative.
        let x2 = self * self;
        let mut p = -1_382.0f32 / 155_925.0;
        p = madd::<FMA>(p, x2, 62.0 / 2_835.0);
        p = madd::<FMA>(p, x2, -17.0 / 315.0);
        p = madd::<FMA>(p, x2, 2.0 / 15.0);
        p = madd::<FMA>(p, x2, -1.0 / 3.0);
        // (a product, not `x + x * ..`, so that -0 stays -0)
        let small = self * madd::<FMA>(x2, p, 1.0);
        // |x| >= 0.3: e <= 0.55, so 1 - e keeps its precision; e^-2|x| never overflows,
        // and below 2^-126 it is 0 (one power-of-two scale: the quotient is 1 either way).
        let e = exp_normal_range::<FMA>(-2.0 * a);
        let large = (1.0 - e) / (1.0 + e);
        let large = if self < 0.0 { -large } else { large };
        // NaN fails both comparisons and reaches `large`, which is NaN.
        if a < 0.3 { small } else { large }
    }

    /// Cephes' `expf` scheme: `x = n ln2 + r` with `|r| <= ln2 / 2`, a degree-6 polynomial
    /// for `e^r`, and `2^n` built from exponent bits. Only arithmetic, selects and
    /// float/int conversions, so LLVM vectorises loops that call it (`f32::exp` is a libm
    /// call that does not vectorise).
    #[inline(always)]
    fn exp_vec(self) -> f32 {
        const LOG2E: f32 = std::f32::consts::LOG2_E;
        const LN2_HI: f32 = 0.693_359_4;
        const LN2_LO: f32 = -2.121_944_4e-4;
        // Round to nearest by adding and subtracting 1.5 * 2^23 (no SSE4.1 `roundps` needed).
        const ROUND: f32 = 12_582_912.0;
        const HI: f32 = 88.722_84;
        const LO: f32 = -103.972_08;
        // Plain selects (not `clamp`/`max`, whose NaN rules cost extra instructions);
        // NaN passes through and is handled at the end.
        #[allow(clippy::manual_clamp)]
        let x = if self < LO {
            LO
        } else if self > HI {
            HI
        } else {
            self
        };
        let n = (x * LOG2E + ROUND) - ROUND;
        let r = x - n * LN2_HI - n * LN2_LO;
        let mut p = 1.987_569_1e-4f32;
        p = p * r + 1.398_199_9e-3;
        p = p * r + 8.333_452e-3;
        p = p * r + 4.166_579_6e-2;
        p = p * r + 1.666_666_5e-1;
        p = p * r + 0.5;
        let y = p * r * r + r + 1.0;
        // 2^n as two factors 2^h * 2^(n-h), so n = 128 and n = -150 stay representable.
        // Each 2^k comes from float bits: k + 127 + 2^23 holds k + 127 in its mantissa,
        // and shifting that into the exponent field gives 2^k (no float-to-int cast,
        // whose saturation rules would not vectorise).
        let h = (n * 0.5 + ROUND) - ROUND;
        let scale = |k: f32| f32::from_bits((k + (127.0 + 8_388_608.0)).to_bits() << 23);
        let v = y * scale(h) * scale(n - h);
        if self > HI {
            f32::INFINITY
        } else if self < LO {
            0.0
        } else if self.is_nan() {
            self
        } else {
            v
        }
    }
}

impl Real for f64 {
    fn erf(self) -> Self {
        libm::erf(self)
    }

    #[inline(always)]
    fn exp_vec(self) -> f64 {
        self.exp()
    }
}

#[cfg(test)]
mod tests;

/// A floating-point element type. Kernels compute in [`NumElement::Acc`], which is
/// f32 for the half types (PyTorch's "f32 accumulation").
pub trait FloatElement: NumElement<Acc: Real> + num_traits::Float {}

impl FloatElement for f32 {}
impl FloatElement for f64 {}
impl FloatElement for f16 {}
impl FloatElement for bf16 {}

/// f32 and f64: the float elements that accumulate in themselves (`Acc = Self`), for
/// kernels that compute in the element type directly (the half types go through
/// [`FloatElement`]'s f32 accumulation instead).
pub trait WideFloat: FloatElement + NumElement<Acc = Self> {}

impl WideFloat for f32 {}
impl WideFloat for f64 {}

macro_rules! element {
    ($t:ty, $variant:ident, $to:expr, $from:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                #[allow(clippy::redundant_closure_call)]
                ($to)(self)
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                #[allow(clippy::redundant_closure_call)]
                ($from)(v)
            }
            fn slice(storage: &CpuStorage) -> Option<&[Self]> {
                match storage {
                    CpuStorage::$variant(v) => Some(&v[..]),
                    _ => None,
                }
            }
            fn slice_mut(storage: &mut CpuStorage) -> Option<&mut [Self]> {
                match storage {
                    CpuStorage::$variant(v) => Some(&mut v[..]),
                    _ => None,
                }
            }
            fn into_storage(v: HostBuffer<Self>) -> CpuStorage {
                CpuStorage::$variant(v)
            }
        }
    };
}

element!(f32, F32, |x: f32| x as f64, |v: f64| v as f32);
element!(f64, F64, |x: f64| x, |v: f64| v);
element!(f16, F16, |x: f16| x.to_f64(), f16::from_f64);
element!(bf16, BF16, |x: bf16| x.to_f64(), bf16::from_f64);
element!(i64, I64, |x: i64| x as f64, |v: f64| v as i64);
element!(u8, U8, |x: u8| x as f64, |v: f64| v as u8);
element!(bool, Bool, |x: bool| if x { 1.0 } else { 0.0 }, |v: f64| v
    != 0.0);

macro_rules! num_element {
    ($t:ty, $zero:expr, $one:expr, $min:expr, $max:expr, $acc:ty, $to:expr, $from:expr) => {
        impl NumElement for $t {
            const ZERO: Self = $zero;
            const ONE: Self = $one;
            const MIN_VALUE: Self = $min;
            const MAX_VALUE: Self = $max;
            type Acc = $acc;
            #[inline(always)]
            fn to_acc(self) -> $acc {
                #[allow(clippy::redundant_closure_call)]
                ($to)(self)
            }
            #[inline(always)]
            fn from_acc(v: $acc) -> Self {
                #[allow(clippy::redundant_closure_call)]
                ($from)(v)
            }
        }
    };
}

num_element!(
    f32,
    0.0,
    1.0,
    f32::NEG_INFINITY,
    f32::INFINITY,
    f32,
    |x| x,
    |v| v
);
num_element!(
    f64,
    0.0,
    1.0,
    f64::NEG_INFINITY,
    f64::INFINITY,
    f64,
    |x| x,
    |v| v
);
num_element!(
    f16,
    f16::ZERO,
    f16::ONE,
    f16::NEG_INFINITY,
    f16::INFINITY,
    f32,
    |x: f16| x.to_f32(),
    f16::from_f32
);
num_element!(
    bf16,
    bf16::ZERO,
    bf16::ONE,
    bf16::NEG_INFINITY,
    bf16::INFINITY,
    f32,
    |x: bf16| x.to_f32(),
    bf16::from_f32
);
num_element!(i64, 0, 1, i64::MIN, i64::MAX, i64, |x| x, |v| v);
num_element!(u8, 0, 1, u8::MIN, u8::MAX, u8, |x| x, |v| v);
