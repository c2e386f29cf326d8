//! `ImageFolder`: one class per sub-folder of image files, as torchvision lists them.

mod jpeg;

use super::super::{DataError, Dataset};
use crate::Tensor;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The file name endings torchvision's `ImageFolder` takes (`IMG_EXTENSIONS`), matched
/// case-insensitively.
pub const IMG_EXTENSIONS: [&str; 9] = [
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp",
];

/// How an [`ImageFolder`] treats its class folders.
///
/// ```
/// use ferrograd_runtime::data::datasets::ImageFolderOptions;
/// assert!(!ImageFolderOptions::default().allow_empty);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ImageFolderOptions {
    /// Accept a class folder with no image in it (torchvision's `allow_empty`); by
    /// default such a folder is an error naming the class.
    pub allow_empty: bool,
}

/// Images in class sub-folders (`torchvision.datasets.ImageFolder`): `root/<class>/…`,
/// classes sorted by name and numbered from 0. Each class folder is walked with its
/// sub-folders (symbolic links followed, each folder once), and its files whose names end
/// in one of [`IMG_EXTENSIONS`] are the samples, in torchvision's order: folders by path,
/// files by name within each. A sample is the image as `[H, W, 3]` u8 (converted to RGB
/// whatever its mode, as torchvision's loader) and its class index, decoded by
/// [`read_image`].
///
/// ```
/// use ferrograd_runtime::data::datasets::ImageFolder;
/// let root = std::env::temp_dir().join("ferrograd-doc-folder");
/// std::fs::create_dir_all(root.join("cat/indoor")).unwrap();
/// image::RgbImage::new(4, 3).save(root.join("cat/a.png")).unwrap();
/// image::RgbImage::new(4, 3).save(root.join("cat/indoor/b.png")).unwrap();
/// let d = ImageFolder::new(&root).unwrap();
/// use ferrograd_runtime::data::Dataset;
/// let (img, class) = d.get(1).unwrap();
/// assert_eq!((img.shape(), class, d.classes()), (&[3, 4, 3][..], 0, &["cat".to_string()][..]));
/// assert!(d.samples()[1].0.ends_with("cat/indoor/b.png"));
/// ```
#[derive(Clone, Debug)]
pub struct ImageFolder {
    classes: Vec<String>,
    samples: Vec<(PathBuf, i64)>,
}

impl ImageFolder {
    /// Lists `root`'s class folders and their image files; a class folder with no image
    /// is an error naming it.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, DataError> {
        Self::with_options(root, ImageFolderOptions::default())
    }

    /// [`ImageFolder::new`] with `options`.
    ///
    /// ```
    /// use ferrograd_runtime::data::datasets::{ImageFolder, ImageFolderOptions};
    /// let root = std::env::temp_dir().join("ferrograd-doc-folder-empty");
    /// std::fs::create_dir_all(root.join("empty")).unwrap();
    /// std::fs::create_dir_all(root.join("full")).unwrap();
    /// image::RgbImage::new(2, 2).save(root.join("full/x.png")).unwrap();
    /// let e = ImageFolder::new(&root).unwrap_err().to_string();
    /// assert!(e.contains("no valid file for the classes empty"), "{e}");
    /// let options = ImageFolderOptions { allow_empty: true };
    /// let d = ImageFolder::with_options(&root, options).unwrap();
    /// assert_eq!((d.classes().len(), d.samples()[0].1), (2, 1));
    /// ```
    pub fn with_options(
        root: impl AsRef<Path>,
        options: ImageFolderOptions,
    ) -> Result<Self, DataError> {
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
        if classes.is_empty() {
            return Err(DataError::format(root, "found no class folder in it"));
        }
        let mut samples = Vec::new();
        let mut empty = Vec::new();
        for (c, class) in classes.iter().enumerate() {
            let files = image_files(&root.join(class))?;
            if files.is_empty() {
                empty.push(class.as_str());
            }
            samples.extend(files.into_iter().map(|p| (p, c as i64)));
        }
        if !empty.is_empty() && !options.allow_empty {
            return Err(DataError::format(
                root,
                format!(
                    "found no valid file for the classes {}; supported extensions are {}",
                    empty.join(", "),
                    IMG_EXTENSIONS.join(", ")
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

/// Whether `name` ends in one of [`IMG_EXTENSIONS`], ignoring case.
fn has_image_extension(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy().to_lowercase();
    IMG_EXTENSIONS.iter().any(|ext| name.ends_with(ext))
}

/// The image files under `dir` in torchvision's order (`sorted(os.walk(dir,
/// followlinks=True))`, then sorted names): folders by their path, files by name. A
/// folder reached twice through links is listed once.
fn image_files(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let mut folders: Vec<(PathBuf, Vec<PathBuf>)> = Vec::new();
    let mut seen = HashSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let real = std::fs::canonicalize(&folder).map_err(|e| DataError::io(&folder, e))?;
        if !seen.insert(real) {
            continue;
        }
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&folder).map_err(|e| DataError::io(&folder, e))? {
            let path = entry.map_err(|e| DataError::io(&folder, e))?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(has_image_extension) {
                files.push(path);
            }
        }
        files.sort();
        folders.push((folder, files));
    }
    // Python compares the walked paths as strings: order by the path's bytes, not by
    // its components (`a/b-c` comes before `a/b/c` as `-` sorts before `/`).
    folders.sort_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
    Ok(folders.into_iter().flat_map(|(_, files)| files).collect())
}

/// Decodes an image file to `[H, W, 3]` u8 RGB, as torchvision's loader (`Image.open(f)
/// .convert("RGB")`) does, for the formats of [`IMG_EXTENSIONS`]; refuses dimensions
/// above 16,384 pixels a side, decodes needing more than 512 MiB, and, as Pillow does, a
/// JPEG that ends before its end-of-image marker ("image file is truncated").
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
    const MAX_BYTES: u64 = 512 << 20;
    let size = std::fs::metadata(path)
        .map_err(|e| DataError::io(path, e))?
        .len();
    if size > MAX_BYTES {
        return Err(DataError::format(
            path,
            format!("{size} bytes is larger than the {MAX_BYTES}-byte limit for an image file"),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    decode_image_from(&bytes, path)
}

/// [`read_image`] on bytes already in memory (an upload, a request body): the same
/// formats, limits and truncation check; errors name the image as `<bytes>`.
///
/// ```
/// use ferrograd_runtime::data::datasets::decode_image;
/// let mut png = Vec::new();
/// image::GrayImage::new(5, 2).write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).unwrap();
/// assert_eq!(decode_image(&png).unwrap().shape(), &[2, 5, 3]);
/// assert!(decode_image(b"not an image").is_err());
/// ```
pub fn decode_image(bytes: &[u8]) -> Result<Tensor, DataError> {
    const MAX_BYTES: usize = 512 << 20;
    let name = Path::new("<bytes>");
    if bytes.len() > MAX_BYTES {
        return Err(DataError::format(
            name,
            format!(
                "{} bytes is larger than the {MAX_BYTES}-byte limit for an image",
                bytes.len()
            ),
        ));
    }
    decode_image_from(bytes, name)
}

fn decode_image_from(bytes: &[u8], path: &Path) -> Result<Tensor, DataError> {
    const MAX_BYTES: u64 = 512 << 20;
    let mut reader = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| DataError::io(path, e))?;
    if reader.format() == Some(image::ImageFormat::Jpeg) {
        jpeg::check_complete(bytes)
            .map_err(|why| DataError::format(path, format!("image file is truncated: {why}")))?;
    }
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(16_384);
    limits.max_image_height = Some(16_384);
    limits.max_alloc = Some(MAX_BYTES);
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
