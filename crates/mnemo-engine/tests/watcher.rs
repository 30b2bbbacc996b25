//! The watcher keeps the index in step with hand edits, in a real directory with real
//! file-system notifications.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use mnemo_core::ConversationId;
use mnemo_engine::{MemoryClient, OpenOptions, SearchRequest, WatcherHandle};

use crate::support;
use support::{conv, store_config, CountingIndex};

async fn contents(client: &MemoryClient, query: &str) -> Vec<String> {
    client
        .search(SearchRequest::new(query, conv("notes")).top_k(50))
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.content)
        .collect()
}

/// Polls until `check` holds for the search results of `query`, or fails after 20 s.
async fn eventually(
    client: &MemoryClient,
    query: &str,
    what: &str,
    check: impl Fn(&[String]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = contents(client, query).await;
        if check(&got) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; search gives {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn assert_consistent(client: &MemoryClient) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let check = client.verify().await.unwrap();
        if check.missing.is_empty() && check.orphans.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "index never matched the files: {check:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client on a fresh store with its watcher running.
async fn watched_store() -> (tempfile::TempDir, MemoryClient, WatcherHandle) {
    let dir = tempfile::tempdir().unwrap();
    let client = MemoryClient::open(store_config(dir.path()), OpenOptions::default())
        .await
        .unwrap();
    let watch = client.start_watcher().unwrap();
    (dir, client, watch)
}

#[tokio::test(flavor = "multi_thread")]
async fn follows_creates_edits_renames_and_deletes() {
    let (dir, client, _watch) = watched_store().await;
    let facts = dir.path().join("entries/notes/facts");
    fs::create_dir_all(&facts).unwrap();

    // Create.
    fs::write(
        facts.join("boat.md"),
        "The sailing boat is moored at pier 7.",
    )
    .unwrap();
    eventually(&client, "sailing boat", "a created file", |c| {
        c.iter().any(|s| s.contains("pier 7"))
    })
    .await;

    // Editor save: write a temporary file, then rename it over the original.
    fs::write(
        facts.join(".boat.md.swp"),
        "swap junk that must never be indexed",
    )
    .unwrap();
    fs::write(
        facts.join("boat.md.tmp"),
        "The sailing boat is moored at pier 9.",
    )
    .unwrap();
    fs::rename(facts.join("boat.md.tmp"), facts.join("boat.md")).unwrap();
    eventually(&client, "sailing boat", "an editor-style save", |c| {
        c.iter().any(|s| s.contains("pier 9")) && !c.iter().any(|s| s.contains("pier 7"))
    })
    .await;

    // Truncate, then write.
    let f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(facts.join("boat.md"))
        .unwrap();
    drop(f);
    fs::write(
        facts.join("boat.md"),
        "The sailing boat is moored at pier 11.",
    )
    .unwrap();
    eventually(&client, "sailing boat", "truncate then write", |c| {
        c.iter().any(|s| s.contains("pier 11"))
    })
    .await;

    // Rename within the store, and move out of it.
    fs::rename(facts.join("boat.md"), facts.join("vessel.md")).unwrap();
    eventually(&client, "sailing boat", "a rename", |c| {
        c.iter().filter(|s| s.contains("pier 11")).count() == 1
    })
    .await;
    let outside = tempfile::tempdir().unwrap();
    fs::rename(facts.join("vessel.md"), outside.path().join("vessel.md")).unwrap();
    eventually(&client, "sailing boat", "a move out of the store", |c| {
        !c.iter().any(|s| s.contains("pier"))
    })
    .await;

    // A new conversation folder appearing with files already in it (e.g. copied in).
    let staging = outside.path().join("trip");
    fs::create_dir_all(staging.join("facts")).unwrap();
    fs::write(
        staging.join("facts/a.md"),
        "The ferry to Skye leaves at dawn.",
    )
    .unwrap();
    fs::rename(&staging, dir.path().join("entries/trip")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let hits = client
            .search(SearchRequest::new("ferry", ConversationId::new("trip").unwrap()).top_k(5))
            .await
            .unwrap();
        if hits.iter().any(|h| h.content.contains("Skye")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a moved-in folder was not indexed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Delete; and the ignored files never show up.
    fs::write(facts.join("gone.md"), "The old lawnmower is broken.").unwrap();
    eventually(&client, "lawnmower", "a created file", |c| {
        c.iter().any(|s| s.contains("lawnmower"))
    })
    .await;
    fs::remove_file(facts.join("gone.md")).unwrap();
    eventually(&client, "lawnmower", "a delete", |c| {
        !c.iter().any(|s| s.contains("lawnmower"))
    })
    .await;
    assert!(!contents(&client, "swap junk")
        .await
        .iter()
        .any(|s| s.contains("swap junk")));
    assert_consistent(&client).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bulk_changes_and_the_engine_s_own_writes() {
    let dir = tempfile::tempdir().unwrap();
    let index = CountingIndex::open(dir.path());
    let options = OpenOptions {
        index: Some(index.clone()),
        ..OpenOptions::default()
    };
    let client = MemoryClient::open(store_config(dir.path()), options)
        .await
        .unwrap();
    let _watch = client.start_watcher().unwrap();

    // The engine's own writes are indexed once, not again by the watcher: the first into a
    // new conversation folder (the watcher re-scans the store), the next into that folder
    // (it syncs the one file). A hand edit made after each is a marker: once the watcher has
    // indexed it, it has handled the events of the engine's write too (events come in order).
    let facts = dir.path().join("entries/notes/facts");
    for (i, text) in ["My locker code is 4711.", "My bike lock code is 0815."]
        .into_iter()
        .enumerate()
    {
        let added = client
            .add(vec![text.into()], &conv("notes"))
            .await
            .unwrap()
            .added;
        let marker = format!("Marker buoy number {i} is orange.");
        fs::write(facts.join(format!("marker-{i}.md")), &marker).unwrap();
        eventually(&client, &marker, "the marker", |got| got.contains(&marker)).await;
        assert_eq!(
            index.upserts_of(added[0].record.id),
            1,
            "write {i}: the engine's write was indexed again by the watcher"
        );
        fs::remove_file(facts.join(format!("marker-{i}.md"))).unwrap();
    }
    let added = client
        .list(Some(conv("notes")))
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.record.content.contains("locker"))
        .collect::<Vec<_>>();

    // A bulk change, as a checkout of another commit makes: 300 files at once.
    for i in 0..300 {
        fs::write(
            facts.join(format!("bulk-{i:03}.md")),
            format!("Inventory item number {i} is a box of screws."),
        )
        .unwrap();
    }
    fs::remove_file(&added[0].path).unwrap();
    assert_consistent(&client).await;
    let check = client.verify().await.unwrap();
    assert_eq!(check.points, 301, "300 new files and the bike lock's");

    // A tombstone move is a delete for the index.
    let target = facts.join("bulk-000.md");
    client.store().soft_delete(&target, None).unwrap();
    assert_consistent(&client).await;
    assert_eq!(client.verify().await.unwrap().points, 300);
}

fn git(root: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn hand_edits_the_watcher_saw_go_into_the_next_commit() {
    let (dir, client, _watch) = watched_store().await;
    let facts = dir.path().join("entries/notes/facts");
    fs::create_dir_all(&facts).unwrap();
    fs::write(
        facts.join("by-hand.md"),
        "The spare key hangs behind the bird house.\n",
    )
    .unwrap();
    eventually(&client, "where is the spare key", "the hand edit", |got| {
        got.iter().any(|c| c.contains("bird house"))
    })
    .await;

    client
        .add(
            vec!["The user bakes bread on Sundays.".into()],
            &conv("notes"),
        )
        .await
        .unwrap();
    let head = git(dir.path(), &["show", "--name-only", "--format=%s", "HEAD"]);
    assert!(head.contains("entries/notes/facts/by-hand.md"), "{head}");
    assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
}
