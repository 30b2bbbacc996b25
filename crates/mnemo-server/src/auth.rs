//! Who may use mnemo over HTTP, and what each caller may touch: bearer tokens with scopes.
//!
//! Without tokens mnemo is open: a loopback service for the user who runs it (the `guard`
//! keeps browsers out), and `mnemo serve` refuses to listen anywhere else without them.
//! With tokens — `[[server.tokens]]` in the config, or [`API_TOKEN_ENV`] — every request but
//! `GET /health` and `GET /openapi.json` (which carry no memory) needs
//! `Authorization: Bearer <token>`:
//! - the middleware (`authenticate`) finds the token's [`Scope`] and hands it to the
//!   handlers as a `Grant`; a missing or unknown token is a 401 before any handler runs, so
//!   a route added later is closed until it is listed as open;
//! - each handler checks what it touches against the grant: only the handler knows it (a
//!   memory id's conversation, a session's, the agent a chat request ends up with), so the
//!   check cannot live in the middleware. A valid token out of its scope is a 403 naming the
//!   conversation or agent;
//! - the client's `Authorization` header is mnemo's token, not the upstream's: the middleware
//!   takes it off the request, so the pass-through can never forward it.
//! - a browser on the web view carries a sign-in cookie, never a token: the web view's own
//!   layer (`crate::web`), which runs first, admits it and marks the request
//!   `AuthenticatedElsewhere`; this one knows no web page.
//!
//! Tokens are kept as SHA-256 digests and compared in constant time; they are never logged,
//! and start-up errors name a token by its config entry, never by its value.

use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, OptionalFromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use mnemo_core::{ConversationId, GlobalAccess, ServerConfig, TokenConfig};
use mnemo_engine::Access;
use sha2::{Digest, Sha256};
use tracing::debug;

use crate::error::ApiError;

/// The environment variable holding one token with full access: every conversation,
/// `global` included, and every agent's notes.
pub const API_TOKEN_ENV: &str = "MNEMO_API_TOKEN";

/// The shortest token accepted: a shorter one could be guessed by trying.
pub const MIN_TOKEN_LEN: usize = 16;

/// The routes served without a token, none of which shows a memory.
const OPEN_ROUTES: [&str; 2] = ["/health", "/openapi.json"];

/// Why the configured tokens cannot be used; `mnemo serve` refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum TokenConfigError {
    /// An entry sets both `token` and `token_env`, or neither.
    #[error("{entry}: set exactly one of token_env (preferred: the secret stays out of the file) and token")]
    NoSecret {
        /// The entry (`server.tokens[N] (name)`).
        entry: String,
    },
    /// `token_env` names a variable that is not set.
    #[error("{entry}: token_env names {var}, which is not set")]
    EnvUnset {
        /// The entry.
        entry: String,
        /// The variable.
        var: String,
    },
    /// The token is shorter than [`MIN_TOKEN_LEN`].
    #[error("{entry}: the token is {len} characters long; mnemo needs at least {MIN_TOKEN_LEN} (make one with `openssl rand -hex 32`)")]
    TooShort {
        /// The entry, or the variable.
        entry: String,
        /// Its length.
        len: usize,
    },
    /// The token holds something an `Authorization` header cannot carry as written.
    #[error("{entry}: a token may hold only visible ASCII characters (no spaces)")]
    NotPrintable {
        /// The entry, or the variable.
        entry: String,
    },
    /// Two entries hold the same token, so a request could not say which scope it has.
    #[error("{entry} holds the same token as {other}; give each caller a token of its own")]
    Duplicate {
        /// The later entry.
        entry: String,
        /// The earlier one.
        other: String,
    },
    /// A `conversations` or `agents` entry is not a name, a prefix ending in `*`, or `*`.
    #[error("{entry}: {field} entry {pattern:?}: {why}")]
    BadPattern {
        /// The token's entry.
        entry: String,
        /// `conversations` or `agents`.
        field: &'static str,
        /// The entry as written.
        pattern: String,
        /// What is wrong with it.
        why: String,
    },
}

/// A set of names: some exactly, some by prefix, or all.
#[derive(Debug, Clone, Default)]
struct Names {
    all: bool,
    exact: Vec<String>,
    prefixes: Vec<String>,
}

impl Names {
    fn all() -> Self {
        Self {
            all: true,
            ..Self::default()
        }
    }

    /// `entries` as the config writes them: `"*"`, `"prefix*"` or an exact name.
    fn parse(entries: &[String]) -> Result<Self, (String, String)> {
        let mut names = Self::default();
        for entry in entries {
            let bad = |why: &str| (entry.clone(), why.to_owned());
            if entry == "*" {
                names.all = true;
            } else if let Some(prefix) = entry.strip_suffix('*') {
                if prefix.contains('*') {
                    return Err(bad("'*' may only end an entry"));
                }
                // A prefix is the start of a valid name, so it obeys the same rules.
                ConversationId::new(prefix).map_err(|e| bad(&e.to_string()))?;
                names.prefixes.push(prefix.to_owned());
            } else {
                ConversationId::new(entry).map_err(|e| bad(&e.to_string()))?;
                names.exact.push(entry.clone());
            }
        }
        Ok(names)
    }

    fn contains(&self, name: &str) -> bool {
        self.all
            || self.exact.iter().any(|e| e == name)
            || self.prefixes.iter().any(|p| name.starts_with(p.as_str()))
    }
}

/// What one token may touch: its conversations (read and write), `global` (none, read or
/// write) and the agents whose notes it may use.
#[derive(Debug, Clone)]
pub struct Scope {
    conversations: Names,
    global: GlobalAccess,
    agents: Names,
}

impl Scope {
    /// Everything: a server without tokens, and [`API_TOKEN_ENV`].
    pub fn everything() -> Self {
        Self {
            conversations: Names::all(),
            global: GlobalAccess::Write,
            agents: Names::all(),
        }
    }

    fn from_config(entry: &str, token: &TokenConfig) -> Result<Self, TokenConfigError> {
        let names = |field: &'static str, entries: &[String]| {
            Names::parse(entries).map_err(|(pattern, why)| TokenConfigError::BadPattern {
                entry: entry.to_owned(),
                field,
                pattern,
                why,
            })
        };
        let conversations = names("conversations", &token.conversations)?;
        // `global` is governed by its own key; listing it would read as write access that
        // the key may deny.
        if conversations
            .exact
            .iter()
            .any(|c| c == ConversationId::GLOBAL)
        {
            return Err(TokenConfigError::BadPattern {
                entry: entry.to_owned(),
                field: "conversations",
                pattern: ConversationId::GLOBAL.to_owned(),
                why: "global is granted by `global = \"read\"` or `\"write\"`, not listed".into(),
            });
        }
        Ok(Self {
            conversations,
            global: token.global,
            agents: names("agents", &token.agents)?,
        })
    }
}

impl Access for Scope {
    fn can_read(&self, conversation: &str) -> bool {
        if conversation == ConversationId::GLOBAL {
            return self.global != GlobalAccess::None;
        }
        self.conversations.contains(conversation)
    }

    fn can_write(&self, conversation: &str) -> bool {
        if conversation == ConversationId::GLOBAL {
            return self.global == GlobalAccess::Write;
        }
        self.conversations.contains(conversation)
    }

    fn can_use_agent(&self, agent: &str) -> bool {
        self.agents.contains(agent)
    }

    fn is_unrestricted(&self) -> bool {
        self.conversations.all && self.global == GlobalAccess::Write && self.agents.all
    }
}

/// One accepted token: its digest (never the token) and its scope.
struct Token {
    /// The config entry, for logs.
    entry: String,
    digest: [u8; 32],
    scope: Arc<Scope>,
}

/// The tokens a server accepts; none means the API is open. `{:?}` shows the entries' names,
/// never a token.
#[derive(Clone, Default)]
pub struct Auth {
    tokens: Arc<Vec<Token>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("tokens", &self.entries().collect::<Vec<_>>())
            .finish()
    }
}

impl Auth {
    /// No tokens: every request is served, with every scope.
    pub fn open() -> Self {
        Self::default()
    }

    /// The tokens of `config` (`[[server.tokens]]`) and of [`API_TOKEN_ENV`], read through
    /// `env` (`std::env::var`, or a test's map). Checked whole: a token too short, holding
    /// spaces, given twice, an unset `token_env`, a bad pattern — each refuses them all.
    pub fn from_config(
        config: &ServerConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, TokenConfigError> {
        let mut tokens: Vec<Token> = Vec::new();
        let mut add = |entry: String, secret: &str, scope: Scope| {
            check_secret(&entry, secret)?;
            let digest = digest(secret);
            if let Some(other) = tokens.iter().find(|t| t.digest == digest) {
                return Err(TokenConfigError::Duplicate {
                    entry,
                    other: other.entry.clone(),
                });
            }
            tokens.push(Token {
                entry,
                digest,
                scope: Arc::new(scope),
            });
            Ok(())
        };
        if let Some(secret) = env(API_TOKEN_ENV) {
            add(API_TOKEN_ENV.to_owned(), &secret, Scope::everything())?;
        }
        for (i, token) in config.tokens.iter().enumerate() {
            let entry = match &token.name {
                Some(name) => format!("server.tokens[{i}] ({name})"),
                None => format!("server.tokens[{i}]"),
            };
            let secret = match (&token.token_env, &token.token) {
                (Some(var), None) => env(var).ok_or_else(|| TokenConfigError::EnvUnset {
                    entry: entry.clone(),
                    var: var.clone(),
                })?,
                (None, Some(key)) => key.expose().to_owned(),
                _ => return Err(TokenConfigError::NoSecret { entry }),
            };
            let scope = Scope::from_config(&entry, token)?;
            add(entry, &secret, scope)?;
        }
        Ok(Self {
            tokens: Arc::new(tokens),
        })
    }

    /// Whether requests need a token.
    pub fn is_required(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The tokens' config entries (`MNEMO_API_TOKEN`, `server.tokens[0] (alice)`), for the
    /// start-up banner.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.tokens.iter().map(|t| t.entry.as_str())
    }

    /// The scope of token `presented`, if it is one of ours (the web view's sign-in).
    pub(crate) fn scope_of(&self, presented: &str) -> Option<Arc<Scope>> {
        self.find(presented).map(|token| token.scope.clone())
    }

    /// The token presented as `presented`, if it is one of ours. Every digest is compared,
    /// each in constant time, so the time taken tells nothing about how close a guess was.
    fn find(&self, presented: &str) -> Option<&Token> {
        let digest = digest(presented);
        let mut found = None;
        for token in self.tokens.iter() {
            if constant_time_eq(&token.digest, &digest) {
                found = Some(token);
            }
        }
        found
    }
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn check_secret(entry: &str, secret: &str) -> Result<(), TokenConfigError> {
    if !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(TokenConfigError::NotPrintable {
            entry: entry.to_owned(),
        });
    }
    if secret.len() < MIN_TOKEN_LEN {
        return Err(TokenConfigError::TooShort {
            entry: entry.to_owned(),
            len: secret.len(),
        });
    }
    Ok(())
}

/// The scope of the request's token, as the middleware found it. Extracting it from a request
/// that has none (an open route served without a token) is a 401: access is never assumed.
#[derive(Clone)]
pub(crate) struct Grant(Arc<Scope>);

impl Grant {
    /// A grant of `scope`, for a layer that found the caller another way (the web view's
    /// sign-in cookie).
    pub(crate) fn of(scope: Arc<Scope>) -> Self {
        Self(scope)
    }

    fn everything() -> Self {
        Self(Arc::new(Scope::everything()))
    }

    /// The scope, shared, for a chat running in a task of its own.
    pub(crate) fn scope(&self) -> Arc<Scope> {
        self.0.clone()
    }

    /// The scope, as `MemoryClient::as_caller` takes it.
    pub(crate) fn access(&self) -> Arc<dyn Access> {
        self.0.clone()
    }
}

impl std::ops::Deref for Grant {
    type Target = Scope;

    fn deref(&self) -> &Scope {
        &self.0
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Grant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Grant>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized(MISSING))
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for Grant {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Grant>().cloned())
    }
}

const MISSING: &str = "this mnemo requires a bearer token: send 'Authorization: Bearer <token>'";

/// What the `Authorization` header holds.
enum Presented {
    Nothing,
    Token(String),
    /// Another scheme (`Basic ...`), or no token after `Bearer`.
    Malformed,
}

/// The token a request presents in its `Authorization` header.
fn presented(headers: &HeaderMap) -> Presented {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Presented::Nothing;
    };
    let Ok(value) = value.to_str() else {
        return Presented::Malformed;
    };
    match value.trim().split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Presented::Token(token.trim().to_owned())
        }
        _ => Presented::Malformed,
    }
}

fn is_open(request: &Request) -> bool {
    matches!(*request.method(), Method::GET | Method::HEAD)
        && request
            .extensions()
            .get::<MatchedPath>()
            .is_some_and(|path| OPEN_ROUTES.contains(&path.as_str()))
}

/// Put in a request by a layer that runs before authentication and has already settled who
/// may make it (the web view's sign-in sessions, `crate::web`): authentication lets it
/// through as that layer left it, with the [`Grant`] it found or none on an open page.
#[derive(Clone, Copy)]
pub(crate) struct AuthenticatedElsewhere;

/// Finds the request's token and puts its [`Grant`] in the request; a missing or unknown
/// token is a 401, except on the open routes, which are then served without a grant.
pub(crate) async fn authenticate(
    State(auth): State<Auth>,
    mut request: Request,
    next: Next,
) -> Response {
    if !auth.is_required() {
        request.extensions_mut().insert(Grant::everything());
        return next.run(request).await;
    }
    if request
        .extensions()
        .get::<AuthenticatedElsewhere>()
        .is_some()
    {
        return next.run(request).await;
    }
    let presented = presented(request.headers());
    // The header is mnemo's token: nothing downstream (the pass-through forwards the client's
    // headers) may see it.
    request.headers_mut().remove(header::AUTHORIZATION);
    match presented {
        Presented::Nothing if is_open(&request) => {}
        Presented::Nothing => return ApiError::unauthorized(MISSING).into_response(),
        Presented::Malformed => {
            return ApiError::unauthorized(
                "the Authorization header must be 'Bearer <token>'; this mnemo accepts bearer tokens only",
            )
            .into_response()
        }
        Presented::Token(token) => match auth.find(&token) {
            Some(found) => {
                debug!(token = %found.entry, path = %request.uri().path(), "authenticated");
                request.extensions_mut().insert(Grant(found.scope.clone()));
            }
            None => {
                return ApiError::unauthorized("the bearer token is not one mnemo knows")
                    .into_response()
            }
        },
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemo_core::ApiKey;

    fn entry(token: &str, conversations: &[&str], global: GlobalAccess) -> TokenConfig {
        TokenConfig {
            token: Some(ApiKey(token.into())),
            conversations: conversations.iter().map(|c| c.to_string()).collect(),
            global,
            ..TokenConfig::default()
        }
    }

    fn auth(tokens: Vec<TokenConfig>) -> Result<Auth, TokenConfigError> {
        Auth::from_config(&ServerConfig { tokens }, |_| None)
    }

    #[test]
    fn patterns_match_exact_ids_prefixes_and_all() {
        let scope = Scope::from_config(
            "t",
            &entry("0123456789abcdef", &["alice", "team-*"], GlobalAccess::Read),
        )
        .unwrap();
        assert!(scope.can_write("alice") && scope.can_read("team-red"));
        assert!(!scope.can_read("alice2") && !scope.can_read("bob") && !scope.can_read("team"));
        assert!(scope.can_read("global") && !scope.can_write("global"));
        assert!(!scope.can_use_agent("coder"), "no agents unless listed");
        assert!(!scope.is_unrestricted());
        assert!(Scope::everything().is_unrestricted());
        let none = Scope::from_config("t", &entry("x", &["*"], GlobalAccess::None)).unwrap();
        assert!(none.can_write("anything") && !none.can_read("global"));
        assert!(!none.reads_global());
    }

    #[test]
    fn bad_tokens_and_patterns_are_refused_by_name_never_by_value() {
        let secret = "sixteen-chars-ok";
        for (tokens, expected) in [
            (vec![entry("short", &[], GlobalAccess::Read)], "at least 16"),
            (
                vec![entry("has a space in it!!", &[], GlobalAccess::Read)],
                "visible ASCII",
            ),
            (
                vec![
                    entry(secret, &[], GlobalAccess::Read),
                    entry(secret, &[], GlobalAccess::None),
                ],
                "server.tokens[1] holds the same token as server.tokens[0]",
            ),
            (
                vec![entry(secret, &["a*b*"], GlobalAccess::Read)],
                "may only end",
            ),
            (
                vec![entry(secret, &["../x"], GlobalAccess::Read)],
                "conversations entry \"../x\"",
            ),
            (
                vec![entry(secret, &["global"], GlobalAccess::Read)],
                "not listed",
            ),
            (vec![TokenConfig::default()], "set exactly one of"),
            (
                vec![TokenConfig {
                    token_env: Some("MNEMO_TOKEN_NOBODY".into()),
                    ..TokenConfig::default()
                }],
                "MNEMO_TOKEN_NOBODY, which is not set",
            ),
        ] {
            let err = auth(tokens).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
            assert!(!err.contains(secret), "{err}");
        }
    }

    #[test]
    fn tokens_come_from_the_environment_and_are_found_by_value() {
        let config = ServerConfig {
            tokens: vec![TokenConfig {
                name: Some("alice".into()),
                token_env: Some("MNEMO_TOKEN_ALICE".into()),
                conversations: vec!["alice".into()],
                ..TokenConfig::default()
            }],
        };
        let auth = Auth::from_config(&config, |var| match var {
            API_TOKEN_ENV => Some("full-access-token-0001".into()),
            "MNEMO_TOKEN_ALICE" => Some("alice-token-000001".into()),
            _ => None,
        })
        .unwrap();
        assert!(auth.is_required());
        assert!(auth
            .find("full-access-token-0001")
            .is_some_and(|t| t.scope.is_unrestricted()));
        let alice = auth.find("alice-token-000001").unwrap();
        assert_eq!(alice.entry, "server.tokens[0] (alice)");
        assert!(!alice.scope.can_read("bob"));
        assert!(auth.find("alice-token-000002").is_none());
        let shown = format!("{auth:?}");
        assert!(
            shown.contains("alice") && !shown.contains("alice-token"),
            "{shown}"
        );
        assert!(!Auth::open().is_required());
    }

    #[test]
    fn only_bearer_credentials_are_read() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            presented(&headers)
        };
        assert!(matches!(presented(&HeaderMap::new()), Presented::Nothing));
        assert!(matches!(with("Bearer abc"), Presented::Token(t) if t == "abc"));
        assert!(matches!(with("bearer  abc "), Presented::Token(t) if t == "abc"));
        assert!(matches!(with("Basic YWxpY2U6eA=="), Presented::Malformed));
        assert!(matches!(with("Bearer "), Presented::Malformed));
    }
}
