use std::time::Duration;

/// Everything that can go wrong talking to the LLM. Each message is one line.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("cannot reach the LLM at {url}: {message}")]
    Connect { url: String, message: String },
    #[error("the LLM at {url} did not answer within {after:?}")]
    Timeout { url: String, after: Duration },
    #[error("the LLM at {url} answered HTTP {status}: {body_snippet}")]
    Status {
        url: String,
        status: u16,
        body_snippet: String,
    },
    #[error("the LLM's reply is not usable ({reason}): {content_snippet:?}")]
    InvalidOutput {
        reason: String,
        content_snippet: String,
    },
    #[error("invalid LLM configuration: {0}")]
    InvalidConfig(String),
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
