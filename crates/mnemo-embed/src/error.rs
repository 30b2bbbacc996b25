//! [`EmbedError`]: why a model could not be loaded or run, and the command that installs
//! what is missing.

/// The command that installs the files this crate needs.
pub const SETUP_COMMAND: &str = "scripts/setup";

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// A file the models need is not there: set-up has not run, or a path is misconfigured.
    #[error("{what} not found at {path}; run `{SETUP_COMMAND}` to install it")]
    Missing {
        /// What is missing, in words (`"the embedding model (tokenizer.json)"`).
        what: String,
        /// Where it was looked for.
        path: std::path::PathBuf,
    },
    /// The ONNX Runtime library would not load, or this process already loaded another one.
    #[error("cannot load ONNX Runtime from {path}: {message}")]
    Runtime {
        /// The library asked for.
        path: std::path::PathBuf,
        /// Why it did not load.
        message: String,
    },
    /// The model's files are there, but the model does not load or does not run as expected.
    #[error("cannot load the model in {path}: {message}")]
    Model {
        /// The model's folder.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Running a loaded model failed; holds ONNX Runtime's message.
    #[error("inference failed: {0}")]
    Inference(String),
    /// An embeddings endpoint did not answer, or not with vectors.
    #[error("embeddings from {url}: {message}")]
    Api {
        /// The endpoint asked.
        url: String,
        /// What went wrong.
        message: String,
    },
}
