//! `--llm-cache DIR`: the local LLM behind a recorder. Every POST is answered from `DIR` when
//! the same path and body were answered before, and otherwise forwarded to the local LLM and
//! its answer (when 200) kept there.
//!
//! Every call mnemo makes to the local LLM asks for temperature 0, so an answer kept is the
//! answer the model would give again. Runs that differ in one rule then differ only where
//! that rule changed a prompt: a rule left out costs the LLM time of the turns it touches
//! (and the later calls of the same dialogue whose prompts then differ), not a whole run. It
//! also takes away the small differences a reused prompt cache makes in the model's output
//! from one run to the next, so what changes between two runs is what the rule changed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// A recorder in front of the local LLM, serving on loopback until dropped.
pub struct Replay {
    base_url: String,
    counts: Arc<Counts>,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Counts {
    hits: AtomicUsize,
    misses: AtomicUsize,
}

struct Shared {
    /// `http://127.0.0.1:PORT` of the local LLM.
    origin: String,
    dir: PathBuf,
    http: reqwest::Client,
    counts: Arc<Counts>,
}

impl Replay {
    /// Starts a recorder for the LLM at `upstream` (`http://127.0.0.1:PORT/v1`), keeping
    /// answers in `dir` (created when missing).
    pub async fn start(upstream: &str, dir: PathBuf) -> Self {
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let origin = upstream
            .strip_suffix("/v1")
            .unwrap_or_else(|| panic!("{upstream} does not end in /v1"))
            .to_owned();
        let counts = Arc::new(Counts::default());
        let shared = Arc::new(Shared {
            origin,
            dir,
            http: reqwest::Client::new(),
            counts: counts.clone(),
        });
        let app = axum::Router::new().fallback(answer).with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("the recorder serves");
        });
        Self {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            counts,
            server,
        }
    }

    /// Where mnemo is to send its LLM calls.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// (answered from the recording, forwarded to the model) so far.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.counts.hits.load(Ordering::Relaxed),
            self.counts.misses.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn answer(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let kept = (method == Method::POST).then(|| {
        let mut key = Sha256::new();
        key.update(path.as_bytes());
        key.update(b"\n");
        key.update(&body);
        let key: String = key.finalize().iter().map(|b| format!("{b:02x}")).collect();
        shared.dir.join(key)
    });
    if let Some(kept) = &kept {
        if let (Ok(kind), Ok(bytes)) = (
            std::fs::read_to_string(kept.with_extension("type")),
            std::fs::read(kept.with_extension("body")),
        ) {
            shared.counts.hits.fetch_add(1, Ordering::Relaxed);
            return ([(header::CONTENT_TYPE, kind)], bytes).into_response();
        }
    }
    let mut request = shared
        .http
        .request(method, format!("{}{path}", shared.origin))
        .body(body);
    if let Some(kind) = headers.get(header::CONTENT_TYPE) {
        request = request.header(header::CONTENT_TYPE, kind);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = response.status();
    let kind = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let bytes = match response.bytes().await {
        Ok(bytes) => bytes,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    if let (Some(kept), true) = (&kept, status == reqwest::StatusCode::OK) {
        shared.counts.misses.fetch_add(1, Ordering::Relaxed);
        // The body first: an answer is found only once its type is there too.
        std::fs::write(kept.with_extension("body"), &bytes)
            .and_then(|()| std::fs::write(kept.with_extension("type"), &kind))
            .unwrap_or_else(|e| panic!("{}: {e}", kept.display()));
    }
    let status = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    (status, [(header::CONTENT_TYPE, kind)], bytes).into_response()
}
