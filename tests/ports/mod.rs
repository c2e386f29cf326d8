//! torchvision architectures written with ferrograd's `nn`, as a user porting them would:
//! derived modules with a `Forward`, joined into `Sequential`s, keys as torchvision's.

pub mod mobilenet;
pub mod resnet;
