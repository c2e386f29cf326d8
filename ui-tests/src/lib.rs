//! The compile errors of `network!` and `#[derive(Module)]` as users see them
//! (`tests/ui`: one mistake per case and the exact message). This crate has no code of its
//! own; it keeps trybuild out of every build of `ferrograd` itself.
#![warn(missing_docs)]
