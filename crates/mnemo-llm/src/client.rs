//! [`LlmClient`]: the HTTP side of talking to the upstream LLM.
//!
//! One shared connection pool serves four kinds of call: the agent's chat requests, plain
//! ([`LlmClient::chat`]) or streamed ([`LlmClient::chat_stream`]), retried with exponential
//! backoff and jitter while the failure is transient; mnemo's own structured calls
//! ([`LlmClient::complete_json`]); and everything else, passed through unchanged
//! ([`LlmClient::forward`]). Errors become [`LlmError`]s that quote what came back.

use std::error::Error as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::config::join_url;
use crate::config::LlmConfig;
use crate::error::snippet;
use crate::error::LlmError;
use crate::json::extract_json;
use crate::json::ChatMessage;
use crate::json::JsonSchema;

/// The raw body of a streamed reply, chunk by chunk as the upstream sent it.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, LlmError>> + Send>>;

/// A streamed chat reply whose response has started (status 2xx). `headers` are the
/// upstream's minus hop-by-hop ones, ready to pass on. Feed `body` to a
/// [`DeltaAccumulator`](crate::DeltaAccumulator) to get the assistant's text.
pub struct ChatStream {
    /// The upstream's status: always 2xx, since other statuses are errors.
    pub status: StatusCode,
    /// The upstream's response headers, hop-by-hop ones removed.
    pub headers: HeaderMap,
    /// The body as it arrives; an error ends it (a broken connection, or silence for longer
    /// than `request_timeout`).
    pub body: ByteStream,
}

impl std::fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStream")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// The most an upstream answer may take (streamed or not): a chat answer is text for a
/// person, and a larger one is a fault or an attack that would cost mnemo gigabytes.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// Longest wait a `Retry-After` header can impose, so one upstream cannot stall a turn.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// `health` is polled while a local LLM starts; it must answer fast or count as down.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
/// An error body is only quoted; a server that trickles it must not hold the caller.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of an error body is read to quote it.
const ERROR_BODY_BYTES: usize = 64 << 10;

/// Connection-level headers that describe one hop and must not be forwarded (RFC 9110 7.6.1),
/// plus `host`, which names mnemo rather than the upstream.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The upstream LLM. Cheap to clone (one shared connection pool); safe to share.
#[derive(Debug, Clone)]
pub struct LlmClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: LlmConfig,
    /// `config.base_url` without trailing slashes.
    base: String,
    http: reqwest::Client,
}

impl LlmClient {
    /// A client for the upstream `config` names; validates it first. Sends nothing yet.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        config.validate()?;
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|e| LlmError::InvalidConfig(format!("cannot build the HTTP client: {e}")))?;
        let base = config.normalized_base();
        Ok(Self {
            inner: Arc::new(Inner { config, base, http }),
        })
    }

    /// The configuration the client was built with.
    pub fn config(&self) -> &LlmConfig {
        &self.inner.config
    }

    /// The upstream URL for `path_and_query`, resolved as [`forward`](Self::forward) does.
    pub fn url(&self, path_and_query: &str) -> String {
        join_url(&self.inner.base, path_and_query)
    }

    /// POSTs `body` to `{base_url}/chat/completions` and returns the JSON reply. The body is
    /// sent as given, with the configured model added when it names none. Connection errors,
    /// timeouts, 429 and 5xx are retried; any other non-2xx is [`LlmError::Status`].
    pub async fn chat(&self, body: &Value) -> Result<Value, LlmError> {
        let url = self.url("/chat/completions");
        let payload = self.payload(body, false);
        let timeout = self.inner.config.request_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let (url_ref, payload) = (&url, &payload);
        let response = self
            .send_with_retries(url_ref, deadline, move |left| async move {
                self.post_json(url_ref, payload.clone())
                    .timeout(left)
                    .send()
                    .await
                    .map_err(|e| self.transport_error(url_ref, e, timeout))
            })
            .await?;
        let response = check_status(&url, response).await?;
        let bytes = read_capped(response, &url, deadline, timeout)
            .await
            .map_err(|e| match e {
                Capped::Transport(e) => self.transport_error(&url, e, timeout),
                Capped::Over(error) | Capped::Late(error) => error,
            })?;
        serde_json::from_slice(&bytes).map_err(|e| LlmError::InvalidOutput {
            reason: format!("the response from {url} is not JSON: {e}"),
            content_snippet: snippet(&String::from_utf8_lossy(&bytes)),
        })
    }

    /// Like [`chat`](Self::chat) with `"stream": true`, returning the body as it arrives.
    /// Failures are retried only until the response starts; after that, a broken or silent
    /// stream (nothing for `request_timeout`) ends with [`LlmError::Stream`].
    pub async fn chat_stream(&self, body: &Value) -> Result<ChatStream, LlmError> {
        let url = self.url("/chat/completions");
        let payload = self.payload(body, true);
        let timeout = self.inner.config.request_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let (url_ref, payload) = (&url, &payload);
        let response = self
            .send_with_retries(url_ref, deadline, move |left| async move {
                let send = self.post_json(url_ref, payload.clone()).send();
                self.until_headers(url_ref, send, left).await
            })
            .await?;
        let response = check_status(&url, response).await?;
        Ok(ChatStream {
            status: response.status(),
            headers: end_to_end_headers(response.headers().clone()),
            body: capped(
                idle_timeout(response.bytes_stream(), timeout, url.clone()),
                url,
            ),
        })
    }

    /// Asks for a reply shaped by `schema` (temperature 0) and deserializes it into `T`.
    ///
    /// Uses `response_format` `json_schema`; a server that answers 400 about it is asked again
    /// once in `json_object` mode, with the schema spelled out in the system prompt instead.
    /// A reply without one JSON value, or whose JSON does not fit `T`, is
    /// [`LlmError::InvalidOutput`].
    pub async fn complete_json<T: DeserializeOwned>(
        &self,
        messages: Vec<ChatMessage>,
        schema: &JsonSchema,
    ) -> Result<T, LlmError> {
        let mut body = json!({
            "model": self.inner.config.model,
            "messages": messages,
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": { "name": schema.name, "schema": schema.schema, "strict": true },
            },
        });
        let reply = match self.chat(&body).await {
            Err(LlmError::Status {
                status: 400,
                body_snippet,
                ..
            }) if body_snippet.contains("response_format")
                || body_snippet.contains("json_schema") =>
            {
                tracing::info!(schema = %schema.name, "the LLM refuses json_schema; asking again in JSON mode");
                body["messages"] = json!(with_schema_instructions(messages, schema));
                body["response_format"] = json!({ "type": "json_object" });
                self.chat(&body).await?
            }
            other => other?,
        };
        let Some(content) = reply
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
        else {
            return Err(LlmError::InvalidOutput {
                reason: "the reply has no choices[0].message.content".into(),
                content_snippet: snippet(&reply.to_string()),
            });
        };
        let invalid = |reason: String| LlmError::InvalidOutput {
            reason,
            content_snippet: snippet(content),
        };
        let value = extract_json(content).ok_or_else(|| invalid("no JSON value in it".into()))?;
        serde_json::from_value(value)
            .map_err(|e| invalid(format!("its JSON does not fit {}: {e}", schema.name)))
    }

    /// Sends any other request to the upstream unchanged and returns its response, whatever
    /// the status, with the body still streaming. No retries.
    ///
    /// `path_and_query` is relative to the base URL's path: with base `http://h/v1`, `/models`
    /// goes to `http://h/v1/models` (a server exposing `/v1/...` itself strips its `/v1`).
    /// Hop-by-hop headers and `Host` are dropped; when an API key is configured it replaces the
    /// caller's `Authorization`. `request_timeout` bounds the wait for the response headers.
    pub async fn forward(
        &self,
        method: Method,
        path_and_query: &str,
        headers: HeaderMap,
        body: reqwest::Body,
    ) -> Result<reqwest::Response, LlmError> {
        let url = self.url(path_and_query);
        let mut headers = end_to_end_headers(headers);
        if self.inner.config.api_key.is_some() {
            headers.remove(header::AUTHORIZATION);
        }
        let send = self
            .request(method, &url)
            .headers(headers)
            .body(body)
            .send();
        self.until_headers(&url, send, self.inner.config.request_timeout)
            .await
    }

    /// Whether the upstream answers `GET {base_url}/models` with 2xx within a few seconds.
    pub async fn health(&self) -> Result<(), LlmError> {
        let url = self.url("/models");
        let timeout = HEALTH_TIMEOUT.min(self.inner.config.request_timeout);
        let response = self
            .request(Method::GET, &url)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| self.transport_error(&url, e, timeout))?;
        check_status(&url, response).await.map(drop)
    }

    /// How many tokens the upstream's own tokenizer makes of `text`, through llama.cpp's
    /// `POST /tokenize` (at the server's root, beside `/v1`). Only llama.cpp servers (the
    /// local LLM) answer it.
    pub async fn count_tokens(&self, text: &str) -> Result<usize, LlmError> {
        let url = join_url(self.server_root(), "/tokenize");
        let timeout = self.inner.config.request_timeout;
        let payload = Bytes::from(serde_json::json!({ "content": text }).to_string());
        let response = self
            .post_json(&url, payload)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| self.transport_error(&url, e, timeout))?;
        let reply: Value = check_status(&url, response)
            .await?
            .json()
            .await
            .map_err(|e| self.transport_error(&url, e, timeout))?;
        reply["tokens"]
            .as_array()
            .map(Vec::len)
            .ok_or_else(|| LlmError::InvalidOutput {
                reason: format!("{url} answered without a \"tokens\" list"),
                content_snippet: snippet(&reply.to_string()),
            })
    }

    /// The context window of each of the upstream's request slots, from llama.cpp's
    /// `GET /props` (`default_generation_settings.n_ctx`).
    pub async fn slot_context_size(&self) -> Result<u64, LlmError> {
        let url = join_url(self.server_root(), "/props");
        let response = self
            .request(Method::GET, &url)
            .timeout(HEALTH_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.transport_error(&url, e, HEALTH_TIMEOUT))?;
        let props: Value = check_status(&url, response)
            .await?
            .json()
            .await
            .map_err(|e| self.transport_error(&url, e, HEALTH_TIMEOUT))?;
        props["default_generation_settings"]["n_ctx"]
            .as_u64()
            .filter(|n| *n > 0)
            .ok_or_else(|| LlmError::InvalidOutput {
                reason: format!("{url} does not give default_generation_settings.n_ctx"),
                content_snippet: snippet(&props.to_string()),
            })
    }

    /// The base URL without its trailing `/v1`: where llama.cpp serves its own endpoints.
    fn server_root(&self) -> &str {
        let base = self.inner.base.trim_end_matches('/');
        base.strip_suffix("/v1").unwrap_or(base)
    }

    fn request(&self, method: Method, url: &str) -> reqwest::RequestBuilder {
        let request = self.inner.http.request(method, url);
        match &self.inner.config.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    fn post_json(&self, url: &str, payload: Bytes) -> reqwest::RequestBuilder {
        self.request(Method::POST, url)
            .header(header::CONTENT_TYPE, "application/json")
            .body(payload)
    }

    /// The request body: the caller's, plus the configured model when it names none.
    fn payload(&self, body: &Value, stream: bool) -> Bytes {
        let mut body = body.clone();
        if let Some(fields) = body.as_object_mut() {
            if fields.get("model").is_none_or(Value::is_null) {
                fields.insert("model".into(), self.inner.config.model.clone().into());
            }
            if stream {
                fields.insert("stream".into(), true.into());
            }
        }
        Bytes::from(body.to_string())
    }

    /// Sends without bounding the body's duration (it may stream for minutes), only the wait
    /// for the response headers, by `wait`.
    async fn until_headers(
        &self,
        url: &str,
        send: impl Future<Output = reqwest::Result<reqwest::Response>>,
        wait: Duration,
    ) -> Result<reqwest::Response, LlmError> {
        match tokio::time::timeout(wait, send).await {
            Ok(sent) => sent.map_err(|e| self.transport_error(url, e, wait)),
            Err(_) => Err(LlmError::Timeout {
                url: url.to_string(),
                after: self.inner.config.request_timeout,
            }),
        }
    }

    /// Runs `attempt` (given the time left) until it gives a response that is not worth
    /// retrying, retries run out, or the call's one deadline would pass. A connection refused
    /// or a 429/5xx is retried: the upstream did not do the work. A timeout is not: the
    /// upstream may still be working on (and billing) the request, and waiting again would
    /// stretch one call to several times `request_timeout`.
    async fn send_with_retries<F, Fut>(
        &self,
        url: &str,
        deadline: tokio::time::Instant,
        attempt: F,
    ) -> Result<reqwest::Response, LlmError>
    where
        F: Fn(Duration) -> Fut,
        Fut: Future<Output = Result<reqwest::Response, LlmError>>,
    {
        let config = &self.inner.config;
        let mut retry = 0;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let outcome = attempt(left).await;
            let (retry_after, what) = match &outcome {
                Ok(response) if is_transient(response.status()) => (
                    retry_after(response.headers()),
                    format!("HTTP {}", response.status()),
                ),
                Err(e @ LlmError::Connect { .. }) => (None, e.to_string()),
                _ => return outcome,
            };
            if retry >= config.max_retries {
                return outcome;
            }
            let delay = backoff_delay(retry, config.initial_backoff, retry_after, jitter());
            if tokio::time::Instant::now() + delay >= deadline {
                tracing::warn!(url, "LLM call failed ({what}); no time left to retry");
                return outcome;
            }
            tracing::warn!(
                url,
                retry = retry + 1,
                of = config.max_retries,
                ?delay,
                "LLM call failed ({what}); retrying"
            );
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }

    fn transport_error(&self, url: &str, e: reqwest::Error, timeout: Duration) -> LlmError {
        let url = url.to_string();
        if e.is_timeout() {
            let after = if e.is_connect() {
                self.inner.config.connect_timeout
            } else {
                timeout
            };
            return LlmError::Timeout { url, after };
        }
        LlmError::Connect {
            url,
            message: causes(&e),
        }
    }
}

/// `Ok(response)` when it is 2xx, else [`LlmError::Status`] quoting its body.
async fn check_status(
    url: &str,
    response: reqwest::Response,
) -> Result<reqwest::Response, LlmError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    // Only quoted, so only its start is read: a broken upstream's gigabyte error page is not.
    let start = async {
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(Ok(chunk)) = chunks.next().await {
            body.extend_from_slice(&chunk);
            if body.len() >= ERROR_BODY_BYTES {
                break;
            }
        }
        String::from_utf8_lossy(&body).into_owned()
    };
    let body = match tokio::time::timeout(ERROR_BODY_TIMEOUT, start).await {
        Ok(body) if !body.trim().is_empty() => snippet(&body),
        _ => "(no body)".into(),
    };
    Err(LlmError::Status {
        url: url.to_string(),
        status: status.as_u16(),
        body_snippet: body,
    })
}

fn is_transient(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// `Retry-After` in seconds; the HTTP-date form is rare from LLM servers and is ignored.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: f64 = headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (seconds.is_finite() && seconds >= 0.0)
        .then(|| Duration::from_secs_f64(seconds.min(MAX_RETRY_AFTER.as_secs_f64())))
}

/// The wait before retry number `retry` (0-based). A server's `Retry-After` wins, capped;
/// otherwise `initial * 2^retry`, capped, scaled into [1/2, 1] of itself by `jitter` (in
/// [0, 1]) so clients that failed together do not retry together.
fn backoff_delay(
    retry: u32,
    initial: Duration,
    retry_after: Option<Duration>,
    jitter: f64,
) -> Duration {
    if let Some(after) = retry_after {
        return after.min(MAX_RETRY_AFTER);
    }
    let base = initial
        .saturating_mul(2u32.saturating_pow(retry))
        .min(MAX_BACKOFF);
    base.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// A number in [0, 1) that differs between calls; std's randomly keyed hasher is enough for
/// spreading retries and needs no extra dependency.
fn jitter() -> f64 {
    use std::hash::BuildHasher;
    let bits = std::hash::RandomState::new().hash_one(std::time::SystemTime::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// What went wrong, from reqwest's error sources (its own message only repeats the URL).
fn causes(e: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        source = cause.source();
    }
    if parts.is_empty() {
        e.to_string()
    } else {
        parts.join(": ")
    }
}

/// `headers` without hop-by-hop headers, those the `Connection` header names, and `Host`:
/// what a proxy may pass on, in either direction.
pub fn end_to_end_headers(mut headers: HeaderMap) -> HeaderMap {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::HOST);
    headers
}

/// The body as a stream that fails, instead of waiting forever, when the upstream goes silent
/// for `idle`.
/// Why a capped read of an answer stopped.
enum Capped {
    /// The connection failed.
    Transport(reqwest::Error),
    /// The answer passed [`MAX_ANSWER_BYTES`].
    Over(LlmError),
    /// The call's deadline passed while the body was still arriving.
    Late(LlmError),
}

/// Reads a whole answer body, refusing it as soon as it passes [`MAX_ANSWER_BYTES`] (before
/// reading it, when `Content-Length` says so), and by the call's deadline.
async fn read_capped(
    response: reqwest::Response,
    url: &str,
    deadline: tokio::time::Instant,
    timeout: Duration,
) -> Result<Bytes, Capped> {
    let too_large = |size: u64| {
        Capped::Over(LlmError::InvalidOutput {
            reason: format!(
                "the answer from {url} is {size} bytes or more; mnemo takes at most {MAX_ANSWER_BYTES}"
            ),
            content_snippet: String::new(),
        })
    };
    if let Some(length) = response
        .content_length()
        .filter(|&n| n > MAX_ANSWER_BYTES as u64)
    {
        return Err(too_large(length));
    }
    let read = async {
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(Capped::Transport)?;
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(too_large((body.len() + chunk.len()) as u64));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(body))
    };
    match tokio::time::timeout_at(deadline, read).await {
        Ok(read) => read,
        Err(_) => Err(Capped::Late(LlmError::Timeout {
            url: url.to_string(),
            after: timeout,
        })),
    }
}

/// Ends a streamed answer with an error once it passes [`MAX_ANSWER_BYTES`].
fn capped(body: ByteStream, url: String) -> ByteStream {
    // (bytes passed on, whether the cap was hit): after the error, the stream ends.
    Box::pin(body.scan((0usize, false), move |(seen, over), chunk| {
        let next = match chunk {
            _ if *over => None,
            Ok(bytes) if *seen + bytes.len() > MAX_ANSWER_BYTES => {
                *over = true;
                Some(Err(LlmError::Stream(format!(
                    "the answer from {url} passed {MAX_ANSWER_BYTES} bytes; mnemo cut it there"
                ))))
            }
            Ok(bytes) => {
                *seen += bytes.len();
                Some(Ok(bytes))
            }
            Err(e) => Some(Err(e)),
        };
        futures_util::future::ready(next)
    }))
}

fn idle_timeout(
    body: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
    idle: Duration,
    url: String,
) -> ByteStream {
    let state = Some((Box::pin(body), url));
    Box::pin(futures_util::stream::unfold(
        state,
        move |state| async move {
            let (mut body, url) = state?;
            match tokio::time::timeout(idle, body.next()).await {
                Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some((body, url)))),
                Ok(None) => None,
                Ok(Some(Err(e))) => Some((
                    Err(LlmError::Stream(format!("reading {url}: {}", causes(&e)))),
                    None,
                )),
                Err(_) => Some((
                    Err(LlmError::Stream(format!("{url} sent nothing for {idle:?}"))),
                    None,
                )),
            }
        },
    ))
}

/// The messages with the schema spelled out in the system prompt, for servers that only
/// offer JSON mode (which, on OpenAI, also requires the word "JSON" in the prompt).
fn with_schema_instructions(
    mut messages: Vec<ChatMessage>,
    schema: &JsonSchema,
) -> Vec<ChatMessage> {
    let instructions = format!(
        "Answer with one JSON value and nothing else. It must match this JSON schema ({}): {}",
        schema.name, schema.schema
    );
    // Some chat templates accept a system message only in first position.
    match messages.first_mut() {
        Some(first) if first.role == "system" => {
            first.content = format!("{}\n\n{instructions}", first.content);
        }
        _ => messages.insert(0, ChatMessage::system(instructions)),
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const MS: Duration = Duration::from_millis(1);

    /// mnemo calls the client from axum handlers and spawned tasks.
    #[test]
    fn client_and_its_futures_are_send() {
        fn send<T: Send>(_: &T) {}
        fn shared<T: Send + Sync + Clone + 'static>() {}
        shared::<LlmClient>();
        let client = LlmClient::new(LlmConfig::new("http://127.0.0.1:9/v1", "m").unwrap()).unwrap();
        let body = json!({});
        let schema = JsonSchema::new("s", json!({}));
        send(&client.chat(&body));
        send(&client.chat_stream(&body));
        send(&client.complete_json::<Value>(vec![], &schema));
        send(&client.forward(
            Method::GET,
            "/models",
            HeaderMap::new(),
            reqwest::Body::from(""),
        ));
        send(&client.health());
    }

    #[test]
    fn backoff_doubles_with_jitter_and_caps() {
        let initial = 250 * MS;
        assert_eq!(backoff_delay(0, initial, None, 1.0), 250 * MS);
        assert_eq!(backoff_delay(0, initial, None, 0.0), 125 * MS);
        assert_eq!(backoff_delay(1, initial, None, 1.0), 500 * MS);
        assert_eq!(backoff_delay(3, initial, None, 1.0), 2000 * MS);
        assert_eq!(backoff_delay(2, initial, None, 0.5), 750 * MS);
        assert_eq!(backoff_delay(60, initial, None, 1.0), MAX_BACKOFF);
        assert_eq!(
            backoff_delay(u32::MAX, Duration::MAX, None, 9.0),
            MAX_BACKOFF
        );
    }

    #[test]
    fn retry_after_wins_and_is_capped() {
        assert_eq!(backoff_delay(5, 250 * MS, Some(2000 * MS), 0.3), 2000 * MS);
        assert_eq!(
            backoff_delay(0, 250 * MS, Some(Duration::from_secs(3600)), 0.3),
            MAX_RETRY_AFTER
        );

        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        for (value, expected) in [
            ("2", Some(2000 * MS)),
            (" 0.5 ", Some(500 * MS)),
            ("0", Some(Duration::ZERO)),
            ("86400", Some(MAX_RETRY_AFTER)),
            ("99999999999999999999", Some(MAX_RETRY_AFTER)),
            ("-1", None),
            ("NaN", None),
            ("Wed, 21 Oct 2015 07:28:00 GMT", None),
        ] {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static(value));
            assert_eq!(retry_after(&headers), expected, "{value}");
        }
    }

    #[test]
    fn jitter_is_in_range() {
        for _ in 0..1000 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }

    #[test]
    fn transient_statuses() {
        for code in [429, 500, 502, 503, 504] {
            assert!(is_transient(StatusCode::from_u16(code).unwrap()), "{code}");
        }
        for code in [200, 400, 401, 404, 422] {
            assert!(!is_transient(StatusCode::from_u16(code).unwrap()), "{code}");
        }
    }

    #[test]
    fn drops_hop_by_hop_headers() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("host", "mnemo:8100"),
            ("connection", "keep-alive, x-hop"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("x-hop", "1"),
            ("authorization", "Bearer sk"),
            ("content-type", "application/json"),
            ("x-custom", "kept"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
        let kept = end_to_end_headers(headers);
        let mut names: Vec<_> = kept.keys().map(|k| k.as_str()).collect();
        names.sort();
        assert_eq!(names, ["authorization", "content-type", "x-custom"]);
    }

    #[test]
    fn payload_adds_model_and_stream_only_when_missing() {
        let config = LlmConfig::new("http://127.0.0.1:9/v1", "default-model").unwrap();
        let client = LlmClient::new(config).unwrap();
        let sent = |body: Value, stream| -> Value {
            serde_json::from_slice(&client.payload(&body, stream)).unwrap()
        };
        assert_eq!(
            sent(json!({"messages": []}), false),
            json!({"model": "default-model", "messages": []})
        );
        assert_eq!(
            sent(json!({"model": "mine", "stream": false}), true),
            json!({"model": "mine", "stream": true})
        );
    }

    #[test]
    fn schema_instructions_join_the_first_system_message() {
        let schema = JsonSchema::new("facts", json!({"type": "object"}));
        let with_system = with_schema_instructions(
            vec![
                ChatMessage::system("Extract facts."),
                ChatMessage::user("hi"),
            ],
            &schema,
        );
        assert_eq!(with_system.len(), 2);
        assert!(with_system[0].content.starts_with("Extract facts.\n\n"));
        assert!(with_system[0].content.contains(r#"{"type":"object"}"#));

        let without = with_schema_instructions(vec![ChatMessage::user("hi")], &schema);
        assert_eq!(without[0].role, "system");
        assert_eq!(without[1], ChatMessage::user("hi"));
    }
}
