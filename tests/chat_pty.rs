//! `mnemo chat` driven through a pseudo-terminal as a person would type, against a scripted
//! upstream: answers streamed, `/context`, `/compact`, `/search`, Ctrl-C mid-answer, EOF,
//! `/quit`, `/delete`, and `--resume` (the latest, or by id, or `--fork`ed) in later processes.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mnemo_scripted_llm::{learns_nothing, ChatRequest, Reply, ScriptedLlm};
use serde_json::Value;

/// A child process on the slave side of a pseudo-terminal, and what it has written.
struct Terminal {
    child: Child,
    master: std::fs::File,
    screen: Arc<Mutex<String>>,
    /// How much of the screen earlier `expect`s consumed.
    seen: usize,
}

impl Terminal {
    fn spawn(command: &mut Command) -> Self {
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty writes two new file descriptors into the given integers.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty failed");
        // SAFETY: both descriptors were just opened and are owned here.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let slave_fd = slave.as_raw_fd();
        command
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // SAFETY: only async-signal-safe calls between fork and exec: a new session whose
        // controlling terminal is the pty, so Ctrl-C typed there reaches the child.
        unsafe {
            command.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        let master = std::fs::File::from(master);
        let screen = Arc::new(Mutex::new(String::new()));
        let mut reader = master.try_clone().unwrap();
        let shared = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the child has exited and the slave is closed.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                shared
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self {
            child,
            master,
            screen,
            seen: 0,
        }
    }

    /// Types `keys` as a person would.
    fn type_keys(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
        self.master.flush().unwrap();
    }

    /// Waits for `text` to appear after what earlier calls consumed; returns what came before
    /// it and it.
    fn expect(&mut self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            {
                let screen = self.screen.lock().unwrap();
                if let Some(at) = screen[self.seen..].find(text) {
                    let end = self.seen + at + text.len();
                    let got = screen[self.seen..end].to_owned();
                    self.seen = end;
                    return got;
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "{text:?} did not appear; the terminal shows:\n{}",
                    self.screen.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "mnemo chat did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn chat_command(root: &Path, upstream: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mnemo"));
    command
        .args(["chat", "--memory-path"])
        .arg(root)
        .args(args)
        .env("MNEMO_OPENAI_BASE_URL", upstream)
        .env("MNEMO_START_WATCHER", "false")
        .env("TERM", "dumb")
        .env_remove("MNEMO_CONFIG")
        .env_remove("RUST_LOG");
    command
}

fn model(request: &ChatRequest) -> Reply {
    // The user's own words: the last line, after what memory injected.
    let message = request.last_user_message().unwrap_or_default();
    let text = message.lines().last().unwrap_or("").to_owned();
    if request
        .system_prompt()
        .is_some_and(|s| s.contains("conversation summariser"))
    {
        return Reply::text("The user has a cat called Tom.");
    }
    if let Some(write_path) = learns_nothing(request) {
        return write_path;
    }
    if text.contains("long story") {
        return Reply::Chunks(vec![
            (Duration::ZERO, "Once".into()),
            (Duration::from_millis(50), " upon".into()),
            (Duration::from_secs(30), " a time".into()),
        ]);
    }
    Reply::Chunks(vec![
        (Duration::ZERO, "Heard".into()),
        (Duration::from_millis(30), ": ".into()),
        (Duration::from_millis(30), text),
    ])
}

fn log_records(root: &Path, session: &str) -> Vec<Value> {
    std::fs::read_to_string(root.join(format!("sessions/{session}/messages.jsonl")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_chats_compacts_interrupts_and_resumes() {
    let llm = ScriptedLlm::with_handler(model).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mem");

    let mut term = Terminal::spawn(&mut chat_command(&root, &llm.base_url(), &[]));
    let banner = term.expect("/help for commands");
    let session = session_in(&banner);
    term.expect("you> ");
    term.type_keys("My cat is called Tom.\n");
    term.expect("assistant> Heard: My cat is called Tom.");
    term.expect("you> ");
    term.type_keys("I also have a dog.\n");
    term.expect("Heard: I also have a dog.");
    term.expect("you> ");

    term.type_keys("/context\n");
    let context = term.expect("you> ");
    for part in [
        "tokens",
        "threshold",
        "(90%)",
        &format!("log sessions/{session}/messages.jsonl ("),
        "4 messages",
        "0 compressions",
        "log ",
        "spent: ",
    ] {
        assert!(context.contains(part), "{part} missing from {context}");
    }
    term.type_keys("/compact pets\n");
    let compacted = term.expect("you> ");
    assert!(compacted.contains("compacted 2 message(s)"), "{compacted}");
    term.type_keys("/context\n");
    assert!(term.expect("you> ").contains("1 compressions"));
    term.type_keys("/search TOM\n");
    let found = term.expect("you> ");
    assert!(found.contains("User: My cat is called Tom."), "{found}");
    term.type_keys("/sessions\n");
    assert!(term.expect("you> ").contains("My cat is called Tom."));
    term.type_keys("/help\n");
    assert!(term.expect("you> ").contains("/resume ID"));
    // /clear starts afresh and keeps the session; /resume goes back to it.
    term.type_keys("/clear\n");
    let cleared = term.expect("you> ");
    assert!(cleared.contains(&format!("{session} is kept")), "{cleared}");
    term.type_keys("/context\n");
    assert!(term
        .expect("you> ")
        .contains("the session starts with your first message"));
    term.type_keys(&format!("/resume {session}\n"));
    assert!(term.expect("you> ").contains("My cat is called Tom."));

    // Ctrl-C in the middle of an answer stops it; the part received is logged.
    term.type_keys("Tell me a long story.\n");
    term.expect("Once upon");
    term.type_keys("\x03");
    term.expect("(stopped");
    term.expect("you> ");
    term.type_keys("\x04"); // EOF
    term.expect(&format!("session {session} saved"));
    assert!(term.wait().success());
    // The scripted upstream has no llama.cpp tokenizer: said once, not at every turn.
    let screen = term.screen.lock().unwrap().clone();
    assert_eq!(
        screen.matches("no llama.cpp tokenizer").count(),
        1,
        "{screen}"
    );

    let records = log_records(&root, &session);
    let partial = records
        .iter()
        .find(|r| r["message"]["content"] == "Once upon")
        .unwrap_or_else(|| panic!("the partial answer is logged: {records:?}"));
    assert_eq!(partial["incomplete"], true);
    assert!(records.iter().any(|r| r["kind"] == "compaction"));

    // A second process resumes the most recent session, with its compaction.
    llm.clear_requests();
    let mut term = Terminal::spawn(&mut chat_command(&root, &llm.base_url(), &["--resume"]));
    term.expect(&format!("resuming {session}"));
    let shown = term.expect("you> ");
    assert!(shown.contains("you: I also have a dog."), "{shown}");
    term.type_keys("What are my pets?\n");
    term.expect("Heard: What are my pets?");
    term.expect("you> ");
    term.type_keys("\x03"); // Ctrl-C at the prompt leaves
    term.expect("saved");
    assert!(term.wait().success());

    let forwarded = llm
        .forwarded_chats()
        .into_iter()
        .next()
        .expect("a chat request forwarded upstream");
    let sent: Vec<&str> = forwarded["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect();
    assert!(
        sent[0].contains("The user has a cat called Tom."),
        "{sent:?}"
    );
    assert!(
        sent.iter().any(|m| m.contains("I also have a dog.")),
        "{sent:?}"
    );
    assert!(
        sent.last().unwrap().ends_with("What are my pets?"),
        "{sent:?}"
    );
}

/// The window of the small upstream in [`a_long_chat_keeps_going_past_a_small_window`].
const SMALL_WINDOW: usize = 1024;

/// An upstream with a small window: a request whose messages come to more tokens than the
/// window (by the estimate of four characters a token) is refused as llama.cpp refuses it.
fn small_model(request: &ChatRequest) -> Reply {
    let chars: usize = request
        .messages()
        .iter()
        .map(|m| m["content"].as_str().map_or(0, str::len) + 16)
        .sum();
    if chars / 4 > SMALL_WINDOW {
        return Reply::status(
            400,
            r#"{"error": {"message": "the request exceeds the available context size"}}"#,
        );
    }
    if request
        .system_prompt()
        .is_some_and(|s| s.contains("conversation summariser"))
    {
        return Reply::text("The user has been counting sheep, one number a message.");
    }
    model(request)
}

/// The session a `mnemo chat` banner names.
fn session_in(banner: &str) -> String {
    banner
        .split("session ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("{banner}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_chat_keeps_going_past_a_small_window() {
    let llm = ScriptedLlm::with_handler(small_model).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mem");
    // The window of every model name, as `mnemo chat` sets it for the local LLM; no
    // strategy anywhere: what a first user runs.
    let config = dir.path().join("mnemo.toml");
    std::fs::write(
        &config,
        format!("[context.windows]\n\"*\" = {SMALL_WINDOW}\n"),
    )
    .unwrap();
    let mut command = chat_command(&root, &llm.base_url(), &[]);
    command.env("MNEMO_CONFIG", &config);
    let mut term = Terminal::spawn(&mut command);
    let banner = term.expect("/help for commands");
    let session = session_in(&banner);
    const EXCHANGES: usize = 40;
    for n in 1..=EXCHANGES {
        term.expect("you> ");
        let message = format!("Sheep number {n} jumped over the fence tonight, then another.");
        term.type_keys(&format!("{message}\n"));
        let shown = term.expect(&format!("Heard: {message}"));
        assert!(!shown.contains("error"), "exchange {n}: {shown}");
    }
    term.expect("you> ");
    term.type_keys("/context\n");
    let context = term.expect("you> ");
    for part in [
        "mode auto",
        "the last request went with",
        "a summary of the first",
        "counting sheep",
    ] {
        assert!(context.contains(part), "{part} missing from {context}");
    }
    term.type_keys("\x04");
    term.expect(&format!("session {session} saved"));
    assert!(term.wait().success());

    // Nothing upstream was refused, and summaries were asked for.
    let requests = llm.requests();
    let summaries = requests
        .iter()
        .filter(|r| {
            r.body
                .as_ref()
                .is_some_and(|b| b.to_string().contains("conversation summariser"))
        })
        .count();
    assert!(summaries > 0, "no summary was asked for");
    // The log holds every message, summaries or not.
    let logged = |root: &Path| {
        log_records(root, &session)
            .iter()
            .filter(|r| r["kind"] == "message")
            .count()
    };
    assert_eq!(logged(&root), 2 * EXCHANGES);

    // Resumed in a second process, the session goes on from its summary, its log whole.
    let mut command = chat_command(&root, &llm.base_url(), &["--resume", &session]);
    command.env("MNEMO_CONFIG", &config);
    let mut term = Terminal::spawn(&mut command);
    term.expect(&format!("resuming {session}"));
    term.expect("you> ");
    term.type_keys("And one more sheep.\n");
    term.expect("Heard: And one more sheep.");
    term.expect("you> ");
    term.type_keys("\x04");
    term.expect("saved");
    assert!(term.wait().success());
    assert_eq!(logged(&root), 2 * EXCHANGES + 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_are_resumed_by_id_forked_and_deleted_from_the_terminal() {
    let llm = ScriptedLlm::with_handler(model).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mem");
    let url = llm.base_url();

    // Two sessions, each left with /quit.
    let mut first_ids = Vec::new();
    for said in ["My cat is called Tom.", "I grow tomatoes."] {
        let mut term = Terminal::spawn(&mut chat_command(&root, &url, &[]));
        first_ids.push(session_in(&term.expect("/help for commands")));
        term.expect("you> ");
        term.type_keys(&format!("{said}\n"));
        term.expect(&format!("Heard: {said}"));
        term.expect("you> ");
        term.type_keys("/quit\n");
        term.expect("saved");
        assert!(term.wait().success(), "/quit leaves with success");
    }
    let (cat, tomatoes) = (first_ids[0].clone(), first_ids[1].clone());

    // --resume ID goes back to the older one, not the latest.
    let mut term = Terminal::spawn(&mut chat_command(&root, &url, &["--resume", &cat]));
    term.expect(&format!("resuming {cat}"));
    let shown = term.expect("you> ");
    assert!(shown.contains("you: My cat is called Tom."), "{shown}");
    assert!(!shown.contains("tomatoes"), "{shown}");
    term.type_keys("/quit\n");
    assert!(term.wait().success());

    // --fork continues in a copy; the original log is left as it was.
    let before = log_records(&root, &cat).len();
    let mut term = Terminal::spawn(&mut chat_command(
        &root,
        &url,
        &["--resume", &cat, "--fork"],
    ));
    let forked_line = term.expect("you> ");
    let forked = forked_line
        .split(&format!("(forked {cat} as "))
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("{forked_line}"))
        .to_owned();
    assert_ne!(forked, cat);
    term.type_keys("And a dog called Rex.\n");
    term.expect("Heard: And a dog called Rex.");
    term.expect("you> ");

    // /delete removes another session from the list; its log stays on disk.
    term.type_keys(&format!("/delete {tomatoes}\n"));
    assert!(term
        .expect("you> ")
        .contains(&format!("deleted session {tomatoes}")));
    term.type_keys("/sessions\n");
    let listed = term.expect("you> ");
    assert!(!listed.contains(&tomatoes), "{listed}");
    assert!(
        listed.contains(&forked) && listed.contains(&cat),
        "{listed}"
    );
    term.type_keys("/quit\n");
    assert!(term.wait().success());

    assert_eq!(
        log_records(&root, &cat).len(),
        before,
        "the original is untouched"
    );
    let copy = log_records(&root, &forked);
    assert!(copy
        .iter()
        .any(|r| r["message"]["content"] == "And a dog called Rex."));
    assert!(root
        .join(format!("sessions/{tomatoes}/messages.jsonl"))
        .is_file());
}
