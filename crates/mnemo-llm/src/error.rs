//! [`LlmError`]: every way a call to the LLM can fail, as one line that names the URL, the
//! status and what came back, so a log line or an HTTP error body explains itself.
//!
//! Which variants are worth retrying is decided by the client: connection errors, timeouts
//! and statuses 429 and 5xx are; the rest are reported at once.

use std::time::Duration;

/// Everything that can go wrong talking to the LLM. Each message is one line.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// No HTTP exchange happened: the connection was refused or broke. Chat calls retry it.
    #[error("cannot reach the LLM at {url}: {message}")]
    Connect {
        /// The URL called.
        url: String,
        /// The transport error with its causes, on one line.
        message: String,
    },
    /// Connecting, the response headers, or a whole non-streaming reply took too long. Chat
    /// calls retry it.
    #[error("the LLM at {url} did not answer within {after:?}")]
    Timeout {
        /// The URL called.
        url: String,
        /// The limit that ran out.
        after: Duration,
    },
    /// The upstream answered with a status other than 2xx (chat calls retry 429 and 5xx
    /// first).
    #[error("the LLM at {url} answered HTTP {status}: {body_snippet}")]
    Status {
        /// The URL called.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the response body, on one line, or `(no body)`.
        body_snippet: String,
    },
    /// The upstream answered 2xx, but not with what was asked for: no JSON, or JSON of the
    /// wrong shape. The engine falls back rather than act on it.
    #[error("the LLM's reply is not usable ({reason}): {content_snippet:?}")]
    InvalidOutput {
        /// What is wrong with the reply.
        reason: String,
        /// The start of the reply, on one line.
        content_snippet: String,
    },
    /// The configuration cannot work (a bad base URL, an empty model name), or the local LLM
    /// could not be started (its files missing, or it exited or timed out while loading).
    #[error("invalid LLM configuration: {0}")]
    InvalidConfig(String),
    /// A streamed reply broke off or fell silent after it had started; not retried, since
    /// part of it may already have been passed on.
    #[error("the LLM's stream broke off: {0}")]
    Stream(String),
}

/// Longest piece of a body or reply quoted in an error.
const SNIPPET_CHARS: usize = 400;

/// A one-line, bounded quote of `text` for an error message.
pub(crate) fn snippet(text: &str) -> String {
    let mut out = String::new();
    for (n, word) in text.split_whitespace().enumerate() {
        if n > 0 {
            out.push(' ');
        }
        out.push_str(word);
        if out.chars().count() > SNIPPET_CHARS {
            let cut: String = out.chars().take(SNIPPET_CHARS).collect();
            return cut + "…";
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippet_is_one_bounded_line() {
        assert_eq!(snippet("  a\n\tb\r\n c "), "a b c");
        let long = "é".repeat(1000);
        let s = snippet(&long);
        assert_eq!(s.chars().count(), SNIPPET_CHARS + 1);
        assert!(s.ends_with('…'));
    }
}
