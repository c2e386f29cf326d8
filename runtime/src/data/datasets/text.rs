//! A text file as a character- or byte-level language-modelling data set.

use super::super::{DataError, Dataset};
use crate::Tensor;
use std::path::Path;

/// Consecutive chunks of a text file as next-token prediction samples: sample `i` is
/// `(tokens[i*L .. i*L + L], tokens[i*L + 1 .. i*L + L + 1])` as int64 `[L]`, the
/// targets being the inputs shifted by one. Tokens are the file's characters (ids into
/// the sorted set of distinct characters, [`vocab`](Self::vocab)) or its bytes (ids
/// 0..256).
///
/// ```
/// use ferrograd_runtime::data::Dataset;
/// use ferrograd_runtime::data::datasets::TextDataset;
/// let path = std::env::temp_dir().join("ferrograd-doc-text.txt");
/// std::fs::write(&path, "abcabcabc").unwrap();
/// let d = TextDataset::chars(&path, 4).unwrap();
/// assert_eq!((d.len(), d.vocab(), d.encode("cab")), (2, &['a', 'b', 'c'][..], vec![2, 0, 1]));
/// let (x, y) = d.get(0).unwrap();
/// assert_eq!((x.to_vec::<i64>(), y.to_vec::<i64>()), (vec![0, 1, 2, 0], vec![1, 2, 0, 1]));
/// assert_eq!(d.decode(&[0, 1]), "ab");
/// ```
#[derive(Clone, Debug)]
pub struct TextDataset {
    tokens: Vec<i64>,
    vocab: Vec<char>,
    seq_len: usize,
}

impl TextDataset {
    /// Character-level: the file must be UTF-8.
    pub fn chars(path: impl AsRef<Path>, seq_len: usize) -> Result<Self, DataError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            DataError::format(
                path,
                format!("not UTF-8 text (at byte {})", e.utf8_error().valid_up_to()),
            )
        })?;
        let mut vocab: Vec<char> = text.chars().collect();
        vocab.sort_unstable();
        vocab.dedup();
        let tokens = text
            .chars()
            .map(|c| vocab.binary_search(&c).expect("in the vocabulary") as i64)
            .collect();
        Self::build(path, tokens, vocab, seq_len)
    }

    /// Byte-level: any file; token ids are byte values.
    ///
    /// ```
    /// use ferrograd_runtime::data::Dataset;
    /// use ferrograd_runtime::data::datasets::TextDataset;
    /// let path = std::env::temp_dir().join("ferrograd-doc-bytes.txt");
    /// std::fs::write(&path, [0u8, 255, 7, 9]).unwrap();
    /// let (x, y) = TextDataset::bytes(&path, 3).unwrap().get(0).unwrap();
    /// assert_eq!((x.to_vec::<i64>(), y.to_vec::<i64>()), (vec![0, 255, 7], vec![255, 7, 9]));
    /// ```
    pub fn bytes(path: impl AsRef<Path>, seq_len: usize) -> Result<Self, DataError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        Self::build(
            path,
            bytes.into_iter().map(i64::from).collect(),
            Vec::new(),
            seq_len,
        )
    }

    fn build(
        path: &Path,
        tokens: Vec<i64>,
        vocab: Vec<char>,
        seq_len: usize,
    ) -> Result<Self, DataError> {
        if seq_len == 0 {
            return Err(DataError::Invalid(
                "TextDataset: seq_len must be positive".into(),
            ));
        }
        if tokens.len() <= seq_len {
            return Err(DataError::format(
                path,
                format!(
                    "{} tokens are too few for one sequence of {seq_len} and its target",
                    tokens.len()
                ),
            ));
        }
        Ok(TextDataset {
            tokens,
            vocab,
            seq_len,
        })
    }

    /// The distinct characters, in id order (empty for a byte-level set).
    pub fn vocab(&self) -> &[char] {
        &self.vocab
    }

    /// The number of token ids: the vocabulary's size, or 256 for bytes.
    ///
    /// ```
    /// use ferrograd_runtime::data::datasets::TextDataset;
    /// let path = std::env::temp_dir().join("ferrograd-doc-vocab.txt");
    /// std::fs::write(&path, "hello").unwrap();
    /// assert_eq!(TextDataset::chars(&path, 2).unwrap().vocab_size(), 4);
    /// ```
    pub fn vocab_size(&self) -> usize {
        if self.vocab.is_empty() {
            256
        } else {
            self.vocab.len()
        }
    }

    /// Token ids of `text` (characters outside the vocabulary are skipped).
    pub fn encode(&self, text: &str) -> Vec<i64> {
        if self.vocab.is_empty() {
            return text.bytes().map(i64::from).collect();
        }
        text.chars()
            .filter_map(|c| self.vocab.binary_search(&c).ok().map(|i| i as i64))
            .collect()
    }

    /// The text of token ids (ids outside the vocabulary are skipped).
    pub fn decode(&self, ids: &[i64]) -> String {
        if self.vocab.is_empty() {
            let bytes: Vec<u8> = ids.iter().filter_map(|&i| u8::try_from(i).ok()).collect();
            return String::from_utf8_lossy(&bytes).into_owned();
        }
        ids.iter()
            .filter_map(|&i| usize::try_from(i).ok().and_then(|i| self.vocab.get(i)))
            .collect()
    }
}

impl Dataset for TextDataset {
    type Item = (Tensor, Tensor);
    fn len(&self) -> usize {
        (self.tokens.len() - 1) / self.seq_len
    }
    fn get(&self, index: usize) -> Result<(Tensor, Tensor), DataError> {
        if index >= self.len() {
            return Err(DataError::IndexOutOfRange {
                index,
                len: self.len(),
            });
        }
        let start = index * self.seq_len;
        let x = &self.tokens[start..start + self.seq_len];
        let y = &self.tokens[start + 1..start + self.seq_len + 1];
        Ok((
            Tensor::from_slice(x, &[self.seq_len]),
            Tensor::from_slice(y, &[self.seq_len]),
        ))
    }
}
