//! [`LlmConfig`]: where the upstream LLM is, which model to ask for, and how long to wait and
//! how often to retry; plus how request paths are joined to the base URL.

use std::time::Duration;

use crate::error::LlmError;

/// Where the upstream LLM is and how patient to be with it.
///
/// Build it with [`LlmConfig::new`], which validates the URL and fills in the defaults, then
/// adjust the public fields; [`LlmClient::new`](crate::LlmClient::new) validates again.
#[derive(Clone, PartialEq)]
pub struct LlmConfig {
    /// The API root, including its version path: `http://127.0.0.1:8080/v1`. A trailing slash
    /// is tolerated. Endpoints are appended to it: `{base_url}/chat/completions`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Used when a request body names no model.
    pub model: String,
    /// Whole request for non-streaming calls; time to the response headers, and the longest
    /// silence between two chunks, for streams and pass-through.
    pub request_timeout: Duration,
    /// How long establishing a connection may take; a slow connect fails fast and is retried.
    pub connect_timeout: Duration,
    /// Retries after the first attempt on connection errors, timeouts, 429 and 5xx.
    pub max_retries: u32,
    /// Delay before the first retry; it doubles for each further retry.
    pub initial_backoff: Duration,
}

impl LlmConfig {
    /// Defaults: 120 s per request (local models on two cores are slow), 5 s to connect,
    /// 3 retries starting at 250 ms.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Result<Self, LlmError> {
        let config = Self {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            request_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(5),
            max_retries: 3,
            initial_backoff: Duration::from_millis(250),
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks that `base_url` is an http(s) URL with a host and nothing after its path.
    pub fn validate(&self) -> Result<(), LlmError> {
        let invalid = |why: &str| {
            Err(LlmError::InvalidConfig(format!(
                "base URL {:?} {why}",
                redacted(&self.base_url)
            )))
        };
        // Without a scheme, `localhost:8080/v1` would parse with "localhost" as its scheme.
        if !self.base_url.contains("://") {
            return invalid("must start with http:// or https://");
        }
        let url = match reqwest::Url::parse(self.base_url.trim()) {
            Ok(url) => url,
            Err(e) => return invalid(&format!("is not a URL: {e}")),
        };
        if !matches!(url.scheme(), "http" | "https") {
            return invalid("must start with http:// or https://");
        }
        // A secret in the URL would be echoed by every error and log line that names it.
        if !url.username().is_empty() || url.password().is_some() {
            return invalid(
                "carries a user name or password; give the key as openai_api_key (MNEMO_OPENAI_API_KEY) instead",
            );
        }
        if url.host_str().is_none_or(str::is_empty) {
            return invalid("has no host");
        }
        if url.query().is_some() || url.fragment().is_some() {
            return invalid("must not have a query or fragment");
        }
        if self.model.trim().is_empty() {
            return Err(LlmError::InvalidConfig("the model name is empty".into()));
        }
        Ok(())
    }

    /// The base URL without trailing slashes, ready for [`join_url`].
    /// (Never carries user-info: [`validate`](Self::validate) refuses it.)
    pub(crate) fn normalized_base(&self) -> String {
        self.base_url.trim().trim_end_matches('/').to_string()
    }
}

/// `url` with any user-info replaced by `***`, for messages.
fn redacted(url: &str) -> String {
    match reqwest::Url::parse(url.trim()) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_username("***");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        // Unparsable: cut anything up to an `@`, which could be user-info.
        Err(_) => match url.rsplit_once('@') {
            Some((_, rest)) => format!("***@{rest}"),
            None => url.to_owned(),
        },
    }
}

// The API key must not reach logs through `{:?}`.
impl std::fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_retries", &self.max_retries)
            .field("initial_backoff", &self.initial_backoff)
            .finish()
    }
}

/// `{base}{path_and_query}`: the path is relative to the base URL's own path, so base
/// `http://h/v1` and `/models?x=1` give `http://h/v1/models?x=1`. A missing leading slash is
/// added; `base` must not end with one.
pub(crate) fn join_url(base: &str, path_and_query: &str) -> String {
    if path_and_query.is_empty() || path_and_query.starts_with(['/', '?']) {
        format!("{base}{path_and_query}")
    } else {
        format!("{base}/{path_and_query}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_and_https_with_host() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "https://api.openai.com/v1/",
            "http://localhost:11434/v1",
        ] {
            assert!(LlmConfig::new(url, "m").is_ok(), "{url}");
        }
    }

    #[test]
    fn rejects_bad_base_urls_saying_why() {
        for (url, why) in [
            ("127.0.0.1:8080/v1", "http:// or https://"),
            ("localhost:8080/v1", "http:// or https://"),
            ("ftp://host/v1", "http:// or https://"),
            ("http://exa mple.com/v1", "is not a URL"),
            ("http://", "host"),
            ("http://h/v1?key=1", "query"),
        ] {
            let err = LlmConfig::new(url, "m").unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
            assert!(err.contains(url), "{url}: {err}");
        }
        assert!(LlmConfig::new("http://h/v1", " ").is_err());
    }

    #[test]
    fn joins_paths_below_the_base_path() {
        let config = LlmConfig::new("http://h:1/v1/", "m").unwrap();
        let base = config.normalized_base();
        assert_eq!(base, "http://h:1/v1");
        assert_eq!(
            join_url(&base, "/chat/completions"),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(join_url(&base, "models"), "http://h:1/v1/models");
        assert_eq!(
            join_url(&base, "/models?a=1&b=2"),
            "http://h:1/v1/models?a=1&b=2"
        );
        assert_eq!(join_url(&base, "?a=1"), "http://h:1/v1?a=1");
        assert_eq!(join_url(&base, ""), "http://h:1/v1");
    }

    #[test]
    fn user_info_in_the_base_url_is_refused_and_never_echoed() {
        for url in [
            "https://alice:s3cret@llm.example/v1",
            "https://s3cret@llm.example/v1",
            "https://alice:s3cret@llm.example/v1?x=1",
        ] {
            let err = LlmConfig::new(url, "m").unwrap_err().to_string();
            assert!(!err.contains("s3cret"), "{err}");
            assert!(err.contains("llm.example"), "{err}");
        }
    }
}
