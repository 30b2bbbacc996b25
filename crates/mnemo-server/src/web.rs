//! `/ui`: the web view ([`mnemo_web`]), and `GET /`, which sends a browser there.
//!
//! It sits behind the same guard (Host, foreign `Origin`) and the same tokens as every other
//! route. A browser cannot put a bearer token on a link or a form, so with tokens
//! configured the view asks for one once (`/ui/login`) and starts a [`WebSessions`] entry:
//! the cookie holds a random session key, never the token (a browser sends cookies to every
//! port of a host, so another local server could read it), and the key opens the web view
//! of this process only: the REST API, `/mcp` and the proxy never accept it, it ends after
//! [`SESSION_LIFETIME`], and a restart ends them all. The cookie is also `HttpOnly`,
//! `SameSite=Strict` and scoped to `/ui`. The guard's JSON-only rule does not apply under
//! `/ui`: its forms are checked by the form token every page carries instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::rejection::FormRejection;
use axum::extract::{FromRef, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use serde::Deserialize;

use mnemo_engine::MemoryClient;

use crate::auth::{Auth, AuthenticatedElsewhere, Grant, Scope};

/// The sign-in page.
pub const LOGIN_PATH: &str = "/ui/login";
/// The cookie holding a browser's session key.
const SESSION_COOKIE: &str = "mnemo_session";
/// How long a sign-in lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Browsers signed in at once; the oldest sign-in ends when another would pass this.
const MAX_SESSIONS: usize = 1024;
/// The longest token the sign-in form takes (longer ones are no token of ours).
const MAX_TOKEN_BYTES: usize = 4096;

/// What signing in to the web view reads: the tokens, and the browsers signed in.
#[derive(Clone)]
pub(crate) struct WebSignIn {
    pub auth: Auth,
    pub sessions: Arc<WebSessions>,
}

/// The web view's signed-in browsers: random keys, each with the scope of the token it
/// signed in with and when it ends. Kept in memory only.
#[derive(Default)]
pub(crate) struct WebSessions {
    sessions: Mutex<HashMap<String, (Arc<Scope>, Instant)>>,
}

impl WebSessions {
    /// A new session for `scope`; returns its key.
    fn start(&self, scope: Arc<Scope>) -> String {
        let key = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let now = Instant::now();
        let mut sessions = self.lock();
        sessions.retain(|_, (_, ends)| *ends > now);
        if sessions.len() >= MAX_SESSIONS {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, (_, ends))| *ends)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(key.clone(), (scope, now + SESSION_LIFETIME));
        key
    }

    /// The scope of the session the request's cookie names, while it lasts.
    pub(crate) fn find(&self, headers: &HeaderMap) -> Option<Arc<Scope>> {
        let key = cookie(headers, SESSION_COOKIE)?;
        let sessions = self.lock();
        let (scope, ends) = sessions.get(&key)?;
        (*ends > Instant::now()).then(|| scope.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Arc<Scope>, Instant)>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `router` with the web view nested at `/ui`, its sign-in page, and `GET /`.
pub(crate) fn mount<S>(router: Router<S>, client: MemoryClient) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    WebSignIn: FromRef<S>,
{
    let view = mnemo_web::router(mnemo_web::WebState::new(client));
    let service = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn(admit))
        .service(view);
    router
        .route("/", get(|| async { mnemo_web::home() }))
        .route(LOGIN_PATH, get(login_page).post(login))
        .nest_service(mnemo_web::UI_PATH, service)
}

/// Gives every answer under `/ui` the web view's security headers, whoever made it: the
/// view's pages and its router (404s, 405s, a 400 for a path that is not UTF-8), the
/// sign-in page, and the guard's and authentication's refusals and redirects. The server's
/// outermost layer.
pub(crate) async fn secure_web_answers(request: Request, next: Next) -> Response {
    let web = is_web_path(request.uri().path());
    let response = next.run(request).await;
    if web {
        mnemo_web::secure(response).await
    } else {
        response
    }
}

/// Whether `path` is one of the web view's.
pub(crate) fn is_web_path(path: &str) -> bool {
    path == mnemo_web::UI_PATH || path.starts_with("/ui/")
}

/// The web view's pages served without a token: `/`, which only redirects, the sign-in
/// page, and the stylesheet.
fn is_open(method: &Method, path: &str) -> bool {
    let get = matches!(*method, Method::GET | Method::HEAD);
    (get && matches!(path, "/" | "/ui/style.css")) || path == LOGIN_PATH
}

/// Signs a browser in by its session cookie, in front of authentication: a request for the
/// web view (or `/`) that carries no `Authorization` header gets the scope of the session
/// its cookie names, is served without one when the page is open, and is otherwise sent to
/// the sign-in page. A request with a header is left to authentication, as is every other
/// path: the cookie opens the web view and nothing else.
pub(crate) async fn sign_in_by_session(
    State(state): State<WebSignIn>,
    mut request: Request,
    next: Next,
) -> Response {
    let (method, path) = (request.method(), request.uri().path());
    let open = is_open(method, path);
    let ours = is_web_path(path) || open;
    if !state.auth.is_required() || !ours || request.headers().contains_key(header::AUTHORIZATION) {
        return next.run(request).await;
    }
    match state.sessions.find(request.headers()) {
        Some(scope) => {
            request.extensions_mut().insert(Grant::of(scope));
        }
        None if open => {}
        None => return Redirect::to(LOGIN_PATH).into_response(),
    }
    request.extensions_mut().insert(AuthenticatedElsewhere);
    next.run(request).await
}

/// The value of cookie `name` in the request, if it sends one.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(found, _)| *found == name)
        .map(|(_, value)| value.to_owned())
}

/// Hands the web view the request's scope as its [`mnemo_web::Viewer`]. Authentication
/// has already sent a browser without one to sign in, except on the open stylesheet; a page
/// reached without one anyway is refused by the view itself.
async fn admit(mut request: Request, next: Next) -> Response {
    if let Some(grant) = request.extensions().get::<Grant>().cloned() {
        request
            .extensions_mut()
            .insert(mnemo_web::Viewer(grant.scope()));
    }
    next.run(request).await
}

async fn login_page(State(state): State<WebSignIn>) -> Response {
    if !state.auth.is_required() {
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
    State(state): State<WebSignIn>,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    if !state.auth.is_required() {
        return Redirect::to("/ui/").into_response();
    }
    let token = match form {
        Ok(Form(form)) => form.token.trim().to_owned(),
        Err(e) => return mnemo_web::page::sign_in(StatusCode::BAD_REQUEST, Some(&e.body_text())),
    };
    let scope = match token.len() <= MAX_TOKEN_BYTES {
        true => state.auth.scope_of(&token),
        false => None,
    };
    let Some(scope) = scope else {
        return mnemo_web::page::sign_in(
            StatusCode::UNAUTHORIZED,
            Some("that is not a token this mnemo knows"),
        );
    };
    let key = state.sessions.start(scope);
    let cookie = format!(
        "{SESSION_COOKIE}={key}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_LIFETIME.as_secs()
    );
    let mut response = Redirect::to("/ui/").into_response();
    // A key is hex: always a valid header value.
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_session_key_opens_only_its_own_session_while_it_lasts() {
        let sessions = WebSessions::default();
        let key = sessions.start(Arc::new(Scope::everything()));
        assert_eq!(key.len(), 64);
        let found = sessions.find(&with_cookie(&format!("other=1; {SESSION_COOKIE}={key}")));
        assert!(found.is_some());
        for bad in ["", "zz", &key[..63]] {
            let headers = with_cookie(&format!("{SESSION_COOKIE}={bad}"));
            assert!(sessions.find(&headers).is_none(), "{bad}");
        }
        assert!(sessions.find(&HeaderMap::new()).is_none());
        // An ended session opens nothing.
        sessions.lock().get_mut(&key).unwrap().1 = Instant::now();
        assert!(sessions
            .find(&with_cookie(&format!("{SESSION_COOKIE}={key}")))
            .is_none());
    }

    #[test]
    fn sessions_are_bounded_and_the_oldest_goes_first() {
        let sessions = WebSessions::default();
        let first = sessions.start(Arc::new(Scope::everything()));
        for _ in 0..MAX_SESSIONS {
            sessions.start(Arc::new(Scope::everything()));
        }
        assert_eq!(sessions.lock().len(), MAX_SESSIONS);
        assert!(!sessions.lock().contains_key(&first));
    }
}
