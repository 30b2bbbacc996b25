//! The files of a model in the Hugging Face layout: an ONNX graph plus tokenizer files.

use std::path::Path;

use fastembed::TokenizerFiles;

use crate::error::EmbedError;

/// A model's bytes, read from its folder.
pub(crate) struct ModelFiles {
    pub onnx: Vec<u8>,
    pub tokenizer: TokenizerFiles,
}

impl ModelFiles {
    /// Reads `model.onnx`, `tokenizer.json`, `config.json`, `special_tokens_map.json` and
    /// `tokenizer_config.json` from `dir`; the first missing one is reported with its path.
    /// `what` names the model in messages ("the embedding model").
    pub fn read(dir: &Path, what: &'static str) -> Result<Self, EmbedError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|_| EmbedError::Missing {
                what: format!("{what} ({name})"),
                path,
            })
        };
        Ok(Self {
            onnx: read("model.onnx")?,
            tokenizer: TokenizerFiles {
                tokenizer_file: read("tokenizer.json")?,
                config_file: read("config.json")?,
                special_tokens_map_file: read("special_tokens_map.json")?,
                tokenizer_config_file: read("tokenizer_config.json")?,
            },
        })
    }
}
