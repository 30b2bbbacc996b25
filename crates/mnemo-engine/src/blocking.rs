//! Running blocking work (file I/O, embedding, the index) off the async runtime: the one
//! bridge every async method of the engine crosses.

use crate::error::EngineError;

/// Runs blocking work (file I/O, embedding, the index) off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, EngineError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| EngineError::Task(e.to_string()))?
}
