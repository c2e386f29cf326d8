//! Procedural macros for ferrograd. `#[derive(Module)]` and `network!` land with the
//! macros issue; this crate exists now so the workspace layout is final.
