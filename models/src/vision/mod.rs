//! torchvision's model families, with torchvision's state-dict keys, so that a state
//! dict saved from PyTorch with `safetensors.torch.save_file(model.state_dict(), path)`
//! loads as it is:
//!
//! - [`resnet`]: ResNets, `resnet18`, `resnet34`, `resnet50`, and any [`resnet::ResNetConfig`].
//! - [`mobilenet`]: MobileNetV2 (`mobilenet_v2`).
//! - [`vit`]: ViT-B/16 (`vit_b_16`) and the other Vision Transformers.
//! - [`transforms`]: ImageNet preprocessing, as of torchvision's pretrained weights.
//!
//! ```no_run
//! use ferrograd::prelude::*;
//! use ferrograd::nn::Forward;
//! use ferrograd::data::{datasets::read_image, transforms::Transform};
//! use ferrograd_models::vision::{self, resnet, transforms::ImageClassification};
//! // In Python: save_file(resnet18(weights="DEFAULT").state_dict(), "resnet18.safetensors")
//! let model = vision::from_safetensors("resnet18.safetensors", || {
//!     resnet::resnet18(1000, &Device::Cpu)
//! })?;
//! let image = read_image("cat.jpg".as_ref()).expect("an image");
//! let x = ImageClassification::imagenet().apply(image).unsqueeze(0);
//! let class = model.forward(&x).argmax(-1, false).item::<i64>();
//! # Ok::<(), ferrograd_models::ModelError>(())
//! ```

pub mod mobilenet;
pub mod resnet;
pub mod transforms;
pub mod vit;

use crate::ModelError;
use crate::hub::{self, LoadOptions};
use ferrograd::nn::Module;
use std::path::Path;

/// Builds a model with `build` (without drawing random weights), loads the state dict
/// `path` (a `.safetensors` file, or a folder holding `model.safetensors`) strictly into
/// it, and puts it in eval mode. Every parameter and buffer (BatchNorm's running
/// statistics included) must be in the file with its shape; a missing tensor or a
/// different shape is an `Err` naming the key (and both shapes).
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd::nn::Module;
/// use ferrograd_models::vision::{self, mobilenet::MobileNetV2};
/// let path = std::env::temp_dir().join("ferrograd-doc-mobilenet.safetensors");
/// let model = MobileNetV2::new(4, 0.25, &Device::Cpu);
/// ferrograd::checkpoint::save_state_dict(&model.state_dict(), &path, None).unwrap();
/// let loaded = vision::from_safetensors(&path, || MobileNetV2::new(4, 0.25, &Device::Cpu)).unwrap();
/// assert_eq!(loaded.state_dict().len(), model.state_dict().len());
/// let Err(e) = vision::from_safetensors(&path, || MobileNetV2::new(5, 0.25, &Device::Cpu)) else {
///     panic!("5 classes from a 4-class state dict");
/// };
/// assert!(e.to_string().contains("classifier.1.bias"));
/// ```
pub fn from_safetensors<M: Module>(
    path: impl AsRef<Path>,
    build: impl FnOnce() -> M,
) -> Result<M, ModelError> {
    let (model, _) = hub::build_and_load(path.as_ref(), &LoadOptions::default(), build)?;
    Ok(model)
}
