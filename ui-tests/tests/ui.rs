//! Compile-time errors of `network!` and `#[derive(Module)]`, as users see them: each
//! `tests/ui/NAME.rs` holds one mistake and `NAME.stderr` the exact message. The pass
//! cases are fully built and run, so errors that only a full build reports cannot hide.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
