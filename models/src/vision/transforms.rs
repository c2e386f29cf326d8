//! The inference preprocessing of torchvision's pretrained weights
//! (`ResNet50_Weights.IMAGENET1K_V1.transforms()` and its siblings, the class
//! `torchvision.transforms._presets.ImageClassification`).

use ferrograd::data::transforms::{CenterCrop, InterpolationMode, Normalize, Resize, Transform};
use ferrograd::{DType, Tensor};

/// ImageNet's channel means (RGB), as torchvision's weights use them.
pub const IMAGENET_MEAN: [f64; 3] = [0.485, 0.456, 0.406];
/// ImageNet's channel standard deviations (RGB).
pub const IMAGENET_STD: [f64; 3] = [0.229, 0.224, 0.225];

/// torchvision's `ImageClassification` preset: the shorter side resized to
/// `resize_size` (bilinear, antialiased), the central `crop_size` square cut out,
/// values scaled to `[0, 1]` and normalised with ImageNet's statistics.
///
/// Applied to an `[H, W, C]` u8 image (what
/// [`read_image`](ferrograd::data::datasets::read_image) returns) it follows
/// torchvision's tensor path: resizing and cropping in u8, then the conversion to
/// float, so it equals `weights.transforms()(torchvision.io.read_image(path))` within
/// one step of 255 before normalisation. A `[C, H, W]` float image in `[0, 1]` is
/// resized in float.
///
/// ```
/// use ferrograd::prelude::*;
/// use ferrograd::data::transforms::Transform;
/// use ferrograd_models::vision::transforms::ImageClassification;
/// let image = Tensor::full(&[300, 400, 3], 128.0, DType::U8, &Device::Cpu);
/// let x = ImageClassification::new(224, 256).apply(image);
/// assert_eq!(x.shape(), &[3, 224, 224]);
/// assert!((x.select(0, 0).mean_all().item::<f32>() - (128.0 / 255.0 - 0.485) / 0.229).abs() < 1e-5);
/// ```
#[derive(Clone, Debug)]
pub struct ImageClassification {
    /// The side of the square crop (224 for most weights).
    pub crop_size: usize,
    /// The shorter side after resizing (256; 232 for `ResNet50_Weights.IMAGENET1K_V2`).
    pub resize_size: usize,
    /// Channel means.
    pub mean: Vec<f64>,
    /// Channel standard deviations.
    pub std: Vec<f64>,
    /// Resampling mode (bilinear).
    pub interpolation: InterpolationMode,
    /// Antialiasing when shrinking (on).
    pub antialias: bool,
}

impl ImageClassification {
    /// Crop `crop_size`, resize `resize_size`, ImageNet statistics, bilinear with
    /// antialias (torchvision's defaults).
    pub fn new(crop_size: usize, resize_size: usize) -> Self {
        ImageClassification {
            crop_size,
            resize_size,
            mean: IMAGENET_MEAN.to_vec(),
            std: IMAGENET_STD.to_vec(),
            interpolation: InterpolationMode::Bilinear,
            antialias: true,
        }
    }

    /// The preset of torchvision's ImageNet weights for ResNet, MobileNetV2 and ViT-B/16
    /// (`IMAGENET1K_V1`): crop 224, resize 256.
    pub fn imagenet() -> Self {
        Self::new(224, 256)
    }
}

impl Transform for ImageClassification {
    /// # Panics
    /// When `image` is neither `[H, W, C]` u8 nor `[C, H, W]` float.
    #[track_caller]
    fn apply(&self, image: Tensor) -> Tensor {
        let chw = if image.dtype() == DType::U8 {
            assert!(
                image.dim() == 3 || image.dim() == 2,
                "ImageClassification: expected an [H, W, C] or [H, W] u8 image, got shape {:?}",
                image.shape()
            );
            let hwc = if image.dim() == 2 {
                image.unsqueeze(2)
            } else {
                image
            };
            hwc.permute(&[2, 0, 1]).contiguous()
        } else {
            assert!(
                image.dim() == 3,
                "ImageClassification: expected a [C, H, W] float image, got shape {:?}",
                image.shape()
            );
            image
        };
        let resized = Resize::shorter_side(self.resize_size)
            .interpolation(self.interpolation)
            .antialias(self.antialias)
            .apply(chw);
        let cropped = CenterCrop::new([self.crop_size, self.crop_size]).apply(resized);
        let x = if cropped.dtype() == DType::U8 {
            cropped.to_dtype(DType::F32).div_scalar(255.0)
        } else {
            cropped
        };
        Normalize::new(&self.mean, &self.std).apply(x)
    }
}
