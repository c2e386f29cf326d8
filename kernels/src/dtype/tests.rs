use super::Real;

#[test]
fn exp_vec_is_within_two_ulp_of_std() {
    let mut x = -103.0f32;
    while x < 88.7 {
        let (got, want) = (x.exp_vec(), x.exp());
        let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
        assert!(
            ulp <= 2 || (want < f32::MIN_POSITIVE && (got - want).abs() <= 2.0 * 1.4e-45),
            "exp({x}) = {got}, want {want}"
        );
        x += 0.0137;
    }
    assert_eq!(f32::NEG_INFINITY.exp_vec(), 0.0);
    assert_eq!(f32::INFINITY.exp_vec(), f32::INFINITY);
    assert_eq!(100.0f32.exp_vec(), f32::INFINITY);
    assert!(f32::NAN.exp_vec().is_nan());
    assert_eq!(0.0f32.exp_vec(), 1.0);
}

#[test]
fn tanh_vec_is_within_four_ulp_of_libm() {
    let mut x = -20.0f32;
    while x < 20.0 {
        // Without and with fused multiply-adds (a library call here, exact all the
        // same).
        for got in [x.tanh_vec(), x.tanh_fma::<true>()] {
            let want = x.tanh();
            let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
            assert!(ulp <= 4, "tanh({x}) = {got}, want {want} ({ulp} ulp)");
        }
        x += 0.000_913;
    }
    for x in [
        0.0f32,
        -0.0,
        1e-30,
        -1e-20,
        0.299_999_98,
        0.3,
        100.0,
        -100.0,
    ] {
        let (got, want) = (x.tanh_vec(), x.tanh());
        assert!(
            (got.to_bits() as i64 - want.to_bits() as i64).abs() <= 4,
            "tanh({x}) = {got}, want {want}"
        );
    }
    assert_eq!(f32::INFINITY.tanh_vec(), 1.0);
    assert_eq!(f32::NEG_INFINITY.tanh_vec(), -1.0);
    assert!(f32::NAN.tanh_vec().is_nan());
    assert_eq!((-0.0f32).tanh_vec().to_bits(), (-0.0f32).to_bits());
    assert_eq!((-0.0f32).tanh_fma::<true>().to_bits(), (-0.0f32).to_bits());
    assert!(f32::NAN.tanh_fma::<true>().is_nan());
    assert_eq!(0.7f64.tanh_vec(), 0.7f64.tanh());
}

#[test]
fn erf_vec_is_within_1e_6_of_libm() {
    let mut x = -6.0f32;
    while x < 6.0 {
        let (got, want) = (x.erf_vec(), libm::erf(x as f64));
        assert!(
            (got as f64 - want).abs() < 1e-6,
            "erf({x}) = {got}, want {want}"
        );
        x += 0.001_37;
    }
    assert!(0.0f32.erf_vec().abs() < 1e-7);
    assert_eq!(f32::INFINITY.erf_vec(), 1.0);
    assert_eq!(f32::NEG_INFINITY.erf_vec(), -1.0);
    assert!(f32::NAN.erf_vec().is_nan());
    assert_eq!(0.5f64.erf_vec(), libm::erf(0.5));
}

#[test]
fn exp_nonpos_is_within_two_ulp_of_std_with_and_without_fma() {
    fn check<const FMA: bool>() {
        let mut x = -110.0f32;
        while x <= 0.0 {
            let (got, want) = (x.exp_nonpos::<FMA>(), x.exp());
            let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
            assert!(
                ulp <= 2 || (want < f32::MIN_POSITIVE && (got - want).abs() <= 2.0 * 1.4e-45),
                "exp({x}) = {got}, want {want} (fma {FMA})"
            );
            x += 0.00731;
        }
        assert_eq!(0.0f32.exp_nonpos::<FMA>(), 1.0);
        assert_eq!((-0.0f32).exp_nonpos::<FMA>(), 1.0);
        assert_eq!(f32::NEG_INFINITY.exp_nonpos::<FMA>(), 0.0);
        assert!(f32::NAN.exp_nonpos::<FMA>().is_nan());
    }
    check::<false>();
    check::<true>();
    assert_eq!((-1.5f64).exp_nonpos::<true>(), (-1.5f64).exp());
}

/// Over `x` from -110 to `hi` in steps of 0.00731: `got(x)` within `ulps` of `want(x)`
/// wherever that is a normal number, 0 where it is below the smallest normal one,
/// and never a subnormal.
fn check_flushed_sweep(
    what: &str,
    hi: f32,
    ulps: i64,
    got: impl Fn(f32) -> f32,
    want: impl Fn(f32) -> f32,
) {
    let mut x = -110.0f32;
    while x <= hi {
        let (got, want) = (got(x), want(x));
        let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
        assert!(
            ulp <= ulps || (want < 1.2e-38 && got == 0.0),
            "{what}({x}) = {got}, want {want}"
        );
        assert!(
            got == 0.0 || got >= f32::MIN_POSITIVE,
            "subnormal {what}({x}) = {got}"
        );
        x += 0.00731;
    }
}

/// `exp_nonpos_normal` (softmax's exponential in attention): within 2 ulp of `std`
/// down to the smallest normal result, 0 below it (never a subnormal), exact at 0
/// and -inf, NaN through; f64 as `exp_nonpos`.
#[test]
fn exp_nonpos_normal_is_within_two_ulp_and_flushes_below_normal() {
    fn check<const FMA: bool>() {
        let what = format!("exp (fma {FMA})");
        check_flushed_sweep(&what, 0.0, 2, |x| x.exp_nonpos_normal::<FMA>(), f32::exp);
        assert_eq!(0.0f32.exp_nonpos_normal::<FMA>(), 1.0);
        assert_eq!(f32::NEG_INFINITY.exp_nonpos_normal::<FMA>(), 0.0);
        assert_eq!((-100.0f32).exp_nonpos_normal::<FMA>(), 0.0);
        assert!(f32::NAN.exp_nonpos_normal::<FMA>().is_nan());
    }
    check::<false>();
    check::<true>();
    assert_eq!((-1.5f64).exp_nonpos_normal::<true>(), (-1.5f64).exp());
}

/// The logistic in f32, with and without FMA, against f64 over [-110, 110]: within 4
/// ulp of the rounded exact value wherever that is a normal number, 0 where it is
/// below the smallest normal one (never a subnormal), exact 0.5 at 0, 1 and 0 at the
/// infinities, NaN through.
#[test]
fn sigmoid_fma_is_within_four_ulp_and_flushes_below_normal() {
    fn check<const FMA: bool>() {
        check_flushed_sweep(
            &format!("sigmoid (fma {FMA})"),
            110.0,
            4,
            |x| x.sigmoid_fma::<FMA>(),
            |x| (1.0 / (1.0 + (-f64::from(x)).exp())) as f32,
        );
        assert_eq!(0.0f32.sigmoid_fma::<FMA>(), 0.5);
        assert_eq!(f32::INFINITY.sigmoid_fma::<FMA>(), 1.0);
        assert_eq!(f32::NEG_INFINITY.sigmoid_fma::<FMA>(), 0.0);
        assert!(f32::NAN.sigmoid_fma::<FMA>().is_nan());
    }
    check::<false>();
    check::<true>();
}

/// GELU's normal CDF and density in f32, with and without FMA, against f64 libm
/// over [-12, 12] (the CDF within 1e-6 absolute, as `erf_vec`; the density within 4
/// ulp relative plus the f32 rounding of its argument); infinities and NaN.
#[test]
fn normal_cdf_pdf_matches_libm() {
    fn check<const FMA: bool>() {
        for i in -120_000..=120_000 {
            let x = i as f32 * 1e-4;
            let (cdf, pdf) = x.normal_cdf_pdf::<FMA>();
            let xd = x as f64;
            let want_cdf = 0.5 * (1.0 + libm::erf(xd * std::f64::consts::FRAC_1_SQRT_2));
            let want_pdf = (-0.5 * xd * xd).exp() * 0.398_942_280_401_432_7;
            assert!(
                (cdf as f64 - want_cdf).abs() < 1e-6,
                "cdf({x}) {cdf} vs {want_cdf}"
            );
            assert!(
                (pdf as f64 - want_pdf).abs() <= 5e-7 * want_pdf * (1.0 + xd * xd) + 1e-38,
                "pdf({x}) {pdf} vs {want_pdf}"
            );
        }
        assert_eq!(f32::INFINITY.normal_cdf_pdf::<FMA>(), (1.0, 0.0));
        assert_eq!(f32::NEG_INFINITY.normal_cdf_pdf::<FMA>(), (0.0, 0.0));
        let (c, p) = f32::NAN.normal_cdf_pdf::<FMA>();
        assert!(c.is_nan() && p.is_nan());
    }
    check::<false>();
    check::<true>();
    let (c, p) = 0.5f64.normal_cdf_pdf::<true>();
    assert_eq!(
        c,
        0.5 * (1.0 + libm::erf(0.5 * std::f64::consts::FRAC_1_SQRT_2))
    );
    assert_eq!(p, (-0.125f64).exp() * 0.398_942_280_401_432_7);
}

/// GELU's forward CDF in f32, with and without FMA, against f64 libm over [-12, 12]
/// (within 4e-7 absolute, never outside [0, 1]); infinities and NaN; f64 is libm's.
#[test]
fn normal_cdf_matches_libm() {
    fn check<const FMA: bool>() {
        for i in -120_000..=120_000 {
            let x = i as f32 * 1e-4;
            let cdf = x.normal_cdf::<FMA>();
            let want = 0.5 * (1.0 + libm::erf(x as f64 * std::f64::consts::FRAC_1_SQRT_2));
            assert!(
                (cdf as f64 - want).abs() < 4e-7 && (0.0..=1.0).contains(&cdf),
                "cdf({x}) {cdf} vs {want} (fma {FMA})"
            );
        }
        assert_eq!(0.0f32.normal_cdf::<FMA>(), 0.5);
        assert_eq!(f32::INFINITY.normal_cdf::<FMA>(), 1.0);
        assert_eq!(f32::NEG_INFINITY.normal_cdf::<FMA>(), 0.0);
        assert!(f32::NAN.normal_cdf::<FMA>().is_nan());
    }
    check::<false>();
    check::<true>();
    assert_eq!(
        0.5f64.normal_cdf::<true>(),
        0.5 * (1.0 + libm::erf(0.5 * std::f64::consts::FRAC_1_SQRT_2))
    );
}
