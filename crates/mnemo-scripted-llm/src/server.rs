//! [`ScriptedLlm`]: the HTTP server itself. One axum fallback route takes every request:
//! it records it, answers chat completions through the current handler (a panicking handler
//! becomes a 500, not a dead server), embeddings with [`crate::embeddings`]' vectors, lists
//! one model at `/v1/models`, and echoes anything else back as JSON.

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::reply::echo;
use crate::reply::Reply;
use crate::reply::StreamEnd;
use crate::reply::{answer, error, json_response, StreamLog};
use crate::request::ChatRequest;
use crate::request::RecordedRequest;

/// What decides the answer to each chat request.
pub type Handler = dyn Fn(&ChatRequest) -> Reply + Send + Sync + 'static;

/// A scripted OpenAI-compatible server on 127.0.0.1, serving until dropped.
///
/// Needs a running tokio runtime (e.g. inside `#[tokio::test]`).
pub struct ScriptedLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
}

struct Shared {
    handler: RwLock<Arc<Handler>>,
    requests: Mutex<Vec<RecordedRequest>>,
    streams: StreamLog,
    chat_calls: AtomicUsize,
    /// Embeddings requests still to answer with a 503, for tests of retries.
    embedding_faults: AtomicUsize,
    /// The chat requests received so far, for replies that wait for later ones.
    calls_seen: watch::Sender<usize>,
    shutdown: watch::Receiver<bool>,
}

impl ScriptedLlm {
    /// An echo server on a free port.
    ///
    /// # Panics
    /// When no port on 127.0.0.1 can be bound: a test cannot proceed without one.
    pub async fn start() -> Self {
        Self::with_handler(echo).await
    }

    /// A server on a free port answering chat requests with `handler`.
    ///
    /// # Panics
    /// When no port on 127.0.0.1 can be bound.
    pub async fn with_handler(
        handler: impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let server = match Self::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await {
            Ok(server) => server,
            Err(e) => panic!("the scripted LLM cannot bind 127.0.0.1: {e}"),
        };
        server.set_handler(handler);
        server
    }

    /// An echo server on `addr`.
    pub async fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (shutdown, down) = watch::channel(false);
        let shared = Arc::new(Shared {
            handler: RwLock::new(Arc::new(echo) as Arc<Handler>),
            requests: Mutex::default(),
            streams: StreamLog::default(),
            chat_calls: AtomicUsize::new(0),
            embedding_faults: AtomicUsize::new(0),
            calls_seen: watch::Sender::new(0),
            shutdown: down.clone(),
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        tokio::spawn(async move {
            let mut down = down;
            let stopped = async move {
                let _ = down.wait_for(|down| *down).await;
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await
            {
                eprintln!("mnemo-scripted-llm: the server stopped: {e}");
            }
        });
        Ok(Self {
            addr,
            shared,
            shutdown,
        })
    }

    /// Answers the next `count` embeddings requests with a 503.
    pub fn fail_embeddings(&self, count: usize) {
        self.shared.embedding_faults.store(count, Ordering::SeqCst);
    }

    /// The embeddings requests received so far, as JSON bodies.
    pub fn embedding_requests(&self) -> Vec<serde_json::Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.path == "/v1/embeddings")
            .filter_map(|r| r.body)
            .collect()
    }

    /// Answers later chat requests with `handler`.
    pub fn set_handler(&self, handler: impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static) {
        *self
            .shared
            .handler
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(handler);
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL OpenAI clients expect.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The address the server listens on (127.0.0.1 and the port it bound).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The bodies of mnemo's structured calls answered under the JSON schema named `schema`
    /// (`facts`, `memory_operations`, `summary`, `replaces`, ...), oldest first.
    pub fn structured_calls(&self, schema: &str) -> Vec<serde_json::Value> {
        self.requests()
            .into_iter()
            .filter_map(|r| r.body)
            .filter(|b| b["response_format"]["json_schema"]["name"] == schema)
            .collect()
    }

    /// The bodies of the chat requests forwarded to it on an agent's behalf, oldest first:
    /// every request but mnemo's own calls (structured answers, conversation summaries).
    pub fn forwarded_chats(&self) -> Vec<serde_json::Value> {
        self.requests()
            .into_iter()
            .filter_map(|r| r.body)
            .filter(|b| {
                b["messages"].is_array()
                    && b["response_format"].is_null()
                    && !b["messages"][0]["content"]
                        .as_str()
                        .is_some_and(|c| c.starts_with("You are a conversation summariser"))
            })
            .collect()
    }

    /// The last of [`forwarded_chats`](Self::forwarded_chats); panics when there is none.
    pub fn last_forwarded_chat(&self) -> serde_json::Value {
        self.forwarded_chats()
            .pop()
            .expect("a chat request forwarded upstream")
    }

    /// How every streamed answer that has ended so far ended, in the order they ended.
    pub fn streams(&self) -> Vec<StreamEnd> {
        self.shared
            .streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many chat completion requests arrived so far.
    pub fn chat_calls(&self) -> usize {
        self.shared.chat_calls.load(Ordering::SeqCst)
    }

    /// Forgets the recorded requests (the chat call count stays).
    pub fn clear_requests(&self) {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        // Ends the accept loop and any `Reply::Hang`; nobody may be listening any more.
        let _ = self.shutdown.send(true);
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let raw_body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => return error(400, &format!("cannot read the request body: {e}")),
    };
    let recorded = RecordedRequest {
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers: parts.headers.clone(),
        body: serde_json::from_slice(&raw_body).ok(),
        raw_body,
    };
    shared
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(recorded.clone());

    match (&recorded.method, recorded.path.as_str()) {
        (&Method::POST, "/v1/chat/completions") => chat(&shared, recorded).await,
        (&Method::POST, "/v1/embeddings") => {
            let fault =
                shared
                    .embedding_faults
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            match fault {
                Ok(_) => error(503, "the scripted server is failing embeddings on purpose"),
                Err(_) => crate::embeddings::answer(recorded.body.as_ref()),
            }
        }
        (&Method::GET, "/v1/models") => json_response(
            StatusCode::OK,
            &json!({
                "object": "list",
                "data": [{
                    "id": "scripted",
                    "object": "model",
                    "created": 1_700_000_000,
                    "owned_by": "mnemo-scripted-llm",
                }],
            }),
        ),
        _ => echo_request(recorded),
    }
}

async fn chat(shared: &Shared, recorded: RecordedRequest) -> Response {
    let Some(body) = recorded.body.filter(Value::is_object) else {
        return error(400, "the request body is not a JSON object");
    };
    let request = ChatRequest {
        body,
        headers: recorded.headers,
        call: shared.chat_calls.fetch_add(1, Ordering::SeqCst),
    };
    shared.calls_seen.send_modify(|seen| *seen += 1);
    let handler = shared
        .handler
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    // A failing assertion inside a handler should fail the test with its message, not leave
    // the client with a dropped connection.
    let reply = match std::panic::catch_unwind(AssertUnwindSafe(|| handler(&request))) {
        Ok(reply) => reply,
        Err(_) => Reply::status(500, "the scripted handler panicked (see the test output)"),
    };
    answer(
        reply,
        &request,
        shared.shutdown.clone(),
        shared.calls_seen.subscribe(),
        &shared.streams,
    )
    .await
}

/// What arrived, as JSON, for pass-through tests.
fn echo_request(recorded: RecordedRequest) -> Response {
    let headers: serde_json::Map<String, Value> = recorded
        .headers
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.to_string(), Value::String(value))
        })
        .collect();
    let body = recorded
        .body
        .unwrap_or_else(|| match recorded.raw_body.is_empty() {
            true => Value::Null,
            false => Value::String(String::from_utf8_lossy(&recorded.raw_body).into_owned()),
        });
    json_response(
        StatusCode::OK,
        &json!({
            "path": recorded.path,
            "method": recorded.method.as_str(),
            "query": recorded.query,
            "headers": headers,
            "body": body,
        }),
    )
}
