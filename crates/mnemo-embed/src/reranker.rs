//! [`Reranker`]: a cross-encoder that rescores the best candidates of a search by reading the
//! query and each memory together, run through ONNX Runtime.
//!
//! It is optional: the read path uses it when configured and installed, and ranks by
//! first-stage scores otherwise. Loading scores one probe pair, so a model that is not a
//! cross-encoder fails at start-up.

use std::path::PathBuf;
use std::sync::Mutex;

use fastembed::{RerankInitOptionsUserDefined, TextRerank, UserDefinedRerankingModel};
use tracing::debug;

use crate::error::EmbedError;
use crate::files::ModelFiles;
use crate::runtime;

/// Where the cross-encoder lives and how to run it.
#[derive(Debug, Clone)]
pub struct RerankerConfig {
    /// The ONNX Runtime shared library (loaded once per process; see [`crate::runtime`]).
    pub onnxruntime_library: PathBuf,
    /// Folder with `model.onnx` and the four tokenizer files (as for the embedder).
    pub model_dir: PathBuf,
    /// Cores the ONNX session may use.
    pub threads: usize,
    /// Query-document pairs per ONNX Runtime call.
    pub batch_size: usize,
    /// Pairs longer than this many tokens are truncated (the document side first).
    pub max_length: usize,
}

impl RerankerConfig {
    /// The cross-encoder in `model_dir`, run by the library at `onnxruntime_library`, with 2
    /// threads, batches of 16 pairs and pairs up to 512 tokens.
    pub fn new(onnxruntime_library: impl Into<PathBuf>, model_dir: impl Into<PathBuf>) -> Self {
        Self {
            onnxruntime_library: onnxruntime_library.into(),
            model_dir: model_dir.into(),
            threads: 2,
            batch_size: 16,
            max_length: 512,
        }
    }
}

/// A cross-encoder: scores how well each document answers a query, reading both together.
/// Thread-safe; calls are serialised on one ONNX session.
pub struct Reranker {
    model: Mutex<TextRerank>,
    batch_size: usize,
}

impl std::fmt::Debug for Reranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reranker").finish_non_exhaustive()
    }
}

impl Reranker {
    /// Loads the runtime and the model, and scores one probe pair to check that it runs as a
    /// cross-encoder.
    pub fn load(config: &RerankerConfig) -> Result<Self, EmbedError> {
        let files = ModelFiles::read(&config.model_dir, "the cross-encoder")?;
        let environment = runtime::environment(&config.onnxruntime_library)?;
        let options = RerankInitOptionsUserDefined::new()
            .with_environment(environment)
            .with_execution_providers(vec![runtime::cpu_without_arena()])
            .with_max_length(config.max_length)
            .with_intra_threads(config.threads.max(1))
            .with_session_config(runtime::SPINNING, "0");
        let model = UserDefinedRerankingModel::new(files.onnx, files.tokenizer);
        let model = TextRerank::try_new_from_user_defined(model, options).map_err(|e| {
            EmbedError::Model {
                path: config.model_dir.clone(),
                message: e.to_string(),
            }
        })?;
        let reranker = Self {
            model: Mutex::new(model),
            batch_size: config.batch_size.max(1),
        };
        // A graph without a `logits` output, or with the wrong inputs, fails here, not later.
        reranker
            .score("probe", &["probe"])
            .map_err(|e| EmbedError::Model {
                path: config.model_dir.clone(),
                message: format!("the model does not run as a cross-encoder: {e}"),
            })?;
        debug!(model = %config.model_dir.display(), "cross-encoder loaded");
        Ok(reranker)
    }

    /// The model's raw score (logit) for each document against `query`, in input order.
    pub fn score<S: AsRef<str> + Send + Sync>(
        &self,
        query: &str,
        documents: &[S],
    ) -> Result<Vec<f32>, EmbedError> {
        if documents.is_empty() {
            return Ok(Vec::new());
        }
        let documents: Vec<&str> = documents.iter().map(AsRef::as_ref).collect();
        let mut model = self
            .model
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let ranked = model
            .rerank(query, documents.as_slice(), false, Some(self.batch_size))
            .map_err(|e| EmbedError::Inference(e.to_string()))?;
        let mut scores = vec![0.0; documents.len()];
        for result in ranked {
            scores[result.index] = result.score;
        }
        Ok(scores)
    }
}
