//! `ImageFolder`: one class per sub-folder of image files (PNG, JPEG).

use super::super::{DataError, Dataset};
use crate::Tensor;
use std::path::{Path, PathBuf};

const EXTENSIONS: [&str; 4] = ["png", "jpg", "jpeg", "jpe"];

/// Images in class sub-folders (`torchvision.datasets.ImageFolder`): `root/<class>/<file>`,
/// classes sorted by name and numbered from 0, files sorted within each. A sample is the
/// image as `[H, W, 3]` u8 (converted to RGB whatever its mode, as torchvision's loader)
/// and its class index; decode with the `image` crate under size limits, so a corrupt or
/// hostile file is an `Err` naming it.
///
/// ```
/// use ferrograd_runtime::data::datasets::ImageFolder;
/// let root = std::env::temp_dir().join("ferrograd-doc-folder");
/// std::fs::create_dir_all(root.join("cat")).unwrap();
/// image::RgbImage::new(4, 3).save(root.join("cat/a.png")).unwrap();
/// let d = ImageFolder::new(&root).unwrap();
/// use ferrograd_runtime::data::Dataset;
/// let (img, class) = d.get(0).unwrap();
/// assert_eq!((img.shape(), class, d.classes()), (&[3, 4, 3][..], 0, &["cat".to_string()][..]));
/// ```
#[derive(Clone, Debug)]
pub struct ImageFolder {
    classes: Vec<String>,
    samples: Vec<(PathBuf, i64)>,
}

impl ImageFolder {
    /// Lists `root`'s class folders and their image files.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, DataError> {
        let root = root.as_ref();
        if !root.is_dir() {
            return Err(DataError::NotFound {
                name: "image folder".into(),
                path: root.to_path_buf(),
            });
        }
        let mut classes: Vec<String> = std::fs::read_dir(root)
            .map_err(|e| DataError::io(root, e))?
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        classes.sort();
        let mut samples = Vec::new();
        for (c, class) in classes.iter().enumerate() {
            let dir = root.join(class);
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map_err(|e| DataError::io(&dir, e))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
                })
                .collect();
            files.sort();
            samples.extend(files.into_iter().map(|p| (p, c as i64)));
        }
        if samples.is_empty() {
            return Err(DataError::format(
                root,
                format!(
                    "found no image files ({}) in class folders",
                    EXTENSIONS.join(", ")
                ),
            ));
        }
        Ok(ImageFolder { classes, samples })
    }

    /// The class names, in index order.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// Every `(file, class index)`.
    ///
    /// ```
    /// use ferrograd_runtime::data::datasets::ImageFolder;
    /// let root = std::env::temp_dir().join("ferrograd-doc-folder-samples");
    /// std::fs::create_dir_all(root.join("dog")).unwrap();
    /// image::RgbImage::new(2, 2).save(root.join("dog/x.png")).unwrap();
    /// assert_eq!(ImageFolder::new(&root).unwrap().samples()[0].1, 0);
    /// ```
    pub fn samples(&self) -> &[(PathBuf, i64)] {
        &self.samples
    }
}

/// Decodes an image file to `[H, W, 3]` u8 RGB, refusing dimensions above 16,384 pixels
/// a side or decodes needing more than 512 MiB.
///
/// ```
/// use ferrograd_runtime::data::datasets::read_image;
/// let path = std::env::temp_dir().join("ferrograd-doc-image.png");
/// image::GrayImage::new(5, 2).save(&path).unwrap();
/// assert_eq!(read_image(&path).unwrap().shape(), &[2, 5, 3]);
/// std::fs::write(&path, b"not an image").unwrap();
/// assert!(read_image(&path).unwrap_err().to_string().contains("ferrograd-doc-image.png"));
/// ```
pub fn read_image(path: &Path) -> Result<Tensor, DataError> {
    let mut reader = image::ImageReader::open(path)
        .map_err(|e| DataError::io(path, e))?
        .with_guessed_format()
        .map_err(|e| DataError::io(path, e))?;
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(16_384);
    limits.max_image_height = Some(16_384);
    limits.max_alloc = Some(512 << 20);
    reader.limits(limits);
    let img = reader
        .decode()
        .map_err(|e| DataError::format(path, format!("cannot decode the image: {e}")))?
        .into_rgb8();
    let (w, h) = (img.width() as usize, img.height() as usize);
    Ok(Tensor::from_vec(img.into_raw(), &[h, w, 3]))
}

impl Dataset for ImageFolder {
    type Item = (Tensor, i64);
    fn len(&self) -> usize {
        self.samples.len()
    }
    fn get(&self, index: usize) -> Result<(Tensor, i64), DataError> {
        let (path, class) = self.samples.get(index).ok_or(DataError::IndexOutOfRange {
            index,
            len: self.samples.len(),
        })?;
        Ok((read_image(path)?, *class))
    }
}
