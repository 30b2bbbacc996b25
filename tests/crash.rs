//! The real binary killed with SIGKILL in the middle of bulk adds, each time after a random
//! number of acknowledgements: after a restart, every acknowledged memory is on disk and in
//! the index, no half-written file remains, and no point lacks its file.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

mod support;

fn mnemo(root: &Path) -> Command {
    let mut cmd = support::mnemo_command(root);
    // Six rounds can write more than the default 500 memories, and eviction of the oldest
    // would then look like loss; this test is about crashes, so nothing is evicted here.
    cmd.env("MNEMO_MAX_ENTRIES", "100000");
    cmd
}

/// xorshift, seeded from the clock so every run kills at other moments; the seed is printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn files_named(dir: &Path, pred: &dyn Fn(&str) -> bool, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_named(&path, pred, out);
        } else if path.file_name().and_then(|n| n.to_str()).is_some_and(pred) {
            out.push(path);
        }
    }
}

#[test]
fn sigkill_during_bulk_adds_loses_nothing_acknowledged() {
    const LINES: usize = 300;
    /// `mnemo add` acknowledges memories in chunks of this many (a line each on stdout).
    const CHUNK: usize = 16;
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("kill schedule seed: {seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("mem");
    let mut acked: HashSet<String> = HashSet::new();
    let mut interrupted = 0;

    for round in 0..6 {
        let input = dir.path().join(format!("round-{round}.txt"));
        let lines: Vec<String> = (0..LINES)
            .map(|i| {
                format!(
                    "- Round {round} fact {i}: the parcel locker {round}{i:02} holds a blue box."
                )
            })
            .collect();
        std::fs::write(&input, lines.join("\n")).unwrap();

        let mut child = mnemo(&root)
            .args(["add", "-c", "crash", "-f"])
            .arg(&input)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (ids, acks) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(id) = line.split_whitespace().next() {
                    let _ = ids.send(id.to_owned());
                }
            }
        });
        // Kill once this many memories are acknowledged: at least one, and before the last
        // chunk, so every round dies in the middle of its burst.
        let kill_after = 1 + rng.below((LINES - CHUNK) as u64) as usize;
        let mut this_round = 0;
        while this_round < kill_after {
            let id = acks
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|e| panic!("round {round}: no acknowledgement ({e})"));
            acked.insert(id);
            this_round += 1;
        }
        let _ = child.kill(); // SIGKILL on Unix
        let status = child.wait().unwrap();
        reader.join().unwrap();
        // What was printed before the kill landed was acknowledged too.
        for id in acks.try_iter() {
            acked.insert(id);
            this_round += 1;
        }
        assert!(
            this_round > 0,
            "round {round}: killed before any acknowledgement"
        );
        if !status.success() && this_round < LINES {
            interrupted += 1;
        }
    }

    println!(
        "{} memories acknowledged; {interrupted} of 6 adds killed mid-way",
        acked.len()
    );
    assert!(
        interrupted > 0,
        "no add was interrupted; the test proved nothing"
    );

    // Restart: the sync repairs the index from the files; then check everything.
    let status = mnemo(&root).args(["status", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&status.stdout)
        .unwrap_or_else(|_| panic!("status output: {}", String::from_utf8_lossy(&status.stderr)));
    assert!(
        status.status.success(),
        "inconsistent after restart: {report}"
    );
    assert_eq!(report["missing"], serde_json::json!([]));
    assert_eq!(report["orphans"], serde_json::json!([]));
    assert_eq!(
        report["skipped"],
        serde_json::json!([]),
        "a half-written file was read"
    );

    let list = mnemo(&root)
        .args(["list", "-c", "crash", "--json"])
        .output()
        .unwrap();
    let listed: Vec<Value> = serde_json::from_slice(&list.stdout).unwrap();
    let on_disk: HashSet<String> = listed
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    let lost: Vec<_> = acked.difference(&on_disk).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");

    let mut leftovers = Vec::new();
    files_named(
        &root.join("entries"),
        &|n| n.starts_with(".mnemo-tmp-"),
        &mut leftovers,
    );
    assert!(
        leftovers.is_empty(),
        "temporary files survived a restart: {leftovers:?}"
    );
}
