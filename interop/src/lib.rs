//! Tests of ferrograd against other implementations (`tests/`): its ONNX exports run by
//! tract at several batch sizes and lengths. This crate has no code of its own; it keeps
//! tract out of every build of `ferrograd` itself (an example, a user's crate).
#![warn(missing_docs)]
