//! [`ServerOptions`]: the limits and facts the server needs beyond the memory client, set
//! once at start-up and read by every layer.

use crate::auth::Auth;

/// Limits and facts the server needs beyond the memory client.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Largest JSON body accepted, in bytes (chat requests, memory calls).
    pub max_body_bytes: usize,
    /// What the upstream is, for `/health` ("local LLM", or its URL).
    pub upstream_label: String,
    /// Host names served besides loopback ones (`Host` header, DNS-rebinding guard).
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed besides mnemo's own (`http://host:port`).
    pub allowed_origins: Vec<String>,
    /// How long a shutdown waits for queued write-path passes; those left are journaled and
    /// resumed by the next start.
    pub shutdown_grace: std::time::Duration,
    /// The bearer tokens accepted; [`Auth::open`] (no tokens) serves everyone.
    pub auth: Auth,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 << 20,
            upstream_label: String::new(),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            shutdown_grace: std::time::Duration::from_secs(30),
            auth: Auth::open(),
        }
    }
}
