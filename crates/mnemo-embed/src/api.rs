//! [`ApiEmbeddings`]: vectors from an OpenAI-compatible `/v1/embeddings` endpoint (OpenAI,
//! Ollama, llama.cpp's server, vLLM), for users who run mnemo beside their own embedding
//! model.
//!
//! The calls are blocking, as the ONNX model's are: [`crate::Embedder`] is called from the
//! engine's blocking threads. Each call is one request, run on a small runtime the client
//! owns, on a scoped thread, so it is safe from any thread, async or not;
//! a timeout, a refused connection, a 429 or a 5xx is tried again after a pause
//! ([`RETRIES`] times); any other answer that is not a list of vectors, one per text and
//! all of one length, is an error that names the endpoint.

use std::time::Duration;

use serde::Deserialize;
use tracing::{debug, warn};

use crate::error::EmbedError;

/// Times a failed batch is tried again (after 0.5 s, then 1 s).
pub const RETRIES: u32 = 2;
/// The most bytes read from one answer: 64 texts of 4,096 floats printed as JSON fit.
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// Where the endpoint is and what to ask it for.
#[derive(Clone)]
pub struct ApiEmbeddingsConfig {
    /// Base URL, up to and including `/v1` (`http://127.0.0.1:8080/v1`).
    pub base_url: String,
    /// Sent as a bearer token when set.
    pub api_key: Option<String>,
    /// The model the endpoint is asked for (`text-embedding-3-small`).
    pub model: String,
    /// Asked for when set (`dimensions`, which OpenAI's newer models honour); the vectors
    /// returned must have this length.
    pub dimensions: Option<usize>,
    /// Seconds one request may take.
    pub timeout: Duration,
    /// Texts per request.
    pub batch_size: usize,
}

impl std::fmt::Debug for ApiEmbeddingsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiEmbeddingsConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("dimensions", &self.dimensions)
            .finish_non_exhaustive()
    }
}

/// A client of one embeddings endpoint.
pub struct ApiEmbeddings {
    config: ApiEmbeddingsConfig,
    url: String,
    client: reqwest::Client,
    /// Dropped with `shutdown_background`, which may happen on an async thread.
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for ApiEmbeddings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiEmbeddings")
            .field("url", &self.url)
            .field("model", &self.config.model)
            .finish_non_exhaustive()
    }
}

impl Drop for ApiEmbeddings {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

impl ApiEmbeddings {
    /// A client of the endpoint `config` names; nothing is sent yet.
    pub fn new(config: ApiEmbeddingsConfig) -> Result<Self, EmbedError> {
        let url = format!("{}/embeddings", config.base_url.trim_end_matches('/'));
        let failed = |message: String| EmbedError::Api {
            url: url.clone(),
            message,
        };
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| failed(format!("cannot build an HTTP client: {e}")))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("mnemo-embeddings")
            .enable_all()
            .build()
            .map_err(|e| failed(format!("cannot start a runtime: {e}")))?;
        Ok(Self {
            config,
            url,
            client,
            runtime: Some(runtime),
        })
    }

    /// The model asked for.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// Texts per request when embedding many.
    pub fn batch_size(&self) -> usize {
        self.config.batch_size.max(1)
    }

    /// One vector per text, in order, as the endpoint gives them (not normalised), in one
    /// request: [`crate::Embedder`] cuts bulk work into batches of [`Self::batch_size`].
    pub fn embed<S: AsRef<str> + Sync>(&self, texts: &[S]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let Some(runtime) = &self.runtime else {
            return Err(self.error("the client is shut down".into()));
        };
        let texts: Vec<&str> = texts.iter().map(AsRef::as_ref).collect();
        // A scoped thread is never inside a runtime, whoever calls.
        std::thread::scope(|scope| {
            scope
                .spawn(|| runtime.block_on(self.with_retries(&texts)))
                .join()
                .unwrap_or_else(|_| Err(self.error("the request thread panicked".into())))
        })
    }

    async fn with_retries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut attempt = 0;
        loop {
            match self.request(texts).await {
                Ok(vectors) => return Ok(vectors),
                Err(Failure::Transient(message)) if attempt < RETRIES => {
                    let pause = Duration::from_millis(500 << attempt);
                    warn!(url = %self.url, attempt, "embeddings request failed ({message}); trying again in {pause:?}");
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                Err(Failure::Transient(message) | Failure::Final(message)) => {
                    return Err(self.error(message))
                }
            }
        }
    }

    async fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Failure> {
        let mut body = serde_json::json!({
            "model": self.config.model,
            "input": texts,
            "encoding_format": "float",
        });
        if let Some(dimensions) = self.config.dimensions {
            body["dimensions"] = dimensions.into();
        }
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| {
            let kind = if e.is_timeout() {
                "timed out"
            } else {
                "failed"
            };
            Failure::Transient(format!("the request {kind}: {e}"))
        })?;
        let status = response.status();
        let bytes = read_bounded(response).await?;
        if !status.is_success() {
            let said = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
            let message = format!("the endpoint answered {status}: {said}");
            return Err(if status.as_u16() == 429 || status.is_server_error() {
                Failure::Transient(message)
            } else {
                Failure::Final(message)
            });
        }
        let answer: Answer = serde_json::from_slice(&bytes)
            .map_err(|e| Failure::Final(format!("the answer is not a list of embeddings: {e}")))?;
        let vectors = in_order(answer, texts.len()).map_err(Failure::Final)?;
        debug!(url = %self.url, texts = texts.len(), "embedded through the API");
        Ok(vectors)
    }

    fn error(&self, message: String) -> EmbedError {
        EmbedError::Api {
            url: self.url.clone(),
            message,
        }
    }

    /// Checks a batch's vectors against the configured dimension, if any; returns their
    /// length.
    pub(crate) fn check_dimension(&self, vectors: &[Vec<f32>]) -> Result<usize, EmbedError> {
        let length = vectors.first().map(Vec::len).unwrap_or(0);
        if length == 0 {
            return Err(self.error("the endpoint returned an empty vector".into()));
        }
        match self.config.dimensions {
            Some(asked) if asked != length => Err(self.error(format!(
                "asked for {asked} dimensions, the endpoint returned {length}"
            ))),
            _ => Ok(length),
        }
    }
}

/// Why a request failed: worth another try, or not.
enum Failure {
    Transient(String),
    Final(String),
}

/// The answer's body, refused past [`MAX_ANSWER_BYTES`].
async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, Failure> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Failure::Transient(format!("the answer was cut: {e}")))?
    {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(Failure::Final(format!(
                "the answer is larger than {} MiB",
                MAX_ANSWER_BYTES >> 20
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The answer's vectors in the order of the texts (by `index` when given), checked to be
/// one per text and all of one length.
fn in_order(answer: Answer, texts: usize) -> Result<Vec<Vec<f32>>, String> {
    if answer.data.len() != texts {
        return Err(format!(
            "asked for {texts} embeddings, the endpoint returned {}",
            answer.data.len()
        ));
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; texts];
    for (position, item) in answer.data.into_iter().enumerate() {
        let at = item.index.unwrap_or(position);
        match slots.get_mut(at) {
            Some(slot @ None) => *slot = Some(item.embedding),
            _ => return Err(format!("the answer's index {at} is out of place")),
        }
    }
    let vectors: Vec<Vec<f32>> = slots.into_iter().flatten().collect();
    let length = vectors.first().map(Vec::len).unwrap_or(0);
    if vectors.iter().any(|v| v.len() != length) {
        return Err("the vectors returned differ in length".into());
    }
    if vectors.iter().flatten().any(|x| !x.is_finite()) {
        return Err("a vector returned holds a value that is not a number".into());
    }
    Ok(vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(items: &[(Option<usize>, &[f32])]) -> Answer {
        Answer {
            data: items
                .iter()
                .map(|(index, v)| Item {
                    index: *index,
                    embedding: v.to_vec(),
                })
                .collect(),
        }
    }

    #[test]
    fn vectors_come_back_in_the_order_of_the_texts() {
        let a: &[f32] = &[1.0, 0.0];
        let b: &[f32] = &[0.0, 1.0];
        let vectors = in_order(answer(&[(Some(1), b), (Some(0), a)]), 2).unwrap();
        assert_eq!(vectors, [a.to_vec(), b.to_vec()]);
        let vectors = in_order(answer(&[(None, a), (None, b)]), 2).unwrap();
        assert_eq!(vectors, [a.to_vec(), b.to_vec()]);
    }

    #[test]
    fn a_short_uneven_or_misplaced_answer_is_refused() {
        let a: &[f32] = &[1.0, 0.0];
        assert!(in_order(answer(&[(Some(0), a)]), 2)
            .unwrap_err()
            .contains("asked for 2"));
        let short: &[f32] = &[1.0];
        assert!(in_order(answer(&[(Some(0), a), (Some(1), short)]), 2)
            .unwrap_err()
            .contains("differ in length"));
        assert!(in_order(answer(&[(Some(0), a), (Some(0), a)]), 2)
            .unwrap_err()
            .contains("out of place"));
        assert!(in_order(answer(&[(Some(7), a)]), 1)
            .unwrap_err()
            .contains("out of place"));
        let nan: &[f32] = &[f32::NAN, 0.0];
        assert!(in_order(answer(&[(None, nan)]), 1)
            .unwrap_err()
            .contains("not a number"));
    }
}
