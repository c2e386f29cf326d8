//! Neural-network building blocks. [`functional`] holds the stateless ops (PyTorch's
//! `torch.nn.functional`); layer modules build on them.

pub mod functional;
