//! What every page handler gets ([`WebState`]) and the caller it serves ([`Viewer`]).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use mnemo_engine::{Access, MemoryClient};

use crate::page::WebError;

/// The caller of one request, as the server authenticated it. The server puts it in the
/// request's extensions; a page served without one is refused.
#[derive(Clone)]
pub struct Viewer(pub Arc<dyn Access>);

/// What every page handler gets.
#[derive(Clone)]
pub struct WebState {
    /// The engine.
    pub client: MemoryClient,
    /// A random value of this process that every form carries back: a page of another
    /// origin cannot read it, so it cannot forge a form mnemo accepts.
    pub form_token: Arc<str>,
}

impl WebState {
    /// The state for `client`, with a fresh form token.
    pub fn new(client: MemoryClient) -> Self {
        Self {
            client,
            form_token: uuid::Uuid::new_v4().simple().to_string().into(),
        }
    }

    /// Refused unless `presented` is this process's form token.
    pub fn check_form_token(&self, presented: &str) -> Result<(), WebError> {
        let expected = self.form_token.as_bytes();
        let same = presented.len() == expected.len()
            && presented
                .bytes()
                .zip(expected)
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0;
        if same {
            Ok(())
        } else {
            Err(WebError::new(
                StatusCode::FORBIDDEN,
                "this form did not come from one of mnemo's pages (or mnemo restarted since it was opened): reload the page and try again",
            ))
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Viewer {
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, WebError> {
        parts.extensions.get::<Viewer>().cloned().ok_or_else(|| {
            WebError::new(
                StatusCode::UNAUTHORIZED,
                "this mnemo requires a token: sign in at /ui/login",
            )
        })
    }
}
