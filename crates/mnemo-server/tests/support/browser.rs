//! A real browser for tests: Debian's headless Chromium driven through its ChromeDriver over
//! the W3C WebDriver protocol (plain HTTP and JSON on loopback).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The W3C key for an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Chromium: `MNEMO_CHROMIUM`, or Debian's.
fn chromium() -> PathBuf {
    program("MNEMO_CHROMIUM", "/usr/bin/chromium")
}

/// ChromeDriver: `MNEMO_CHROMEDRIVER`, or Debian's.
fn chromedriver() -> PathBuf {
    program("MNEMO_CHROMEDRIVER", "/usr/bin/chromedriver")
}

fn program(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from)
}

/// Whether the browser tests can run here: both programs are there, or which is missing.
/// Tests hand this to `mnemo_test_support::require`: a skip, or a failure under `CI=true`.
pub fn available() -> Result<(), String> {
    for (path, var) in [
        (chromium(), "MNEMO_CHROMIUM"),
        (chromedriver(), "MNEMO_CHROMEDRIVER"),
    ] {
        if !path.is_file() {
            return Err(format!(
                "{} is missing: install Debian's chromium and chromium-driver (scripts/test does, as root), or name them in {var}",
                path.display()
            ));
        }
    }
    Ok(())
}

/// One headless Chromium session.
pub struct Browser {
    http: reqwest::Client,
    session: String,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts ChromeDriver on a free loopback port and a headless Chromium session.
    pub async fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while http.get(format!("{base}/status")).send().await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not answer");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        // Without the networking flags Chromium keeps calling out, refused on a closed network.
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,1000",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": chromium(), "args": args},
            }}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {answer}"))
            .to_owned();
        Self {
            http,
            session: format!("{base}/session/{session}"),
            driver,
            _profile: profile,
        }
    }

    /// One WebDriver command of the session: its value, or the error the driver answered.
    async fn try_call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Value> {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        match answer["value"]["error"].is_string() {
            true => Err(answer["value"].clone()),
            false => Ok(answer["value"].clone()),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.try_call(method, path, body)
            .await
            .unwrap_or_else(|error| panic!("webdriver {path}: {error}"))
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// The page's URL.
    pub async fn url(&self) -> String {
        let url = self.call(reqwest::Method::GET, "/url", None).await;
        url.as_str().unwrap_or_default().to_owned()
    }

    /// The first element `css` selects.
    pub async fn find(&self, css: &str) -> String {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("{css}: {found}"))
            .to_owned()
    }

    /// Clicks an element (a link or a button: the navigation it starts is waited for).
    pub async fn click(&self, element: &str) {
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Replaces what a field holds with `text`.
    pub async fn type_into(&self, element: &str, text: &str) {
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/clear"),
            Some(json!({})),
        )
        .await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// An element's rendered text.
    pub async fn text(&self, element: &str) -> String {
        let text = self
            .call(
                reqwest::Method::GET,
                &format!("/element/{element}/text"),
                None,
            )
            .await;
        text.as_str().unwrap_or_default().to_owned()
    }

    /// Waits (up to 10 s) until an element `css` selects shows `needle`, as a page loads
    /// after a click; panics with the page's text if none does.
    pub async fn wait_for_text(&self, css: &str, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let search = json!({"using": "css selector", "value": css});
            let found = self
                .try_call(reqwest::Method::POST, "/elements", Some(search))
                .await
                .unwrap_or_default();
            for element in found.as_array().into_iter().flatten() {
                let Some(id) = element[ELEMENT].as_str() else {
                    continue;
                };
                // A page still loading may have replaced the element: look again.
                let text = self
                    .try_call(reqwest::Method::GET, &format!("/element/{id}/text"), None)
                    .await;
                if text.is_ok_and(|t| t.as_str().is_some_and(|t| t.contains(needle))) {
                    return;
                }
            }
            if Instant::now() > deadline {
                panic!("no {css} shows {needle:?}: {}", self.page_text().await);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The whole page's rendered text.
    pub async fn page_text(&self) -> String {
        let body = self.find("body").await;
        self.text(&body).await
    }

    /// Whether an alert is open (a script ran that should not have).
    pub async fn alert_open(&self) -> bool {
        match self
            .try_call(reqwest::Method::GET, "/alert/text", None)
            .await
        {
            Ok(_) => true,
            Err(error) => error["error"].as_str() != Some("no such alert"),
        }
    }

    /// Saves a screenshot of the page as `name`.png in the screenshots folder; returns it.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        use base64::Engine as _;
        let png = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        let dir = screenshots_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

/// Where screenshots are kept, as test artefacts: `target/web-screenshots/`.
pub fn screenshots_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/web-screenshots")
}

impl Browser {
    /// Ends the session (Chromium quits), then the driver.
    pub async fn quit(self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
