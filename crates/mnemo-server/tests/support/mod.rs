//! Shared by the server's test files: a server on a real socket in front of a (scripted)
//! upstream, and small HTTP helpers.

// Each test file uses a part of this module.
#![allow(dead_code)]

use std::path::PathBuf;

use mnemo_core::Config;
use mnemo_engine::{MemoryClient, OpenOptions};
use mnemo_scripted_llm::{learns_nothing, ChatRequest, Reply, ScriptedLlm};
use mnemo_server::ServerOptions;
use serde_json::{json, Value};
use tokio::sync::oneshot;

pub struct Server {
    pub url: String,
    pub stop: Option<oneshot::Sender<()>>,
    pub done: tokio::task::JoinHandle<std::io::Result<()>>,
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
}

impl Server {
    pub async fn start(upstream: Option<String>) -> Self {
        Self::start_with(upstream, ServerOptions::default(), |_| {}).await
    }

    pub async fn start_with(
        upstream: Option<String>,
        options: ServerOptions,
        tune: impl FnOnce(&mut Config),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            memory_path: dir.path().to_owned(),
            models_dir: mnemo_test_support::models_dir(),
            openai_base_url: upstream,
            llm_timeout_secs: 1,
            start_watcher: false,
            ..Config::default()
        };
        config.retrieval.reranker = mnemo_core::RerankerMode::Off;
        tune(&mut config);
        let client = MemoryClient::open(config, OpenOptions::default())
            .await
            .unwrap();
        let root = client.store().root().to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(mnemo_server::serve(listener, client, options, async {
            let _ = stopped.await;
        }));
        Self {
            url,
            stop: Some(stop),
            done,
            dir,
            root,
        }
    }

    /// `/metrics` as it reads now.
    pub async fn metrics(&self) -> String {
        let url = format!("{}/metrics", self.url);
        http().get(url).send().await.unwrap().text().await.unwrap()
    }

    /// Stops the server; the store stays until the returned folder is dropped.
    pub async fn shutdown(mut self) -> (tempfile::TempDir, PathBuf) {
        self.stop.take().unwrap().send(()).unwrap();
        (&mut self.done).await.unwrap().unwrap();
        (self.dir, self.root)
    }
}

/// The routes mnemo serves itself, as (method, path).
pub const ROUTES: [(&str, &str); 31] = [
    ("post", "/v1/chat/completions"),
    ("get", "/health"),
    ("get", "/openapi.json"),
    ("post", "/v1/memories"),
    ("get", "/v1/memories"),
    ("post", "/v1/memories/search"),
    ("get", "/v1/memories/{id}"),
    ("delete", "/v1/memories/{id}"),
    ("get", "/v1/memories/{id}/history"),
    ("get", "/v1/conversations/{id}/memory"),
    ("patch", "/v1/conversations/{id}/memory"),
    ("post", "/v1/conversations/{id}/compact"),
    ("get", "/v1/conversations/{id}/usage"),
    ("get", "/v1/conversations/{id}/conflicts"),
    ("post", "/v1/conversations/{id}/conflicts/resolve"),
    ("get", "/v1/conversations/{id}/tool-outputs/{call_id}"),
    ("get", "/metrics"),
    ("get", "/v1/sessions"),
    ("get", "/v1/sessions/{id}"),
    ("delete", "/v1/sessions/{id}"),
    ("get", "/v1/sessions/{id}/messages"),
    ("post", "/v1/sessions/{id}/fork"),
    ("get", "/v1/sessions/{id}/export"),
    ("post", "/v1/sessions"),
    ("post", "/v1/sessions/{id}/compact"),
    ("get", "/v1/sessions/{id}/context"),
    ("get", "/v1/sessions/{id}/tool-outputs/{call_id}"),
    ("get", "/v1/history/search"),
    ("get", "/v1/agents/{agent}/memory"),
    ("post", "/v1/agents/{agent}/memory"),
    ("patch", "/v1/agents/{agent}/memory"),
];

pub fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

pub async fn post(url: &str, body: Value) -> (u16, Value) {
    let response = http().post(url).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// An upstream that learns nothing and answers a chat with "You said: " and its message.
pub fn model(request: &ChatRequest) -> Reply {
    learns_nothing(request).unwrap_or_else(|| {
        Reply::text(format!(
            "You said: {}",
            request.last_user_message().unwrap_or_default()
        ))
    })
}

pub fn chat(text: &str) -> Value {
    json!({"model": "m", "memory_id": "c1", "messages": [{"role": "user", "content": text}]})
}

pub fn error_message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

/// A history of `turns` turns, each a question, a `read_file` call, its output of `size`
/// characters and an answer; the last turn ends on its tool result.
pub fn tool_history(turns: usize, size: usize) -> Vec<Value> {
    let mut messages = vec![json!({"role": "system", "content": "You are a coding agent."})];
    for turn in 0..turns {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "user", "content": format!("Read file {turn}.")}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}));
        messages.push(
            json!({"role": "tool", "tool_call_id": id, "content": format!("{turn}").repeat(size)}),
        );
        if turn + 1 < turns {
            messages.push(json!({"role": "assistant", "content": format!("File {turn} is fine.")}));
        }
    }
    messages
}

/// The last chat request the upstream got that was not one of mnemo's own calls.
pub fn last_forwarded(llm: &ScriptedLlm) -> Value {
    llm.last_forwarded_chat()
}

pub fn tool_outputs(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

pub async fn patch(url: &str, body: Value) -> (u16, Value) {
    let response = http().patch(url).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub async fn post_get(url: &str) -> (u16, Value) {
    let response = http().get(url).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}
