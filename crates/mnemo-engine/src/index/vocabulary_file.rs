//! The vocabulary's word vectors kept between runs: `vocabulary.bin` at the store's root.
//!
//! Embedding the store's words is what building the vocabulary costs (about 1,000 words a
//! second on 2 cores; [`crate::index::vocabulary`]). A word's vector depends only on the word and the
//! embedding model, so a build reuses the vectors the last one wrote and embeds only words it
//! has not seen. Counts are not kept: every build counts the memories the index holds now,
//! so the file never has to follow deletions or edits made while mnemo was not running.
//!
//! The file is rebuildable (left out of git, like the index) and untrusted like everything in
//! the store: a link, a special file, one larger than [`MAX_WORDS`] words can fill, one made
//! with another model, a malformed word or a vector that is not a finite unit vector is refused
//! with a warning, and the build embeds every word again and writes the file anew.
//!
//! Layout, little-endian: the magic `MNEMOVOC`, a format version (u32), the model's
//! description (u32 length, UTF-8), the dimension (u32), the number of words (u32), each word
//! (u8 length, UTF-8), then every word's vector (f32 × dimension) in the same order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mnemo_store::untrusted::Refusal;

use crate::index::word_rules::{is_candidate_word, MAX_WORDS, WORD_CHARS};

const MAGIC: &[u8; 8] = b"MNEMOVOC";
const VERSION: u32 = 1;
/// A model description longer than this is not one mnemo wrote.
const MAX_MODEL_BYTES: usize = 1024;
/// A UTF-8 character takes at most four bytes.
const MAX_WORD_BYTES: usize = 4 * *WORD_CHARS.end();
/// How far a stored vector's length may stray from 1.
const UNIT_TOLERANCE: f32 = 1e-3;

/// Why `vocabulary.bin` was not used.
#[derive(Debug, thiserror::Error)]
pub enum VocabularyFileError {
    /// Not a regular file mnemo may read (a link, a FIFO, too large, unreadable).
    #[error("{0}")]
    Refused(#[from] Refusal),
    /// Not written by this version of mnemo.
    #[error("not a vocabulary file of this mnemo (no `MNEMOVOC` version {VERSION} header)")]
    NotOurs,
    /// Written for another embedding model or dimension.
    #[error("made with {found}, not {expected}")]
    OtherModel {
        /// The model the file names.
        found: String,
        /// The model the store uses now.
        expected: String,
    },
    /// Cut short, or a field out of its range.
    #[error("malformed at byte {at}: {what}")]
    Malformed {
        /// Where reading stopped.
        at: usize,
        /// What was wrong there.
        what: &'static str,
    },
}

/// Word vectors read from the file, looked up by word.
#[derive(Debug, Default)]
pub struct StoredWords {
    position: HashMap<String, usize>,
    vectors: Vec<f32>,
    dimension: usize,
}

impl StoredWords {
    /// The vector stored for `word`.
    pub fn get(&self, word: &str) -> Option<&[f32]> {
        let at = *self.position.get(word)?;
        self.vectors
            .get(at * self.dimension..(at + 1) * self.dimension)
    }

    /// Words held.
    pub fn len(&self) -> usize {
        self.position.len()
    }

    /// Whether it holds no word.
    pub fn is_empty(&self) -> bool {
        self.position.is_empty()
    }
}

/// Where the vectors live and which model they must come from.
#[derive(Debug, Clone)]
pub struct VocabularyFile {
    path: PathBuf,
    /// The embedding model's description, as the snapshot records it.
    model: String,
    dimension: usize,
}

impl VocabularyFile {
    /// The file at `path`, for vectors of `model` with `dimension` components.
    pub fn new(path: impl Into<PathBuf>, model: impl Into<String>, dimension: usize) -> Self {
        Self {
            path: path.into(),
            model: model.into(),
            dimension,
        }
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The vectors the file holds; none when there is no file.
    pub fn read(&self) -> Result<StoredWords, VocabularyFileError> {
        let Some(bytes) = self.read_bytes()? else {
            return Ok(StoredWords::default());
        };
        self.decode(&bytes)
    }

    /// The file's bytes, read as untrusted (a regular file no larger than the most the
    /// format can fill); `None` when there is no file.
    fn read_bytes(&self) -> Result<Option<Vec<u8>>, VocabularyFileError> {
        let most = 64 + MAX_MODEL_BYTES + MAX_WORDS * (1 + MAX_WORD_BYTES + 4 * self.dimension);
        match mnemo_store::untrusted::read_regular(&self.path, most as u64) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Copies the file, when there is one, to `to` (another store's), so a build there
    /// embeds only the words this one has not. The copy is checked when it is read.
    pub(crate) fn copy_to(&self, to: &Path) -> Result<(), VocabularyFileError> {
        if let Some(bytes) = self.read_bytes()? {
            mnemo_store::atomic::write_atomic(to, &bytes).map_err(Refusal::Io)?;
        }
        Ok(())
    }

    /// The file's bytes for `words`, each with its vector (`dimension` components).
    pub fn encode<'w>(
        &self,
        words: impl ExactSizeIterator<Item = (&'w str, &'w [f32])>,
    ) -> Vec<u8> {
        let count = words.len();
        let mut bytes = Vec::with_capacity(64 + count * (8 + 4 * self.dimension));
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&(self.model.len() as u32).to_le_bytes());
        bytes.extend_from_slice(self.model.as_bytes());
        bytes.extend_from_slice(&(self.dimension as u32).to_le_bytes());
        bytes.extend_from_slice(&(count as u32).to_le_bytes());
        let mut vectors = Vec::with_capacity(count * self.dimension * 4);
        for (word, vector) in words {
            // Words come from the vocabulary, which takes 3 to 24 characters.
            bytes.push(word.len() as u8);
            bytes.extend_from_slice(word.as_bytes());
            vectors.extend(vector.iter().flat_map(|x| x.to_le_bytes()));
        }
        bytes.extend_from_slice(&vectors);
        bytes
    }

    /// Replaces the file with `bytes`, atomically.
    pub fn write(&self, bytes: &[u8]) -> std::io::Result<()> {
        mnemo_store::atomic::write_atomic(&self.path, bytes)
    }

    fn decode(&self, bytes: &[u8]) -> Result<StoredWords, VocabularyFileError> {
        let mut reader = Reader { bytes, at: 0 };
        if reader.take(8)? != MAGIC || reader.u32()? != VERSION {
            return Err(VocabularyFileError::NotOurs);
        }
        let model_len = reader.u32()? as usize;
        if model_len > MAX_MODEL_BYTES {
            return Err(reader.malformed("model description too long"));
        }
        let model = String::from_utf8_lossy(reader.take(model_len)?).into_owned();
        let dimension = reader.u32()? as usize;
        if model != self.model || dimension != self.dimension {
            return Err(VocabularyFileError::OtherModel {
                found: format!("{model}, {dimension} components"),
                expected: format!("{}, {} components", self.model, self.dimension),
            });
        }
        let count = reader.u32()? as usize;
        if count > MAX_WORDS {
            return Err(reader.malformed("more words than the vocabulary holds"));
        }
        let mut position = HashMap::with_capacity(count);
        for at in 0..count {
            let len = reader.take(1)?[0] as usize;
            let word = std::str::from_utf8(reader.take(len)?)
                .ok()
                .filter(|w| is_candidate_word(w))
                .ok_or_else(|| reader.malformed("not a word the vocabulary takes"))?;
            if position.insert(word.to_owned(), at).is_some() {
                return Err(reader.malformed("a word stored twice"));
            }
        }
        let vectors: Vec<f32> = reader
            .take(count * dimension * 4)?
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if reader.at != bytes.len() {
            return Err(reader.malformed("bytes after the last vector"));
        }
        let unit = |v: &[f32]| {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            (norm - 1.0).abs() <= UNIT_TOLERANCE
        };
        if dimension > 0 && !vectors.chunks_exact(dimension).all(unit) {
            return Err(VocabularyFileError::Malformed {
                at: bytes.len(),
                what: "a vector that is not of unit length",
            });
        }
        Ok(StoredWords {
            position,
            vectors,
            dimension,
        })
    }
}

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], VocabularyFileError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| self.malformed("cut short"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<u32, VocabularyFileError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn malformed(&self, what: &'static str) -> VocabularyFileError {
        VocabularyFileError::Malformed { at: self.at, what }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: &str = "all-MiniLM-L6-v2 (2 dimensions)";

    fn file(dir: &Path) -> VocabularyFile {
        VocabularyFile::new(dir.join("vocabulary.bin"), MODEL, 2)
    }

    fn words() -> Vec<(&'static str, [f32; 2])> {
        vec![
            ("novel", [1.0, 0.0]),
            ("guitar", [0.6, 0.8]),
            ("café", [0.0, -1.0]),
        ]
    }

    fn encoded(file: &VocabularyFile) -> Vec<u8> {
        let words = words();
        file.encode(words.iter().map(|(w, v)| (*w, v.as_slice())))
    }

    #[test]
    fn the_vectors_written_are_the_vectors_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = file(dir.path());
        assert!(file.read().unwrap().is_empty(), "no file, no words");
        file.write(&encoded(&file)).unwrap();
        let stored = file.read().unwrap();
        assert_eq!(stored.len(), 3);
        for (word, vector) in words() {
            assert_eq!(stored.get(word), Some(vector.as_slice()), "{word}");
        }
        assert_eq!(stored.get("bicycle"), None);
    }

    #[test]
    fn another_model_or_dimension_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = file(dir.path());
        file.write(&encoded(&file)).unwrap();
        let other = VocabularyFile::new(file.path(), "all-mpnet-base-v2 (2 dimensions)", 2);
        let err = other.read().unwrap_err().to_string();
        assert!(err.contains("made with all-MiniLM-L6-v2"), "{err}");
        let wider = VocabularyFile::new(file.path(), MODEL, 3);
        assert!(matches!(
            wider.read(),
            Err(VocabularyFileError::OtherModel { .. })
        ));
    }

    #[test]
    fn damaged_files_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let file = file(dir.path());
        let good = encoded(&file);
        let refused = |bytes: &[u8]| {
            file.write(bytes).unwrap();
            file.read().unwrap_err().to_string()
        };
        assert!(refused(b"not ours").contains("not a vocabulary file"));
        assert!(refused(&good[..good.len() - 3]).contains("cut short"));
        let mut longer = good.clone();
        longer.push(0);
        assert!(refused(&longer).contains("bytes after the last vector"));
        // "novel" is the first word, after the header: write a capitalised name instead.
        let at = good.windows(5).position(|w| w == b"novel").unwrap();
        let mut name = good.clone();
        name[at] = b'N';
        assert!(refused(&name).contains("not a word the vocabulary takes"));
        // "guitar" written over "novel": the same word twice.
        let mut same = good.clone();
        same.splice(at - 1..at + 5, [6u8, b'g', b'u', b'i', b't', b'a', b'r']);
        let err = refused(&same);
        assert!(err.contains("a word stored twice"), "{err}");
        // A vector scaled off the unit sphere (the last four bytes: café's second component).
        let mut scaled = good.clone();
        let end = scaled.len();
        scaled[end - 4..].copy_from_slice(&(-3.0f32).to_le_bytes());
        assert!(refused(&scaled).contains("not of unit length"));
        let mut nan = good;
        let end = nan.len();
        nan[end - 4..].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(refused(&nan).contains("not of unit length"));
    }

    #[test]
    fn links_and_special_files_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = file(dir.path());
        let elsewhere = dir.path().join("elsewhere.bin");
        std::fs::write(&elsewhere, encoded(&file)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, file.path()).unwrap();
        let err = file.read().unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        std::fs::remove_file(file.path()).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(file.path())
            .status()
            .unwrap();
        assert!(made.success());
        let err = file.read().unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }
}
