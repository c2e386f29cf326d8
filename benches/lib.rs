//! ferrograd's criterion benchmarks, one file per group beside this one
//! (`cargo bench -p ferrograd-benches --bench core_ops`). This crate has no code of its
//! own; it keeps criterion out of every build of `ferrograd` itself.
#![warn(missing_docs)]
