//! Typed errors for everything that touches the outside world (devices, files).

/// What went wrong outside the program: a missing device or driver, bad input data.
///
/// Shape, dtype and device mistakes in tensor ops are programming errors and panic
/// instead, as PyTorch raises; this type is for failures a program should handle.
///
/// ```
/// use ferrograd_runtime::{Device, Error, Tensor};
/// let t = Tensor::zeros(&[2], ferrograd_runtime::DType::F32, &Device::Cpu);
/// # #[cfg(not(feature = "cuda"))]
/// assert!(matches!(t.to_device(&Device::Cuda(0)), Err(Error::CudaNotCompiled)));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The crate was built without the `cuda` feature.
    #[error(
        "ferrograd was built without CUDA support: enable the `cuda` feature to use Device::Cuda"
    )]
    CudaNotCompiled,
    /// A CUDA library (driver, NVRTC, cuBLAS) could not be loaded.
    #[error("CUDA is unavailable: {library} could not be loaded (is an NVIDIA driver installed?)")]
    CudaLibraryMissing {
        /// The library that was looked for.
        library: &'static str,
    },
    /// The requested CUDA device does not exist or failed to initialise.
    #[error("CUDA device {ordinal} is unavailable: {reason}")]
    CudaDevice {
        /// The device index asked for.
        ordinal: usize,
        /// The driver's explanation.
        reason: String,
    },
    /// The device's memory is exhausted, even after the allocator's cache was emptied.
    #[error("{device}: {source}")]
    OutOfMemory {
        /// The device.
        device: crate::Device,
        /// Sizes and the driver's message.
        source: crate::memory::OutOfMemory,
    },
    /// This dtype cannot live on the requested device.
    #[error("{dtype} tensors are not supported on {device}")]
    UnsupportedDType {
        /// The dtype.
        dtype: crate::DType,
        /// The device.
        device: crate::Device,
    },
}

/// `Result` with ferrograd's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
