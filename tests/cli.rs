//! The `mnemo` binary end to end: real files, the real embedding model, the real index.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

struct Store {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Store {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("mem");
        Self { _dir: dir, root }
    }

    fn mnemo(&self, args: &[&str]) -> Output {
        self.mnemo_with_stdin(args, None)
    }

    fn mnemo_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        self.mnemo_with_env(args, stdin, &[])
    }

    fn mnemo_with_env(&self, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mnemo"));
        cmd.args(args)
            .envs(env.iter().copied())
            .arg("--memory-path")
            .arg(&self.root)
            .env_remove("RUST_LOG")
            .env_remove("MNEMO_CONFIG")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("mnemo runs");
        if let Some(text) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        child.wait_with_output().unwrap()
    }

    fn ok_json(&self, args: &[&str]) -> Value {
        let out = self.mnemo(args);
        assert_success(&out);
        serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
    }
}

fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn contents(hits: &Value) -> Vec<String> {
    hits.as_array()
        .unwrap()
        .iter()
        .map(|h| h["content"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn add_then_search_returns_scores_ids_and_files() {
    let store = Store::new();
    let added = store.ok_json(&[
        "add",
        "--json",
        "Anne is my wife.",
        "I dislike pizza.",
        "My bike is a green Bianchi.",
    ]);
    assert_eq!(added.as_array().unwrap().len(), 3);

    let hits = store.ok_json(&["search", "who is my wife", "-k", "2", "--json"]);
    let hits_list = hits.as_array().unwrap();
    assert_eq!(hits_list.len(), 2);
    assert_eq!(hits_list[0]["content"], "Anne is my wife.");
    assert!(hits_list[0]["score"].as_f64().unwrap() > hits_list[1]["score"].as_f64().unwrap());
    let path = PathBuf::from(hits_list[0]["path"].as_str().unwrap());
    assert!(path.starts_with(
        store
            .root
            .canonicalize()
            .unwrap()
            .join("entries/default/facts")
    ));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(&format!("id: {}", hits_list[0]["id"].as_str().unwrap())));

    let human = store.mnemo(&["search", "pizza"]);
    assert_success(&human);
    let stdout = String::from_utf8_lossy(&human.stdout);
    assert!(
        stdout.lines().next().unwrap().contains("I dislike pizza."),
        "{stdout}"
    );
}

#[test]
fn a_search_from_the_terminal_expands_with_the_whole_vocabulary() {
    let store = Store::new();
    // Lexical only: "books" shares no word with the memories; only the store's word "novel",
    // offered by vocabulary expansion, finds one (document expansion, which could too, is
    // off).
    let config = store._dir.path().join("mnemo.toml");
    std::fs::write(
        &config,
        "[retrieval]\ndense = false\nvocabulary_expansion = 1\ndocument_expansion = 0\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let mut texts = vec![
        "I finished a long novel last night.".to_owned(),
        "That novel sounds wonderful.".to_owned(),
        "The weather was lovely today.".to_owned(),
        "My guitar needs new strings.".to_owned(),
    ];
    // A word is a candidate when at most a tenth of the memories use it.
    texts.extend((0..20).map(|i| format!("Ran an errand, number {i}.")));
    let mut args = vec!["--config", config, "add", "--json"];
    args.extend(texts.iter().map(String::as_str));
    store.ok_json(&args);

    let search = [
        "--config",
        config,
        "search",
        "Which books has Ann enjoyed?",
        "-k",
        "1",
        "--json",
    ];
    // The first search builds the vocabulary (and keeps its vectors); the second reads them.
    for _ in 0..2 {
        let hits = store.ok_json(&search);
        assert_eq!(contents(&hits).len(), 1, "{hits}");
        assert!(contents(&hits)[0].contains("novel"), "{hits}");
    }
    let kept = store.root.join("vocabulary.bin");
    assert!(kept.is_file());
    let ignored = std::fs::read_to_string(store.root.join(".gitignore")).unwrap();
    assert!(ignored.lines().any(|l| l == "/vocabulary.bin"), "{ignored}");
}

#[test]
fn stdin_files_and_json_input_with_per_item_conversations() {
    let store = Store::new();
    let out = store.mnemo_with_stdin(&["add", "-c", "home"], Some("- I water the plants on Sundays\n* The cat is called Miso\n\n1. The boiler was serviced in May\n"));
    assert_success(&out);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memories.json");
    std::fs::write(
        &file,
        r#"[{"content": "Standup is at 9:30", "conversation_id": "work"}, "Bring the blue notebook"]"#,
    )
    .unwrap();
    assert_success(&store.mnemo(&["add", "-c", "home", "-f", file.to_str().unwrap()]));

    let home = store.ok_json(&["list", "-c", "home", "--json"]);
    let mut got = contents(&home);
    got.sort();
    assert_eq!(
        got,
        [
            "Bring the blue notebook",
            "I water the plants on Sundays",
            "The boiler was serviced in May",
            "The cat is called Miso"
        ]
    );
    let work = store.ok_json(&["list", "-c", "work", "--json"]);
    assert_eq!(contents(&work), ["Standup is at 9:30"]);
    assert_eq!(
        store.ok_json(&["list", "--json"]).as_array().unwrap().len(),
        5
    );
}

#[test]
fn search_sees_the_conversation_and_global_but_not_other_conversations() {
    let store = Store::new();
    assert_success(&store.mnemo(&["add", "-c", "global", "The user is allergic to peanuts."]));
    assert_success(&store.mnemo(&["add", "-c", "alice", "Alice is allergic to cats."]));
    assert_success(&store.mnemo(&["add", "-c", "bob", "Bob is allergic to pollen."]));
    let hits = store.ok_json(&["search", "allergies", "-c", "alice", "-k", "10", "--json"]);
    let mut got = contents(&hits);
    got.sort();
    assert_eq!(
        got,
        [
            "Alice is allergic to cats.",
            "The user is allergic to peanuts."
        ]
    );
}

#[test]
fn hostile_conversation_ids_are_refused_and_nothing_is_written() {
    let store = Store::new();
    let parent = store.root.parent().unwrap().to_owned();
    let long = "a".repeat(300);
    for bad in ["../x", "a/b", ".git", "", long.as_str(), "a\nb", "a\0b"] {
        // A NUL cannot cross exec; pass it through JSON input instead.
        let out = if bad.contains('\0') {
            let json = serde_json::json!([{"content": "x", "conversation_id": bad}]).to_string();
            store.mnemo_with_stdin(&["add"], Some(&json))
        } else {
            store.mnemo(&["add", "-c", bad, "a memory"])
        };
        assert_eq!(out.status.code(), Some(2), "{bad:?} should be refused");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("conversation id"), "{bad:?}: {stderr}");
        if !bad.contains('\0') {
            let out = store.mnemo(&["search", "x", "-c", bad]);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{bad:?} should be refused by search"
            );
        }
    }
    let entries: Vec<_> = std::fs::read_dir(&parent)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        entries.iter().all(|n| n == "mem"),
        "written outside the store: {entries:?}"
    );
    assert!(!store.root.join("entries").exists() || walk(&store.root.join("entries")).is_empty());
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files
}

#[test]
fn bad_input_gets_a_clear_error_and_exit_code_2() {
    let store = Store::new();
    let out = store.mnemo_with_stdin(&["add"], Some("[\"unterminated"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("JSON"));
    let out = store.mnemo_with_stdin(&["add"], Some("\n\n"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to add"));
    let out = store.mnemo(&["add", "-f", "/nonexistent/file.txt"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/file.txt"));
}

#[test]
fn hand_edits_between_runs_are_picked_up() {
    let store = Store::new();
    let added = store.ok_json(&["add", "--json", "The spare key is under the blue pot."]);
    let path = PathBuf::from(added[0]["path"].as_str().unwrap());

    // A note written by hand, without front matter, is searchable on the next run.
    let facts = path.parent().unwrap();
    std::fs::write(
        facts.join("garden.md"),
        "The tomatoes are planted along the south fence.\n",
    )
    .unwrap();
    let hits = store.ok_json(&["search", "where are the tomatoes", "-k", "1", "--json"]);
    assert_eq!(
        contents(&hits),
        ["The tomatoes are planted along the south fence."]
    );

    // Editing a file re-indexes it; deleting one removes it from search.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("blue pot", "red watering can")).unwrap();
    let hits = store.ok_json(&["search", "spare key", "-k", "1", "--json"]);
    assert_eq!(
        contents(&hits),
        ["The spare key is under the red watering can."]
    );
    std::fs::remove_file(&path).unwrap();
    let hits = store.ok_json(&["search", "spare key", "-k", "5", "--json"]);
    assert_eq!(
        contents(&hits),
        ["The tomatoes are planted along the south fence."]
    );

    // A broken file is skipped with a warning naming it; the command still succeeds.
    std::fs::write(facts.join("broken.md"), "---\nid: [\n---\ntext\n").unwrap();
    let out = store.mnemo(&["search", "tomatoes"]);
    assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken.md"));
}

#[test]
fn the_example_store_is_searchable() {
    let store = Store::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("memory_db.example");
    copy_dir(&example.join("entries"), &store.root.join("entries"));

    let hits = store.ok_json(&[
        "search",
        "food allergies",
        "-c",
        "trip-japan",
        "-k",
        "3",
        "--json",
    ]);
    assert_eq!(
        hits[0]["content"],
        "Maya is vegetarian and allergic to peanuts."
    );
    assert_eq!(hits[0]["conversation_id"], "global");

    let hits = store.ok_json(&[
        "search",
        "Tokyo itinerary",
        "-c",
        "trip-japan",
        "-k",
        "20",
        "--json",
    ]);
    let got = contents(&hits);
    assert!(
        !got.iter().any(|c| c.contains("ends in Tokyo")),
        "tombstones are not searched: {got:?}"
    );
    assert!(!hits
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["role"] == "summary"));
    assert!(got.iter().any(|c| c.contains("Jonas dislikes crowds")));

    let cooking = store.ok_json(&["list", "-c", "cooking", "--json"]);
    assert!(contents(&cooking)
        .iter()
        .any(|c| c.starts_with("Hand-written note")));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

#[test]
fn missing_models_name_the_path_and_the_setup_command() {
    let store = Store::new();
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["search", "x", "--memory-path"])
        .arg(&store.root)
        .env("MNEMO_MODELS_DIR", "/nonexistent/models")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/models"), "{stderr}");
    assert!(stderr.contains("scripts/setup"), "{stderr}");
}

#[test]
fn the_models_words_are_prepared_and_reported() {
    let store = Store::new();
    let status = store.ok_json(&["models", "--prepare-words", "--json"]);
    let words = &status["model_words"];
    assert_eq!(words["installed"], true, "{status}");
    assert!(
        words["path"]
            .as_str()
            .unwrap()
            .ends_with("all-MiniLM-L6-v2/mnemo-words.bin"),
        "{status}"
    );
    let out = store.mnemo(&["models", "--prepare-words"]);
    assert_success(&out);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("21245 model words"), "{said}");
    // Without the model, the reason names what is missing.
    let out = store.mnemo_with_env(
        &["models", "--prepare-words"],
        None,
        &[("MNEMO_MODELS_DIR", "/nonexistent/models")],
    );
    assert_eq!(out.status.code(), Some(3));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("/nonexistent/models"), "{said}");
    assert!(said.contains("scripts/setup"), "{said}");
}

#[test]
fn reindex_and_status_report_on_the_index() {
    let store = Store::new();
    assert_success(&store.mnemo(&["add", "One fact.", "Another fact."]));
    let report = store.ok_json(&["reindex", "--json"]);
    assert_eq!(report["files"], 2);
    assert_eq!(report["embedded"], 0, "nothing changed since the add");
    let report = store.ok_json(&["reindex", "--full", "--json"]);
    assert_eq!(report["embedded"], 2, "--full re-embeds everything");
    assert!(report["files_per_s"].as_f64().unwrap() > 0.0);
    let status = store.ok_json(&["status", "--json"]);
    assert_eq!(status["files"], 2);
    assert_eq!(status["points"], 2);
    assert_eq!(status["index_backend"]["kind"], "embedded");
    assert_eq!(status["missing"], serde_json::json!([]));
    assert_eq!(status["orphans"], serde_json::json!([]));
    let human = store.mnemo(&["reindex"]);
    assert_success(&human);
    assert!(String::from_utf8_lossy(&human.stdout).contains("files/s"));
}

#[test]
fn the_index_on_a_qdrant_server_is_reported_and_an_unreachable_one_exits_5() {
    let store = Store::new();
    let dead = {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        format!("http://127.0.0.1:{port}")
    };
    let out = store.mnemo_with_env(&["status"], None, &[("MNEMO_INDEX_URL", &dead)]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&dead), "{stderr}");
    assert!(
        stderr.contains("unavailable") || stderr.contains("not answer"),
        "{stderr}"
    );

    mnemo_test_support::skip_unless!(mnemo_test_support::qdrant::binary());
    let qdrant =
        mnemo_test_support::qdrant::LocalQdrant::start(&store.root.with_extension("qdrant"), 1)
            .unwrap_or_else(|e| panic!("{e}"));
    let url = qdrant.grpc_url(0);
    let env = [
        ("MNEMO_INDEX_URL", url.as_str()),
        ("MNEMO_INDEX_COLLECTION", "team"),
    ];
    let json = |args: &[&str]| -> Value {
        let out = store.mnemo_with_env(args, None, &env);
        assert_success(&out);
        serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
    };
    json(&["add", "--json", "One fact.", "Another fact."]);
    assert_eq!(json(&["reindex", "--json"])["embedded"], 0);
    assert_eq!(json(&["reindex", "--full", "--json"])["embedded"], 2);
    let status = json(&["status", "--json"]);
    assert_eq!(
        (&status["files"], &status["points"]),
        (&2.into(), &2.into())
    );
    assert_eq!(
        status["index_backend"],
        serde_json::json!({"kind": "qdrant", "url": url, "collection": "team"})
    );
    let human = store.mnemo_with_env(&["status"], None, &env);
    assert_success(&human);
    let stdout = String::from_utf8_lossy(&human.stdout);
    assert!(
        stdout.contains(&format!("2 points (Qdrant at {url}, collection \"team\")")),
        "{stdout}"
    );
    // No embedded engine under the store's folder (only the old place of the lock file).
    let embedded: Vec<_> = std::fs::read_dir(store.root.join("index"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert!(embedded.is_empty(), "{embedded:?}");
}

#[test]
fn watch_indexes_hand_edits_and_holds_the_store() {
    let store = Store::new();
    assert_success(&store.mnemo(&["add", "Seed memory."]));
    let mut watch = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["watch", "--memory-path"])
        .arg(&store.root)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until it is watching (it says so on stderr).
    let mut stderr = std::io::BufReader::new(watch.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("watching") {
        line.clear();
        use std::io::BufRead;
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "watch exited early"
        );
    }

    let busy = store.mnemo(&["search", "seed"]);
    assert_eq!(
        busy.status.code(),
        Some(4),
        "a second process must not open the store"
    );
    assert!(String::from_utf8_lossy(&busy.stderr).contains("in use by another mnemo process"));

    let note = store.root.join("entries/default/facts/by-hand.md");
    std::fs::write(&note, "Written while mnemo watches.").unwrap();
    let snapshot = store.root.join("memory_index.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(&snapshot)
        .unwrap_or_default()
        .contains("by-hand.md")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the watcher never indexed the file"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Command::new("kill")
        .args(["-INT", &watch.id().to_string()])
        .status()
        .unwrap();
    assert!(watch.wait().unwrap().success(), "Ctrl-C ends watch cleanly");
    let report = store.ok_json(&["reindex", "--json"]);
    assert_eq!(
        report["embedded"], 0,
        "the watcher had already indexed the edit"
    );
}

/// The tiny cross-encoder set-up generates: what the loopback hub serves.
fn tiny_cross_encoder() -> PathBuf {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-cross-encoder");
    assert!(
        models.join("model.onnx").is_file(),
        "{} is missing: run `scripts/setup test` to generate the tiny cross-encoder",
        models.display()
    );
    models
}

/// A model hub on loopback serving the tiny cross-encoder under the real one's hub paths;
/// requests for `missing` answer 404, and `tampered` is served with a byte changed. Returns
/// the hub's URL.
fn loopback_hub(missing: Option<&'static str>, tampered: Option<&'static str>) -> String {
    use std::io::{BufRead, BufReader, Write};
    let models = tiny_cross_encoder();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request_line = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            reader.read_line(&mut request_line).unwrap_or_default();
            // Drain the headers.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or("");
            let name = path
                .strip_prefix("/cross-encoder/ms-marco-MiniLM-L-6-v2/resolve/main/")
                .map(|f| f.strip_prefix("onnx/").unwrap_or(f))
                .filter(|f| Some(*f) != missing);
            let file = name.and_then(|f| {
                let mut bytes = std::fs::read(models.join(f)).ok()?;
                if Some(f) == tampered {
                    bytes.push(b' ');
                }
                Some(bytes)
            });
            let (status, body) = match file {
                Some(bytes) => ("200 OK", bytes),
                None => ("404 Not Found", b"not found".to_vec()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    url
}

/// `sha256sum`'s lines for the tiny cross-encoder's files: the pins of a genuine download.
fn tiny_pins() -> String {
    use sha2::{Digest, Sha256};
    let models = tiny_cross_encoder();
    [
        "model.onnx",
        "tokenizer.json",
        "config.json",
        "special_tokens_map.json",
        "tokenizer_config.json",
    ]
    .iter()
    .map(|name| {
        let bytes = std::fs::read(models.join(name)).unwrap();
        format!("{:x}  {name}\n", Sha256::digest(&bytes))
    })
    .collect()
}

fn fetch_reranker(hub: &str, reranker_dir: &Path, config: &Path, check: &[&str]) -> Output {
    std::fs::write(
        config,
        format!(
            "[retrieval]\nreranker_model = {:?}\n",
            reranker_dir.display().to_string()
        ),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args([
            "models",
            "--json",
            "--fetch-reranker",
            "--hub-url",
            hub,
            "--config",
        ])
        .arg(config)
        .args(check)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

#[test]
fn the_reranker_is_fetched_checked_against_pinned_hashes_and_installed_whole() {
    let dir = tempfile::tempdir().unwrap();
    let reranker = dir.path().join("reranker");
    let config = dir.path().join("mnemo.toml");
    let pins = dir.path().join("SHA256SUMS.pinned");
    std::fs::write(&pins, tiny_pins()).unwrap();
    let pinned = ["--sha256sums", pins.to_str().unwrap()];
    let entries = || -> Vec<_> {
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };

    // Nothing to check against: refused before anything is downloaded.
    let out = fetch_reranker(&loopback_hub(None, None), &reranker, &config, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sha256sums"));
    assert!(!reranker.exists());

    let out = fetch_reranker(&loopback_hub(None, None), &reranker, &config, &pinned);
    assert_success(&out);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["reranker"]["installed"], true, "{status}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("matched its pinned sha256"));
    let sums = std::fs::read_to_string(reranker.join("SHA256SUMS")).unwrap();
    assert_eq!(sums, tiny_pins(), "the installed files are the pinned ones");
    let installed = std::fs::read(reranker.join("tokenizer.json")).unwrap();

    // A file that is not what was pinned is refused, and the installed model stays.
    let out = fetch_reranker(
        &loopback_hub(None, Some("tokenizer.json")),
        &reranker,
        &config,
        &pinned,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tokenizer.json has sha256") && stderr.contains("not the pinned"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(reranker.join("tokenizer.json")).unwrap(),
        installed
    );

    // A hub that lacks one file leaves nothing half-installed.
    std::fs::remove_dir_all(&reranker).unwrap();
    let out = fetch_reranker(
        &loopback_hub(Some("tokenizer.json"), None),
        &reranker,
        &config,
        &pinned,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("resolve/main/tokenizer.json answered 404"),
        "{stderr}"
    );
    assert!(!reranker.exists(), "no partial model folder");
    assert_eq!(
        entries(),
        ["SHA256SUMS.pinned", "mnemo.toml"],
        "no download folder left behind"
    );

    // Unchecked only when asked for, and then it says so.
    let out = fetch_reranker(
        &loopback_hub(None, Some("tokenizer.json")),
        &reranker,
        &config,
        &["--trust-hub"],
    );
    assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("UNCHECKED"));
}

#[test]
fn status_exits_1_when_the_index_does_not_match_the_files() {
    let store = Store::new();
    let added = store.ok_json(&["add", "--json", "First fact.", "Second fact.", "Third."]);
    let id = |at: usize| added[at]["id"].as_str().unwrap().to_owned();
    let (first, third) = (id(0), id(2));
    assert_eq!(store.ok_json(&["status", "--json"])["points"], 3);

    // A snapshot that lies: it says the first file was indexed under the third's id, and
    // knows nothing of the third file. The first's hash matches and the index holds that id,
    // so start-up trusts it without reading the file; the third file, found unindexed,
    // claims an id the snapshot already gives another file and is skipped; and the first
    // memory ends up with no point.
    let snapshot_path = store.root.join("memory_index.json");
    let mut snapshot: Value =
        serde_json::from_str(&std::fs::read_to_string(&snapshot_path).unwrap()).unwrap();
    let files = snapshot["files"].as_object_mut().unwrap();
    files.retain(|_, entry| entry["id"] != third.as_str());
    for entry in files.values_mut() {
        if entry["id"] == first.as_str() {
            entry["id"] = Value::from(third.clone());
        }
    }
    // Each run's start-up sync rewrites the snapshot (and may heal part of the lie), so every
    // check starts from the same lie.
    let lie = snapshot.to_string();
    std::fs::write(&snapshot_path, &lie).unwrap();

    let out = store.mnemo(&["status"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("INCONSISTENT"), "{stdout}");
    assert!(
        stdout.contains(&format!("missing from the index: {first}")),
        "{stdout}"
    );
    std::fs::write(&snapshot_path, &lie).unwrap();
    let json = store.mnemo(&["status", "--json"]);
    assert_eq!(json.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["missing"], serde_json::json!([first]));

    assert_success(&store.mnemo(&["reindex", "--full"]));
    let status = store.mnemo(&["status"]);
    assert_success(&status);
    assert!(String::from_utf8_lossy(&status.stdout).contains("consistent"));
}

#[test]
fn log_and_show_browse_the_history_of_the_memories() {
    let store = Store::new();
    let added = store.ok_json(&["add", "--json", "-c", "garden", "The roses need water."]);
    let path = added[0]["path"].as_str().unwrap().to_owned();
    let relative = Path::new(&path)
        .strip_prefix(store.root.canonicalize().unwrap())
        .unwrap()
        .to_string_lossy()
        .into_owned();
    store.ok_json(&["add", "--json", "-c", "kitchen", "The oven is broken."]);

    let log = store.ok_json(&["log", "--json"]);
    let messages: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert!(messages[0].starts_with("mnemo: kitchen"), "{messages:?}");
    assert!(messages[1].starts_with("mnemo: garden"), "{messages:?}");
    assert_eq!(messages[2], "mnemo: initial commit");

    let garden = store.ok_json(&["log", "--json", "-c", "garden"]);
    assert_eq!(garden.as_array().unwrap().len(), 1, "{garden}");
    assert_eq!(garden[0]["changes"][0]["path"], relative);
    let human = store.mnemo(&["log", "-n", "1"]);
    assert_success(&human);
    let text = String::from_utf8_lossy(&human.stdout);
    assert_eq!(
        text.lines().filter(|l| !l.starts_with(' ')).count(),
        1,
        "{text}"
    );
    assert!(text.contains("kitchen"), "{text}");

    let commit = garden[0]["short_id"].as_str().unwrap();
    let file = store.mnemo(&["show", &format!("{commit}:{relative}")]);
    assert_success(&file);
    let text = String::from_utf8_lossy(&file.stdout);
    assert!(text.starts_with("---\n"), "{text}");
    assert!(text.contains("The roses need water."), "{text}");
    let shown = store.ok_json(&["show", "--json", commit]);
    assert_eq!(shown["kind"], "commit");
    assert_eq!(shown["changes"][0]["status"], "added");

    let missing = store.mnemo(&["show", "HEAD:entries/garden/facts/nothing.md"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("did not exist"));
    let bad = store.mnemo(&["log", "-c", "../etc"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn search_as_of_a_revision_answers_from_that_commit() {
    let store = Store::new();
    let added = store.ok_json(&["add", "--json", "-c", "garden", "The roses need water."]);
    // Removed by hand: the next run commits the removal with its own memory.
    std::fs::remove_file(added[0]["path"].as_str().unwrap()).unwrap();
    store.ok_json(&["add", "--json", "-c", "garden", "The oven is broken."]);
    let search = [
        "search",
        "do the roses need water",
        "-c",
        "garden",
        "--json",
    ];

    let now = store.ok_json(&search);
    assert!(!contents(&now).contains(&"The roses need water.".to_owned()));
    let then = store.ok_json(&[&search[..], &["--as-of", "HEAD~1"]].concat());
    assert!(then["as_of"]["message"]
        .as_str()
        .unwrap()
        .starts_with("mnemo: garden"));
    assert_eq!(contents(&then["hits"]), ["The roses need water."]);
    assert!(then["hits"][0]["path"]
        .as_str()
        .unwrap()
        .starts_with("entries/garden/facts/"));
    let short_id = then["as_of"]["short_id"].as_str().unwrap();

    let human = store.mnemo(&["search", "roses", "-c", "garden", "--as-of", short_id]);
    assert_success(&human);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.starts_with(&format!("as of commit {short_id}  ")),
        "{text}"
    );
    assert!(text.contains("The roses need water."), "{text}");

    let bad = store.mnemo(&["search", "roses", "--as-of", "no-such-rev"]);
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("no revision \"no-such-rev\""), "{stderr}");
}

/// Runs `mnemo` with a deadline: a command that hangs (on a FIFO, say) fails the test
/// instead of hanging it.
fn mnemo_within(store: &Store, args: &[&str], deadline: std::time::Duration) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    let root = store.root.clone();
    let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    std::thread::spawn(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
            .args(&owned)
            .arg("--memory-path")
            .arg(&root)
            .env_remove("RUST_LOG")
            .env_remove("MNEMO_CONFIG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let _ = tx.send(out);
    });
    rx.recv_timeout(deadline)
        .unwrap_or_else(|_| panic!("mnemo {args:?} did not finish within {deadline:?}"))
}

#[test]
fn hostile_files_in_the_store_are_skipped_one_by_one() {
    let store = Store::new();
    let added = store.ok_json(&["add", "-c", "alice", "--json", "Alice keeps bees."]);
    let facts = PathBuf::from(added[0]["path"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_owned();
    let global = store.root.join("entries/global/facts");
    std::fs::create_dir_all(&global).unwrap();

    // An alias bomb: 9 levels of 9 references, under 500 bytes.
    let mut bomb = String::from(
        "---\na: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
    {
        let refs = vec![format!("*{prev}"); 9].join(",");
        bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    bomb.push_str("---\nThe bomb also keeps bees.\n");
    assert!(bomb.len() < 520, "{}", bomb.len());
    std::fs::write(global.join("bomb.md"), &bomb).unwrap();
    // A 50,000-deep sequence.
    let deep = format!(
        "---\nx: {}1{}\n---\nDeep bees.\n",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    std::fs::write(global.join("deep.md"), deep).unwrap();
    // Metadata nested 200 deep, in `global`, which every search reads.
    let mut nested = String::from("leaf");
    for _ in 0..200 {
        nested = format!("{{k: {nested}}}");
    }
    let nested = format!("---\nmetadata: {{m: {nested}}}\n---\nNested bees.\n");
    std::fs::write(global.join("nested.md"), nested).unwrap();
    // A link to a secret outside the store, and a FIFO.
    let secret = store.root.parent().unwrap().join("secret.env");
    std::fs::write(&secret, "UPSTREAM_KEY=sk-live-bees-0123456789\n").unwrap();
    std::os::unix::fs::symlink(&secret, facts.join("environ.md")).unwrap();
    let fifo = std::ffi::CString::new(facts.join("pipe.md").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    // A second file claiming the first memory's id, in another conversation.
    let bob = store.root.join("entries/bob/facts");
    std::fs::create_dir_all(&bob).unwrap();
    let id = added[0]["id"].as_str().unwrap();
    std::fs::write(
        bob.join("copy.md"),
        format!("---\nid: {id}\n---\nBob keeps wasps.\n"),
    )
    .unwrap();

    let deadline = std::time::Duration::from_secs(120);
    let out = mnemo_within(
        &store,
        &[
            "search",
            "who keeps bees",
            "-c",
            "alice",
            "-k",
            "10",
            "--json",
        ],
        deadline,
    );
    assert_success(&out);
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(contents(&hits), ["Alice keeps bees."]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for name in [
        "bomb.md",
        "deep.md",
        "nested.md",
        "environ.md",
        "pipe.md",
        "copy.md",
    ] {
        assert!(stderr.contains(name), "{name} is not named in:\n{stderr}");
    }
    assert!(
        stderr.contains("symbolic link") && stderr.contains("a FIFO"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("sk-live") && !String::from_utf8_lossy(&out.stdout).contains("sk-live")
    );

    // `status` names every skipped file, the clash with both files.
    let out = mnemo_within(&store, &["status"], deadline);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(6 unreadable)"), "{stdout}");
    assert!(
        stdout.contains("copy.md: its id") && stdout.contains("is already used by"),
        "{stdout}"
    );

    // A conversation folder that is a link: an add refuses to write through it.
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), store.root.join("entries/linked")).unwrap();
    let out = mnemo_within(
        &store,
        &["add", "-c", "linked", "Through the link."],
        deadline,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a real folder"),
        "{out:?}"
    );
    assert_eq!(
        walk(outside.path()),
        Vec::<PathBuf>::new(),
        "nothing written outside"
    );
}

#[test]
fn a_corrupt_git_index_does_not_stop_the_store() {
    let store = Store::new();
    assert_success(&store.mnemo(&["add", "The boat is moored at pier 4."]));
    std::fs::write(store.root.join(".git/index"), "").unwrap();
    let hits = store.ok_json(&["search", "where is the boat", "-k", "1", "--json"]);
    assert_eq!(contents(&hits), ["The boat is moored at pier 4."]);
    assert_success(&store.mnemo(&["add", "The oars are in the shed."]));
    let log = store.mnemo(&["log", "--json"]);
    assert_success(&log);
    let commits: Value = serde_json::from_slice(&log.stdout).unwrap();
    assert_eq!(
        commits.as_array().map(Vec::len),
        Some(3),
        "initial, first add, and the add after the repair: {commits}"
    );
}

#[test]
fn conflicts_are_listed_and_resolved_from_the_terminal() {
    let store = Store::new();
    let first = store.ok_json(&["add", "--json", "The user lives in Leuven."]);
    let second = store.ok_json(&["add", "--json", "The user lives in Ghent."]);
    let (earlier, later) = (
        first[0]["id"].as_str().unwrap().to_owned(),
        second[0]["id"].as_str().unwrap().to_owned(),
    );
    // The file of the earlier fact names the later: the second add marked it.
    let path = PathBuf::from(first[0]["path"].as_str().unwrap());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(&format!("conflicts_with: {later}")), "{text}");

    let out = store.mnemo(&["conflicts"]);
    assert_success(&out);
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains("Leuven") && listing.contains("Ghent"),
        "{listing}"
    );
    assert!(
        listing.contains(&format!("mnemo conflicts resolve {earlier} {later}")),
        "{listing}"
    );
    let open = store.ok_json(&["conflicts", "--json"]);
    assert_eq!(open["conflicts"][0]["earlier"]["id"], earlier.as_str());
    assert_eq!(open["conflicts"][0]["later"]["id"], later.as_str());

    // A word that is no resolution, an id that is no id: refused, nothing changed.
    let out = store.mnemo(&["conflicts", "resolve", &earlier, &later, "--keep", "newest"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = store.mnemo(&["conflicts", "resolve", "../x", &later, "--keep", "later"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a memory id"));
    // The pair the other way round is no conflict.
    let out = store.mnemo(&["conflicts", "resolve", &later, &earlier, "--keep", "later"]);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(
        store.ok_json(&["conflicts", "--json"])["conflicts"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let resolved = store.ok_json(&[
        "conflicts",
        "resolve",
        &earlier,
        &later,
        "--keep",
        "later",
        "--json",
    ]);
    assert_eq!(resolved["retired"]["id"], earlier.as_str());
    assert_eq!(resolved["kept"][0]["id"], later.as_str());
    assert_eq!(
        store.ok_json(&["conflicts", "--json"])["conflicts"],
        serde_json::json!([])
    );
    let hits = store.ok_json(&["search", "where does the user live", "-k", "5", "--json"]);
    assert_eq!(contents(&hits), ["The user lives in Ghent."]);
}
