//! Where a tensor's memory lives.

use std::fmt;

/// A compute device, as `torch.device`.
///
/// ```
/// use ferrograd_runtime::Device;
/// assert_eq!(Device::Cpu.to_string(), "cpu");
/// assert_eq!(Device::Cuda(1).to_string(), "cuda:1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory; kernels run on the calling thread and its helper threads
    /// ([`set_num_threads`](crate::set_num_threads)).
    #[default]
    Cpu,
    /// The NVIDIA GPU with this ordinal (needs the `cuda` feature and a driver).
    Cuda(usize),
}

impl Device {
    /// Whether this is a CUDA device.
    ///
    /// ```
    /// assert!(ferrograd_runtime::Device::Cuda(0).is_cuda());
    /// ```
    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}
