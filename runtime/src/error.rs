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
    /// A kernel met an index (or class target) out of bounds in work queued earlier on a
    /// device. Kernels run after the op that queued them returned, so, as CUDA's own errors,
    /// this surfaces when the host next waits for the device (a read such as `to_vec` or
    /// `item`, `to_device`, `cuda::synchronize`); with `CUDA_LAUNCH_BLOCKING=1` the op itself
    /// waits and panics. The kernel skipped the bad index: nothing was read out of bounds.
    #[error(
        "{message} (found on {device} by work queued earlier; device errors surface when the host next waits for the device, set CUDA_LAUNCH_BLOCKING=1 to stop at the op)"
    )]
    IndexOutOfBounds {
        /// The device.
        device: crate::Device,
        /// What the op says about the index, as it would on the CPU.
        message: String,
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
