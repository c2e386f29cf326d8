//! The error of everything that reads a model folder.

use std::path::PathBuf;

/// A model folder, config, checkpoint or tokenizer that cannot be used, naming the file
/// and what is wrong (a key and both shapes for a mismatched tensor).
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A JSON file is malformed or lacks a field the model needs.
    #[error("{}: {reason}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The folder has no weights in a format read here.
    #[error("{}: no weights found: expected model.safetensors or model.safetensors.index.json{hint}", dir.display())]
    NoWeights {
        /// The folder.
        dir: PathBuf,
        /// What was found instead, if anything.
        hint: String,
    },
    /// The checkpoint could not be read (see the runtime's checkpoint errors).
    #[error(transparent)]
    Checkpoint(#[from] ferrograd::checkpoint::CheckpointError),
    /// The checkpoint lacks tensors the model has.
    #[error("{}: the checkpoint lacks {} tensor(s) of the model: {}", path.display(), keys.len(), keys.join(", "))]
    Missing {
        /// The weights file.
        path: PathBuf,
        /// The model's keys not found.
        keys: Vec<String>,
    },
    /// A tensor's shape differs between the checkpoint and the model.
    #[error("{}: tensor {key}: the checkpoint has shape {found:?}, the model expects {expected:?}", path.display())]
    Shape {
        /// The weights file.
        path: PathBuf,
        /// The model's key.
        key: String,
        /// The model's shape.
        expected: Vec<usize>,
        /// The checkpoint's shape.
        found: Vec<usize>,
    },
    /// A tokenizer file could not be loaded, or a text not encoded or decoded.
    #[error("tokenizer {}: {reason}", path.display())]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The inputs given to a model do not fit it (a sequence longer than its positions,
    /// an id past its vocabulary).
    #[error("{0}")]
    Input(String),
}
