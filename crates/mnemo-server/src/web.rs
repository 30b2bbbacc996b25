//! `/ui`: the web view ([`mnemo_web`]), and `GET /`, which sends a browser there.
//!
//! It sits behind the same guard (Host, foreign `Origin`) and the same tokens as every other
//! route. A browser cannot put a bearer token on a link or a form, so with tokens
//! configured the view asks for one once (`/ui/login`) and keeps it in a cookie that is
//! `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page sends it) and
//! scoped to `/ui` (the REST API never accepts it). The guard's JSON-only rule does not
//! apply under `/ui`: its forms are checked by the form token every page carries instead.

use axum::extract::rejection::FormRejection;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use serde::Deserialize;

use crate::auth::Grant;
use crate::AppState;

/// The sign-in page.
pub const LOGIN_PATH: &str = "/ui/login";
/// The cookie holding a browser's token (hex-encoded: a token may hold any character).
const TOKEN_COOKIE: &str = "mnemo_token";

/// `router` with the web view nested at `/ui`, its sign-in page, and `GET /`.
pub(crate) fn mount(router: Router<AppState>, state: &AppState) -> Router<AppState> {
    let view = mnemo_web::router(mnemo_web::WebState::new(state.client.clone()));
    let service = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn(admit))
        .service(view);
    router
        .route("/", get(|| async { mnemo_web::home() }))
        .route(LOGIN_PATH, get(login_page).post(login))
        .nest_service(mnemo_web::UI_PATH, service)
}

/// Whether `path` is one of the web view's.
pub(crate) fn is_web_path(path: &str) -> bool {
    path == mnemo_web::UI_PATH || path.starts_with("/ui/")
}

/// The web view's pages served without a token: `/`, which only redirects, the sign-in
/// page, and the stylesheet.
pub(crate) fn is_open(method: &Method, path: &str) -> bool {
    let get = matches!(*method, Method::GET | Method::HEAD);
    (get && matches!(path, "/" | "/ui/style.css")) || path == LOGIN_PATH
}

/// The response that sends a browser without a valid token to the sign-in page.
pub(crate) fn sign_in_first() -> Response {
    Redirect::to(LOGIN_PATH).into_response()
}

/// The token in the request's sign-in cookie, if any.
pub(crate) fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == TOKEN_COOKIE)
        .and_then(|(_, value)| hex_decode(value))
}

/// Hands the web view the request's scope as its [`mnemo_web::Viewer`].
async fn admit(mut request: Request, next: Next) -> Response {
    let Some(grant) = request.extensions().get::<Grant>().cloned() else {
        return sign_in_first();
    };
    request
        .extensions_mut()
        .insert(mnemo_web::Viewer(grant.scope()));
    next.run(request).await
}

async fn login_page(State(state): State<AppState>) -> Response {
    if !state.options.auth.is_required() {
        return mnemo_web::home().into_response();
    }
    mnemo_web::page::sign_in(StatusCode::OK, None)
}

/// The sign-in form's field.
#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(
    State(state): State<AppState>,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    if !state.options.auth.is_required() {
        return Redirect::to("/ui/").into_response();
    }
    let token = match form {
        Ok(Form(form)) => form.token.trim().to_owned(),
        Err(e) => return mnemo_web::page::sign_in(StatusCode::BAD_REQUEST, Some(&e.body_text())),
    };
    if !state.options.auth.accepts(&token) {
        return mnemo_web::page::sign_in(
            StatusCode::UNAUTHORIZED,
            Some("that is not a token this mnemo knows"),
        );
    }
    let cookie = format!(
        "{TOKEN_COOKIE}={}; Path=/ui; HttpOnly; SameSite=Strict",
        hex_encode(&token)
    );
    let mut response = Redirect::to("/ui/").into_response();
    match HeaderValue::from_str(&cookie) {
        Ok(value) => {
            response.headers_mut().insert(header::SET_COOKIE, value);
            response
        }
        Err(_) => mnemo_web::page::sign_in(StatusCode::BAD_REQUEST, Some("unusable token")),
    }
}

fn hex_encode(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) || hex.len() > 4096 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_carries_any_token_and_refuses_garbage() {
        let token = "tok en;=,\"ü-0123456789";
        let mut headers = HeaderMap::new();
        let cookie = format!("other=1; {TOKEN_COOKIE}={}", hex_encode(token));
        headers.insert(header::COOKIE, HeaderValue::from_str(&cookie).unwrap());
        assert_eq!(cookie_token(&headers).as_deref(), Some(token));
        for bad in ["zz", "abc", "ff"] {
            let mut headers = HeaderMap::new();
            let cookie = format!("{TOKEN_COOKIE}={bad}");
            headers.insert(header::COOKIE, HeaderValue::from_str(&cookie).unwrap());
            assert_eq!(cookie_token(&headers), None, "{bad}");
        }
    }
}
