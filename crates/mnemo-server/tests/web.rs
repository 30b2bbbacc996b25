//! The web view over real sockets: pages, escaping, hostile paths, forged forms, sign-in with
//! tokens, and a person's walk through it in headless Chromium (skipped, saying why, where
//! Chromium is not installed).

use crate::browser;
use crate::support;

use std::io::{Read, Write};
use std::path::Path;

use mnemo_core::{ApiKey, ServerConfig, TokenConfig};
use mnemo_scripted_llm::ScriptedLlm;
use mnemo_server::{Auth, ServerOptions};
use serde_json::{json, Value};
use support::*;

const XSS: &str = "<script>alert('xss')</script> I keep bees & wasps";

/// A server with a conversation `c1` holding three facts, one of them hostile HTML.
async fn server_with_facts(options: ServerOptions) -> (Server, ScriptedLlm) {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start_with(Some(llm.base_url()), options, |_| {}).await;
    let response = http()
        .post(format!("{}/v1/memories", server.url))
        .bearer_auth(FULL)
        .json(&json!({
            "texts": [XSS, "My bike is red.", "I live in Ghent."],
            "conversation_id": "c1",
        }))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body = response.text().await.unwrap();
    assert_eq!(status, 201, "{body}");
    (server, llm)
}

const FULL: &str = "full-access-token-0001";
const CAROL: &str = "carol-token-0000000001";

fn tokens() -> Auth {
    let config = ServerConfig {
        tokens: vec![
            TokenConfig {
                name: Some("full".into()),
                token: Some(ApiKey(FULL.into())),
                conversations: vec!["*".into()],
                agents: vec!["*".into()],
                ..TokenConfig::default()
            },
            TokenConfig {
                name: Some("carol".into()),
                token: Some(ApiKey(CAROL.into())),
                conversations: vec!["carol".into()],
                ..TokenConfig::default()
            },
        ],
    };
    Auth::from_config(&config, |_| None).unwrap()
}

/// A client that follows no redirects, so each answer can be checked.
fn browser_like() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Posts a form as a browser would; the status and the page.
async fn post_form(url: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let response = browser_like().post(url).form(fields).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

async fn get(url: &str) -> (u16, String) {
    let response = browser_like().get(url).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The first `<input name="form_token" value="…">` of a page.
fn form_token(page: &str) -> String {
    let at = page
        .find("name=\"form_token\" value=\"")
        .expect("a form token")
        + 25;
    page[at..at + 32].to_owned()
}

/// The id of the fact saying `text`, over REST.
async fn fact_id(server: &Server, text: &str) -> String {
    let page: Value = http()
        .get(format!(
            "{}/v1/memories?conversation_id=c1&role=memory",
            server.url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == text)
        .unwrap_or_else(|| panic!("no fact {text:?} in {page}"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn file_of(root: &Path, id: &str) -> String {
    let facts = root.join("entries/c1/facts");
    let entry = std::fs::read_dir(&facts)
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().contains(id))
        .unwrap_or_else(|| panic!("no file of {id}"));
    std::fs::read_to_string(entry.path()).unwrap()
}

fn git_log(root: &Path) -> String {
    let out = std::process::Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(root)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sends `request` as raw bytes (no client normalises its path) and returns the answer.
fn raw(url: &str, request: &str) -> String {
    let address = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

#[tokio::test(flavor = "multi_thread")]
async fn pages_escape_every_value_and_refuse_hostile_paths() {
    let (server, _llm) = server_with_facts(ServerOptions::default()).await;
    let (status, _) = get(&format!("{}/", server.url)).await;
    assert_eq!(status, 303, "GET / sends a browser to the view");

    let (status, list) = get(&format!("{}/ui/", server.url)).await;
    assert_eq!(status, 200);
    assert!(list.contains("href=\"/ui/conversations/c1\""), "{list}");
    let (status, page) = get(&format!("{}/ui/conversations/c1", server.url)).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("&lt;script&gt;alert('xss')&lt;/script&gt; I keep bees &amp; wasps"),
        "{page}"
    );
    assert!(
        !page.contains("<script>"),
        "a memory's HTML is never markup"
    );
    assert!(page.contains("3 facts, newest first"), "{page}");

    // A file a person named and dated is listed by its front matter's time, not the file's:
    // written last, it is the newest file, but its front matter makes it the oldest fact.
    std::fs::write(
        server.root.join("entries/c1/facts/hand-note.md"),
        "---\ncreated_at: \"2001-01-01T00:00:00Z\"\n---\nWritten by hand.\n",
    )
    .unwrap();
    let (_, page) = get(&format!("{}/ui/conversations/c1", server.url)).await;
    let hand = page
        .find("Written by hand.")
        .expect("the hand-written fact is listed");
    for fact in ["My bike is red.", "I live in Ghent."] {
        let at = page
            .find(fact)
            .unwrap_or_else(|| panic!("{fact} is listed"));
        assert!(at < hand, "dated 2001, the hand note comes after {fact:?}");
    }

    // Hostile ids and paths: a clear page with the right status, never a file.
    let (status, page) = get(&format!(
        "{}/ui/memories/..%2F..%2Fetc%2Fpasswd",
        server.url
    ))
    .await;
    assert_eq!(status, 400);
    assert!(page.contains("is not a memory id"), "{page}");
    let (status, page) = get(&format!(
        "{}/ui/memories/00000000-0000-4000-8000-000000000000",
        server.url
    ))
    .await;
    assert_eq!(status, 404);
    assert!(page.contains("no memory 00000000"), "{page}");
    let (status, page) = get(&format!("{}/ui/conversations/c1?show=bogus", server.url)).await;
    assert_eq!(status, 400);
    assert!(page.contains("unknown variant"), "{page}");
    // A tombstone names what replaced it, with that fact's text.
    let bike = fact_id(&server, "My bike is red.").await;
    let deleted = server.root.join("entries/c1/deleted/facts");
    std::fs::create_dir_all(&deleted).unwrap();
    std::fs::write(
        deleted.join("20240101T000000000Z__6d7f5a52-5c1e-4d7a-9a51-1f0e2b3c4d5e.md"),
        format!(
            "---\nid: 6d7f5a52-5c1e-4d7a-9a51-1f0e2b3c4d5e\nconversation_id: c1\nrole: memory\ncreated_at: \"2024-01-01T00:00:00Z\"\nreplaced_by: {bike}\ndeleted_at: \"2024-02-01T00:00:00Z\"\n---\nMy bike is yellow.\n"
        ),
    )
    .unwrap();
    let (_, page) = get(&format!("{}/ui/conversations/c1?show=deleted", server.url)).await;
    assert!(page.contains("My bike is yellow."), "{page}");
    assert!(
        page.contains(&format!("href=\"/ui/memories/{bike}\"")),
        "{page}"
    );
    assert!(page.contains(": “My bike is red.”"), "{page}");

    // Absurd page numbers are a page past the end, or a 400 when they are no number.
    let (status, page) = get(&format!(
        "{}/ui/conversations/c1?page=18446744073709551615",
        server.url
    ))
    .await;
    assert_eq!(status, 200, "{page}");
    assert!(!page.contains("My bike is red."));
    let (status, _) = get(&format!(
        "{}/ui/conversations/c1?page=99999999999999999999999",
        server.url
    ))
    .await;
    assert_eq!(status, 400);
    let (status, page) = get(&format!("{}/ui/conversations/nobody", server.url)).await;
    assert_eq!(status, 404);
    assert!(page.contains("no conversation"), "{page}");
    let (status, page) = get(&format!("{}/ui/conversations/..%2Fsecrets", server.url)).await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("conversation:"), "{page}");
    for path in [
        "/ui/../../../../etc/passwd",
        "/ui/%2e%2e/%2e%2e/etc/passwd",
        "/ui/..%2f..%2fCargo.toml",
        "/ui/conversations/c1/../../../etc/passwd",
        "/ui/sessions/%2e%2e",
        "/ui/memories/%2e%2e%2f%2e%2e%2fCargo.toml",
    ] {
        let answer = raw(
            &server.url,
            &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        );
        let status = answer.split(' ').nth(1).unwrap_or_default();
        assert!(
            ["400", "404"].contains(&status),
            "{path}: {}",
            answer.lines().next().unwrap_or_default()
        );
        assert!(!answer.contains("root:"), "{path} served a file");
    }
    let (status, _) = get(&format!("{}/ui/memories/x/versions/zz", server.url)).await;
    assert_eq!(status, 400);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn edits_and_deletes_go_through_the_engine_and_forged_forms_do_not() {
    let (server, _llm) = server_with_facts(ServerOptions::default()).await;
    let id = fact_id(&server, "My bike is red.").await;
    let memory_url = format!("{}/ui/memories/{id}", server.url);
    let (status, page) = get(&memory_url).await;
    assert_eq!(status, 200);
    let token = form_token(&page);

    // A form posted without the page's token, or from another origin, changes nothing.
    let zeros = "0".repeat(32);
    let edit_url = format!("{memory_url}/edit");
    let (status, forged) = post_form(
        &edit_url,
        &[("content", "My bike is stolen."), ("form_token", &zeros)],
    )
    .await;
    assert_eq!(status, 403);
    assert!(forged.contains("did not come from one of mnemo's pages"));
    let foreign = browser_like()
        .post(format!("{memory_url}/edit"))
        .header("Origin", "http://evil.example")
        .form(&[
            ("content", "My bike is stolen."),
            ("form_token", token.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    assert!(file_of(&server.root, &id).contains("My bike is red."));

    // The real form: the file changes, git records it, the index follows.
    let (status, _) = post_form(
        &edit_url,
        &[
            ("content", "My bike is blue.\r\nIt has a bell."),
            ("form_token", &token),
        ],
    )
    .await;
    assert_eq!(status, 303);
    let file = file_of(&server.root, &id);
    assert!(file.contains("My bike is blue.\nIt has a bell."), "{file}");
    assert!(
        file.contains(&format!("id: {id}")),
        "front matter kept: {file}"
    );
    assert!(git_log(&server.root).contains("mnemo: c1: 1 edited on request"));
    let (_, found) = post(
        &format!("{}/v1/memories/search", server.url),
        json!({"query": "what colour is my bicycle", "conversation_id": "c1", "top_k": 1}),
    )
    .await;
    assert_eq!(
        found["hits"][0]["content"],
        "My bike is blue.\nIt has a bell."
    );

    // The history shows the change as a diff, and the old version.
    let (_, page) = get(&memory_url).await;
    assert!(page.contains("<del>-My bike is red.\n</del>"), "{page}");
    assert!(page.contains("<ins>+My bike is blue.\n</ins>"), "{page}");
    let history: Value = http()
        .get(format!("{}/v1/memories/{id}/history", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let first = history["versions"].as_array().unwrap().last().unwrap()["commit"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, old) = get(&format!("{memory_url}/versions/{}", &first[..10])).await;
    assert_eq!(status, 200);
    assert!(old.contains("My bike is red."), "{old}");

    // A person's own commit shows as a hand edit.
    let path = std::fs::read_dir(server.root.join("entries/c1/facts"))
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().contains(&id))
        .unwrap()
        .path();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("It has a bell.", "It has two bells.")).unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=Ana", "-c", "user.email=ana@example.org"])
            .args(args)
            .current_dir(&server.root)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    git(&["commit", "-qam", "two bells, not one"]);
    let (_, page) = get(&memory_url).await;
    assert!(page.contains("Ana (hand edit)"), "{page}");
    assert!(page.contains("two bells, not one"), "{page}");
    assert!(page.contains("<ins>+It has two bells.\n</ins>"), "{page}");

    // An empty text is refused with a reason; delete tombstones it.
    let (status, empty) = post_form(&edit_url, &[("content", "  "), ("form_token", &token)]).await;
    assert_eq!(status, 400);
    assert!(empty.contains("delete the memory instead"));
    let (status, _) = post_form(&format!("{memory_url}/delete"), &[("form_token", &token)]).await;
    assert_eq!(status, 303);
    let (_, tombstones) = get(&format!("{}/ui/conversations/c1?show=deleted", server.url)).await;
    assert!(tombstones.contains("tombstone"), "{tombstones}");
    assert!(
        tombstones.contains("1 deleted on request"),
        "why: {tombstones}"
    );
    let (status, page) = get(&memory_url).await;
    assert_eq!(status, 200, "a deleted memory still shows its history");
    assert!(page.contains("deleted: the last version in git is shown"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_tokens_a_browser_signs_in_and_sees_only_its_scope() {
    let options = ServerOptions {
        auth: tokens(),
        ..ServerOptions::default()
    };
    let (server, _llm) = server_with_facts(options).await;
    let (status, _) = get(&format!("{}/ui/conversations/c1", server.url)).await;
    assert_eq!(status, 303, "sent to sign in");
    let (status, page) = get(&format!("{}/ui/login", server.url)).await;
    assert_eq!(status, 200);
    assert!(page.contains("type=\"password\""));
    let (status, css) = get(&format!("{}/ui/style.css", server.url)).await;
    assert_eq!(status, 200, "the sign-in page is styled");
    assert!(css.contains("font"), "{css}");
    let forged = browser_like()
        .get(format!("{}/ui/", server.url))
        .header("Cookie", format!("mnemo_session={}", "0".repeat(64)))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 303, "a made-up session opens nothing");
    let login_url = format!("{}/ui/login", server.url);
    let (status, _) = post_form(&login_url, &[("token", &"x".repeat(5000))]).await;
    assert_eq!(status, 401);

    let (status, _) = post_form(&login_url, &[("token", "not-a-token-at-all-000")]).await;
    assert_eq!(status, 401);
    let signed_in = |token: &'static str| {
        let url = server.url.clone();
        async move {
            let answer = browser_like()
                .post(format!("{url}/ui/login"))
                .form(&[("token", token)])
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 303);
            let cookie = answer.headers()["set-cookie"].to_str().unwrap().to_owned();
            assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
            assert!(cookie.contains("Path=/ui") && cookie.contains("Max-Age="));
            let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
            assert!(
                !cookie.contains(token) && !cookie.contains(&hex),
                "the cookie holds a session key, never the token"
            );
            cookie.split(';').next().unwrap().to_owned()
        }
    };
    let full = signed_in(FULL).await;
    let page = |cookie: String, path: &'static str| {
        let url = server.url.clone();
        async move {
            let answer = browser_like()
                .get(format!("{url}{path}"))
                .header("Cookie", cookie)
                .send()
                .await
                .unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };
    let (status, body) = page(full.clone(), "/ui/conversations/c1").await;
    assert_eq!(status, 200);
    assert!(body.contains("My bike is red."));
    // The cookie opens the web view only, never the REST API.
    let rest = browser_like()
        .get(format!("{}/v1/memories?conversation_id=c1", server.url))
        .header("Cookie", full.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), 401);

    let carol = signed_in(CAROL).await;
    let (status, body) = page(carol.clone(), "/ui/conversations/c1").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("may not read conversation"), "{body}");
    let (status, body) = page(carol, "/ui/").await;
    assert_eq!(status, 200);
    assert!(
        !body.contains("/ui/conversations/c1"),
        "c1 is not listed for carol"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_browses_searches_reads_history_and_edits_in_chromium() {
    mnemo_test_support::skip_unless!(browser::available());
    let (server, _llm) = server_with_facts(ServerOptions::default()).await;
    let browser = browser::Browser::start().await;
    browser.goto(&format!("{}/", server.url)).await;
    assert!(
        browser.url().await.ends_with("/ui/"),
        "redirected to the view"
    );
    assert!(browser.page_text().await.contains("Conversations"));
    browser.screenshot("conversations").await;

    let link = browser.find("a[href='/ui/conversations/c1']").await;
    browser.click(&link).await;
    browser.wait_for_text("h1", "Conversation").await;
    let text = browser.page_text().await;
    assert!(text.contains(XSS), "the hostile fact shows as text: {text}");
    assert!(!browser.alert_open().await, "no script ran");
    browser.screenshot("conversation").await;

    let query = browser.find("form.search input[name=q]").await;
    browser.type_into(&query, "what colour is my bicycle").await;
    let search = browser.find("form.search button").await;
    browser.click(&search).await;
    browser.wait_for_text("p.count", "hits").await;
    assert!(browser.url().await.contains("/ui/search?"));
    let first = browser.find("table.hits tbody tr td div.content").await;
    assert_eq!(browser.text(&first).await, "My bike is red.");
    let headers = browser.find("table.hits thead").await;
    let headers = browser.text(&headers).await;
    for stage in ["Dense", "Lexical", "Fused", "Rerank", "Recency", "Combined"] {
        assert!(headers.contains(stage), "{headers}");
    }
    browser.screenshot("search").await;

    let memory = browser.find("table.hits tbody tr td a").await;
    browser.click(&memory).await;
    browser.wait_for_text("h2", "History").await;
    assert!(browser.url().await.contains("/ui/memories/"));
    let id = browser.url().await.rsplit('/').next().unwrap().to_owned();
    let content = browser.find("form.edit textarea").await;
    browser.type_into(&content, "My bike is green now.").await;
    let save = browser.find("form.edit button").await;
    browser.click(&save).await;
    browser
        .wait_for_text("pre.diff ins", "+My bike is green now.")
        .await;
    assert!(file_of(&server.root, &id).contains("My bike is green now."));
    browser.screenshot("memory-history").await;

    let old = browser.find("article.version:last-of-type header a").await;
    browser.click(&old).await;
    browser.wait_for_text("pre.text", "My bike is red.").await;
    browser.screenshot("old-version").await;

    browser
        .goto(&format!("{}/ui/memories/not-a-memory", server.url))
        .await;
    browser.wait_for_text("p.error", "is not a memory id").await;
    browser.screenshot("error").await;
    browser.goto(&format!("{}/ui/sessions", server.url)).await;
    browser.screenshot("sessions").await;
    browser.quit().await;
    server.shutdown().await;
}

/// Adds `text` to conversation `c2` over REST, as its own write pass.
async fn add_to_c2(server: &Server, text: &str) {
    let response = http()
        .post(format!("{}/v1/memories", server.url))
        .json(&json!({"texts": [text], "conversation_id": "c2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_resolves_a_conflict_in_chromium() {
    mnemo_test_support::skip_unless!(browser::available());
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start_with(Some(llm.base_url()), ServerOptions::default(), |_| {}).await;
    add_to_c2(&server, "I live in Ghent.").await;
    add_to_c2(&server, "I keep bees.").await;
    add_to_c2(&server, "I live in Leuven.").await;

    let browser = browser::Browser::start().await;
    browser
        .goto(&format!("{}/ui/conversations/c2", server.url))
        .await;
    let tab = browser
        .find("nav.tabs a[href='/ui/conversations/c2/conflicts']")
        .await;
    browser.click(&tab).await;
    browser.wait_for_text("h1", "Conflicts in").await;
    let earlier = browser
        .find("section.conflict div.side:first-of-type")
        .await;
    let later = browser
        .find("section.conflict div.side:nth-of-type(2)")
        .await;
    let (earlier, later) = (browser.text(&earlier).await, browser.text(&later).await);
    assert!(
        earlier.starts_with("Earlier") && earlier.contains("I live in Ghent."),
        "{earlier}"
    );
    assert!(
        later.starts_with("Later") && later.contains("I live in Leuven."),
        "{later}"
    );
    assert!(
        !browser.page_text().await.contains("bees"),
        "an unrelated fact is no conflict"
    );
    browser.screenshot("conflicts").await;

    let keep_later = browser
        .find("section.conflict form.resolve:first-of-type button")
        .await;
    assert_eq!(browser.text(&keep_later).await, "Keep the later");
    browser.click(&keep_later).await;
    browser.wait_for_text("p.empty", "No open conflicts.").await;
    browser.screenshot("conflicts-resolved").await;
    browser.quit().await;

    // The earlier fact is a tombstone that says why and what holds, and git has it.
    let deleted = server.root.join("entries/c2/deleted/facts");
    let tombstones: Vec<String> = std::fs::read_dir(&deleted)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert_eq!(tombstones.len(), 1, "{tombstones:?}");
    assert!(
        tombstones[0].contains("I live in Ghent."),
        "{}",
        tombstones[0]
    );
    assert!(
        tombstones[0].contains("conflict resolved by a person: the later fact holds"),
        "{}",
        tombstones[0]
    );
    assert!(tombstones[0].contains("replaced_by: "), "{}", tombstones[0]);
    assert!(
        git_log(&server.root).contains("the later fact holds"),
        "{}",
        git_log(&server.root)
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_or_stale_resolve_form_changes_nothing() {
    let llm = ScriptedLlm::with_handler(model).await;
    let server = Server::start_with(Some(llm.base_url()), ServerOptions::default(), |_| {}).await;
    add_to_c2(&server, "I live in Ghent.").await;
    add_to_c2(&server, "I live in Leuven.").await;
    let url = format!("{}/ui/conversations/c2/conflicts", server.url);
    let (status, page) = get(&url).await;
    assert_eq!(status, 200, "{page}");
    let token = form_token(&page);
    let id_after = |label: &str| {
        let at = page.find(&format!("name=\"{label}\" value=\"")).unwrap() + label.len() + 15;
        page[at..at + 36].to_owned()
    };
    let (earlier, later) = (id_after("earlier"), id_after("later"));
    let resolve = format!("{url}/resolve");
    let forged = [
        ("form_token", "0".repeat(32)),
        ("earlier", earlier.clone()),
        ("later", later.clone()),
        ("resolution", "keep_later".into()),
    ];
    let forged: Vec<(&str, &str)> = forged.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, _) = post_form(&resolve, &forged).await;
    assert_eq!(status, 403);
    let backwards = [
        ("form_token", token.as_str()),
        ("earlier", later.as_str()),
        ("later", earlier.as_str()),
        ("resolution", "keep_later"),
    ];
    let (status, body) = post_form(&resolve, &backwards).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("no conflict between"), "{body}");
    let odd = [
        ("form_token", token.as_str()),
        ("earlier", earlier.as_str()),
        ("later", later.as_str()),
        ("resolution", "keep_both_please"),
    ];
    let (status, _) = post_form(&resolve, &odd).await;
    assert_eq!(status, 400);
    // Still open, both facts live.
    let (_, page) = get(&url).await;
    assert!(
        page.contains("I live in Ghent.") && page.contains("I live in Leuven."),
        "{page}"
    );
    server.shutdown().await;
}

/// The scripted upstream, which also writes compaction summaries.
fn summarising_model(request: &mnemo_scripted_llm::ChatRequest) -> mnemo_scripted_llm::Reply {
    if request
        .system_prompt()
        .is_some_and(|s| s.contains("conversation summariser"))
    {
        return mnemo_scripted_llm::Reply::text("SUMMARY of the listing");
    }
    model(request)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_page_shows_its_context_use_and_marks_compacted_and_offloaded_items() {
    let llm = ScriptedLlm::with_handler(summarising_model).await;
    let server = Server::start(Some(llm.base_url())).await;
    let output: String = (0..400).map(|i| format!("line {i}\n")).collect();
    let mut request = json!({"model": "m", "memory_top_k": 0, "memory_session": "t", "messages": [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": output},
    ]});
    request["memory_strategy"] = json!({"mode": "auto", "offload_tokens": 100});
    let (status, body) = post(&format!("{}/v1/chat/completions", server.url), request).await;
    assert_eq!(status, 200, "{body}");
    let next = json!({"model": "m", "memory_top_k": 0, "memory_session": "t", "messages": [
        {"role": "user", "content": "and now <b>bold</b>?"}]});
    let (status, body) = post(&format!("{}/v1/chat/completions", server.url), next).await;
    assert_eq!(status, 200, "{body}");
    let (status, report) = post(&format!("{}/v1/sessions/t/compact", server.url), json!({})).await;
    assert_eq!(status, 200, "{report}");
    let compacted = report["compacted_messages"].as_u64().unwrap() as usize;
    assert!(compacted > 0, "{report}");

    let (status, list) = get(&format!("{}/ui/sessions", server.url)).await;
    assert_eq!(status, 200);
    assert!(list.contains("href=\"/ui/sessions/t\""), "{list}");
    assert!(list.contains("<meter"), "a usage bar: {list}");
    let (status, page) = get(&format!("{}/ui/sessions/t", server.url)).await;
    assert_eq!(status, 200);
    assert!(page.contains("<meter class=\"usage\""), "{page}");
    assert!(page.contains("1 compressions"), "{page}");
    // Both answers were counted while the compaction ran; "m" has no price.
    assert!(page.contains("Spent upstream: 2 answers"), "{page}");
    assert!(page.contains("2 with no known price"), "{page}");
    assert_eq!(
        page.matches("class=\"message compacted").count(),
        compacted,
        "every compacted message is marked: {page}"
    );
    assert!(
        page.contains("offloaded</span>"),
        "the tool output is marked: {page}"
    );
    assert!(page.contains("line 399"), "the log is shown whole");
    assert!(page.contains("and now &lt;b&gt;bold&lt;/b&gt;?"), "escaped");
    let (status, page) = get(&format!(
        "{}/ui/sessions/t?page=18446744073709551615",
        server.url
    ))
    .await;
    assert_eq!(status, 200, "{page}");
    let (status, _) = get(&format!("{}/ui/sessions/nope", server.url)).await;
    assert_eq!(status, 404);
    server.shutdown().await;
}

/// The headers every answer under `/ui` carries, checked on a raw answer's header lines.
fn assert_secured(what: &str, head: &str) {
    let head = head.to_ascii_lowercase();
    for line in [
        "content-security-policy: default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        "x-frame-options: deny",
        "x-content-type-options: nosniff",
        "referrer-policy: same-origin",
        "cache-control: ",
    ] {
        assert!(head.contains(line), "{what}: no {line:?} in\n{head}");
    }
}

/// Sends `method path` raw (no client normalises or checks the path); the status and the
/// answer's head.
fn raw_head(url: &str, method: &str, path: &str, extra: &str) -> (u16, String) {
    let host = url.trim_start_matches("http://");
    let answer = raw(
        url,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    );
    let head = answer
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_answer_under_ui_carries_the_security_headers() {
    let (server, _llm) = server_with_facts(ServerOptions::default()).await;
    let url = &server.url;
    for (method, path, expected) in [
        ("GET", "/ui/", 200),
        ("GET", "/ui/search", 200),
        ("GET", "/ui/style.css", 200),
        ("GET", "/ui/nowhere", 404),
        ("GET", "/ui/memories/not-an-id", 400),
        // Made by the router itself, not by a page.
        ("POST", "/ui/search", 405),
        ("DELETE", "/ui/", 405),
        ("PUT", "/ui/sessions", 405),
        ("GET", "/ui/memories/%FF", 400),
        ("GET", "/ui/conversations/%FF%FE", 400),
        ("GET", "/ui/sessions/%C3%28", 400),
    ] {
        let (status, head) = raw_head(url, method, path, "");
        assert_eq!(status, expected, "{method} {path}: {head}");
        assert_secured(&format!("{method} {path}"), &head);
    }
    let (_, head) = raw_head(url, "GET", "/ui/style.css", "");
    assert!(
        head.to_ascii_lowercase()
            .contains("cache-control: max-age=300"),
        "the stylesheet keeps its own caching: {head}"
    );
    server.shutdown().await;

    // With tokens: the sign-in page, the redirect to it, a refused sign-in.
    let options = ServerOptions {
        auth: tokens(),
        ..ServerOptions::default()
    };
    let (server, _llm) = server_with_facts(options).await;
    let url = &server.url;
    for (method, path, extra, expected) in [
        ("GET", "/ui/login", "", 200),
        ("GET", "/ui/", "", 303),
        ("GET", "/ui/memories/%FF", "", 303),
        (
            "POST",
            "/ui/login",
            "Content-Type: application/x-www-form-urlencoded\r\n",
            400,
        ),
    ] {
        let (status, head) = raw_head(url, method, path, extra);
        assert_eq!(status, expected, "{method} {path}: {head}");
        assert_secured(&format!("{method} {path} (tokens)"), &head);
    }
    server.shutdown().await;
}
