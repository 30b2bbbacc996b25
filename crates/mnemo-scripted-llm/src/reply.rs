//! [`Reply`]: what the scripted server answers a chat request with, and how each kind of reply
//! becomes an HTTP response (plain or streamed); plus the ready-made handlers [`echo`],
//! [`sequence`] and [`fail_first`].

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::request::content_text;
use crate::request::ChatRequest;

/// How the server answers one chat request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A `chat.completion` with this assistant content; streamed as several
    /// `chat.completion.chunk` events and `data: [DONE]` when the request asks for a stream.
    Text(String),
    /// Like `Text`, with the content being this JSON serialised (structured-output calls).
    Json(Value),
    /// This status with an OpenAI-style error body carrying the message.
    Status(u16, String),
    /// 200, `Content-Type: application/json`, and this body, which should not be JSON.
    Malformed(String),
    /// Anything at all: status, headers and body as given (e.g. a 429 with `Retry-After`).
    Raw {
        /// The HTTP status.
        status: u16,
        /// Response headers, as name and value.
        headers: Vec<(String, String)>,
        /// The body, sent as it is.
        body: String,
    },
    /// Waits, then answers with the inner reply.
    Delay(Duration, Box<Reply>),
    /// Never answers (until the server is dropped): for timeouts.
    Hang,
    /// Waits until the server has received this many chat requests in all (this one
    /// included), then answers with the inner reply; until the server is dropped when they
    /// never come. For tests of overlap: two calls answered only once both are in flight.
    AfterCalls(usize, Box<Reply>),
    /// Text arriving in these pieces, each after its delay: a stream when the request streams,
    /// else one `chat.completion` after all the delays.
    Chunks(Vec<(Duration, String)>),
}

impl Reply {
    /// A [`Reply::Text`] with this assistant content.
    pub fn text(content: impl Into<String>) -> Self {
        Self::Text(content.into())
    }

    /// A [`Reply::Status`]: this status, with an OpenAI-style error body carrying `message`.
    pub fn status(code: u16, message: impl Into<String>) -> Self {
        Self::Status(code, message.into())
    }

    /// A [`Reply::Delay`]: `reply`, once `after` has passed.
    pub fn delay(after: Duration, reply: Reply) -> Self {
        Self::Delay(after, Box::new(reply))
    }

    /// A [`Reply::AfterCalls`]: `reply`, once the server has received `calls` chat requests.
    pub fn after_calls(calls: usize, reply: Reply) -> Self {
        Self::AfterCalls(calls, Box::new(reply))
    }
}

/// The default handler: `echo: <last user message>`.
pub fn echo(request: &ChatRequest) -> Reply {
    Reply::Text(format!(
        "echo: {}",
        request.last_user_message().unwrap_or_default()
    ))
}

/// mnemo's reconciliation answered by adding every new fact it lists (its `- ` lines), as
/// if none matched what is already known.
pub fn add_every_fact(request: &ChatRequest) -> Reply {
    let message = request.last_user_message().unwrap_or_default();
    let ops: Vec<Value> = message
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(|fact| json!({"event": "ADD", "id": -1, "text": fact}))
        .collect();
    Reply::Json(json!({ "operations": ops }))
}

/// The answer to mnemo's own write-path calls when a test is not about what is learnt: no
/// facts from extraction, nothing to do for the other structured calls (reconciliation, the
/// summary); `None` for any other call (a chat to answer), which the caller answers.
pub fn learns_nothing(request: &ChatRequest) -> Option<Reply> {
    match request.schema_name()? {
        "facts" => Some(Reply::Json(json!({"facts": []}))),
        _ => Some(Reply::Json(json!({"operations": [], "summary": ""}))),
    }
}

/// A handler answering the n-th call (from when it was set) with `replies[n]`, and every call
/// after the last with the last one.
pub fn sequence(replies: Vec<Reply>) -> impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static {
    let calls = AtomicUsize::new(0);
    move |_| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        match replies.get(n).or(replies.last()) {
            Some(reply) => reply.clone(),
            None => Reply::status(500, "the scripted sequence is empty"),
        }
    }
}

/// A handler answering the first `n` calls with `failure`, then handing over to `then`:
/// `fail_first(2, Reply::status(500, "boom"), echo)` is "500 twice, then OK".
pub fn fail_first(
    n: usize,
    failure: Reply,
    then: impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static,
) -> impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static {
    let calls = AtomicUsize::new(0);
    move |request| {
        if calls.fetch_add(1, Ordering::SeqCst) < n {
            failure.clone()
        } else {
            then(request)
        }
    }
}

/// How one streamed answer ended: every event sent, or cut short because the client went away
/// (the server drops a response body when its connection closes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamEnd {
    /// The chat call that was answered (0 for the first chat request).
    pub call: usize,
    /// Server-sent events handed to the connection.
    pub events_sent: usize,
    /// Events the whole answer has, `data: [DONE]` included.
    pub events_total: usize,
}

impl StreamEnd {
    /// Whether the whole answer went out.
    pub fn completed(&self) -> bool {
        self.events_sent == self.events_total
    }
}

/// Where the server records how its streams ended.
pub(crate) type StreamLog = Arc<Mutex<Vec<StreamEnd>>>;

/// Records a stream's end when the stream (and so this) is dropped.
struct StreamGuard {
    log: StreamLog,
    call: usize,
    total: usize,
    sent: AtomicUsize,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(StreamEnd {
                call: self.call,
                events_sent: self.sent.load(Ordering::SeqCst),
                events_total: self.total,
            });
    }
}

/// Fixed so that responses are byte-for-byte reproducible.
const CREATED: u64 = 1_700_000_000;

/// The response to `reply`, after whatever waiting it asks for. `shutdown` turns true when
/// the server is dropped, which ends a `Hang` or an `AfterCalls` still waiting; `calls`
/// counts the chat requests received so far.
pub(crate) async fn answer(
    mut reply: Reply,
    request: &ChatRequest,
    mut shutdown: watch::Receiver<bool>,
    mut calls: watch::Receiver<usize>,
    streams: &StreamLog,
) -> Response {
    loop {
        return match reply {
            Reply::Delay(after, next) => {
                tokio::time::sleep(after).await;
                reply = *next;
                continue;
            }
            Reply::Hang => {
                // Err means the server is gone, which ends the hang just the same.
                let _ = shutdown.wait_for(|down| *down).await;
                error(503, "the scripted server shut down")
            }
            Reply::AfterCalls(wanted, next) => {
                let came = tokio::select! {
                    came = calls.wait_for(|&seen| seen >= wanted) => came.is_ok(),
                    _ = shutdown.wait_for(|down| *down) => false,
                };
                if !came {
                    return error(503, "the scripted server shut down");
                }
                reply = *next;
                continue;
            }
            Reply::Text(content) => completion(request, content, streams),
            Reply::Json(value) => completion(request, value.to_string(), streams),
            Reply::Chunks(pieces) if request.is_stream() => stream(request, pieces, streams),
            Reply::Chunks(pieces) => {
                let total = pieces.iter().map(|(delay, _)| *delay).sum();
                tokio::time::sleep(total).await;
                completion(
                    request,
                    pieces.into_iter().map(|(_, piece)| piece).collect(),
                    streams,
                )
            }
            Reply::Status(code, message) => error(code, &message),
            Reply::Malformed(body) => raw(
                200,
                &[("content-type".into(), "application/json".into())],
                body,
            ),
            Reply::Raw {
                status,
                headers,
                body,
            } => raw(status, &headers, body),
        };
    }
}

/// A whole `chat.completion`, or the same content as a stream of words.
fn completion(request: &ChatRequest, content: String, streams: &StreamLog) -> Response {
    if request.is_stream() {
        let pieces = content
            .split_inclusive(' ')
            .map(|word| (Duration::ZERO, word.to_string()))
            .collect();
        return stream(request, pieces, streams);
    }
    let body = json!({
        "id": format!("chatcmpl-scripted-{}", request.call),
        "object": "chat.completion",
        "created": CREATED,
        "model": model(request),
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": content },
            "finish_reason": "stop",
        }],
        "usage": usage(request, &content),
    });
    json_response(StatusCode::OK, &body)
}

/// Token usage as the scripted server counts it: words.
fn usage(request: &ChatRequest, answer: &str) -> Value {
    let prompt_tokens: usize = request
        .messages()
        .iter()
        .map(|m| words(&content_text(&m["content"])))
        .sum();
    let completion_tokens = words(answer);
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    })
}

/// `chat.completion.chunk` events: the role at once, each piece after its delay, then the
/// finish reason, the usage when the request asks for it (as OpenAI sends it: a chunk with
/// no choices), and `[DONE]`.
fn stream(request: &ChatRequest, pieces: Vec<(Duration, String)>, log: &StreamLog) -> Response {
    let chunk = |delta: Value, finish_reason: Value| {
        let chunk = json!({
            "id": format!("chatcmpl-scripted-{}", request.call),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model(request),
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason }],
        });
        Bytes::from(format!("data: {chunk}\n\n"))
    };
    let answer: String = pieces.iter().map(|(_, piece)| piece.as_str()).collect();
    let mut events = vec![(
        Duration::ZERO,
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
    )];
    for (delay, piece) in pieces {
        events.push((delay, chunk(json!({ "content": piece }), Value::Null)));
    }
    events.push((Duration::ZERO, chunk(json!({}), json!("stop"))));
    if request.wants_stream_usage() {
        let last = json!({
            "id": format!("chatcmpl-scripted-{}", request.call),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model(request),
            "choices": [],
            "usage": usage(request, &answer),
        });
        events.push((Duration::ZERO, Bytes::from(format!("data: {last}\n\n"))));
    }
    events.push((Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")));
    let guard = Arc::new(StreamGuard {
        log: log.clone(),
        call: request.call,
        total: events.len(),
        sent: AtomicUsize::new(0),
    });
    let body = futures_util::stream::iter(events).then(move |(delay, event)| {
        let guard = guard.clone();
        async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            guard.sent.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Infallible>(event)
        }
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// An OpenAI-style error: `{"error": {"message", "type", "param", "code"}}`.
pub(crate) fn error(code: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let kind = match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        500.. => "server_error",
        _ => "invalid_request_error",
    };
    let body = json!({
        "error": { "message": message, "type": kind, "param": null, "code": null },
    });
    json_response(status, &body)
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    raw(
        status.as_u16(),
        &[("content-type".into(), "application/json".into())],
        body.to_string(),
    )
}

fn raw(status: u16, headers: &[(String, String)], body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in headers {
        // A header a test got wrong is left out rather than failing the whole reply.
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

fn model(request: &ChatRequest) -> &str {
    request.model().unwrap_or("scripted")
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}
