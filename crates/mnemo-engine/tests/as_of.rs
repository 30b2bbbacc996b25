//! Search as of a git revision, over a real store, the real embedding model, the real
//! embedded index and git: the memories as a commit left them, found by the read path.

use std::sync::Arc;

use chrono::{Duration, SubsecRound, Utc};
use mnemo_core::{MemoryId, MemoryRecord, Role};
use mnemo_engine::{Access, MemoryClient, OpenOptions, SearchHit, SearchRequest};

use crate::support;
use support::{config_without_reranker, conv};

fn record(conversation: &str, content: &str) -> MemoryRecord {
    let mut r = MemoryRecord::new(conv(conversation), Role::Memory, content);
    r.created_at = (Utc::now() - Duration::minutes(5)).trunc_subsecs(3);
    r
}

fn contents(hits: &[SearchHit]) -> Vec<&str> {
    hits.iter().map(|h| h.content.as_str()).collect()
}

fn ask(query: &str) -> SearchRequest {
    SearchRequest::new(query, conv("c1")).top_k(5)
}

/// A store whose first commit holds three facts; then one is edited and one deleted, each
/// committed. Returns the client, the first commit's id and the ids of the edited and the
/// deleted fact.
async fn store_with_history(dir: &std::path::Path) -> (MemoryClient, String, MemoryId, MemoryId) {
    let client = MemoryClient::open(config_without_reranker(dir), OpenOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let written = client
        .add_records(vec![
            record("c1", "Alice's favourite colour is teal."),
            record("c1", "The spare key hides under the blue flowerpot."),
            record("c1", "Bob plays the cello on Sundays."),
        ])
        .await
        .unwrap();
    let [colour, key, cello] = [0, 1, 2].map(|i| written[i].record.id);
    // The edit commits every file noted since the store opened: the three facts.
    client
        .edit(cello, "Bob plays the viola on Sundays.".into())
        .await
        .unwrap()
        .unwrap();
    let first = client.log(None, 1).await.unwrap().remove(0);
    assert_eq!(first.changes.len(), 3, "{first:?}");
    client
        .edit(colour, "Alice's favourite colour is orange.".into())
        .await
        .unwrap()
        .unwrap();
    client.delete(key).await.unwrap().unwrap();
    (client, first.id, colour, key)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_search_as_of_a_commit_finds_the_memories_as_they_were_then() {
    let dir = tempfile::tempdir().unwrap();
    let (client, first, colour, key) = store_with_history(dir.path()).await;

    // Now: the new text, and the deleted fact is gone.
    let now = client
        .search(ask("Alice's favourite colour"))
        .await
        .unwrap();
    assert!(contents(&now).contains(&"Alice's favourite colour is orange."));
    assert!(!contents(&now).contains(&"Alice's favourite colour is teal."));
    let now = client.search(ask("where is the spare key")).await.unwrap();
    assert!(now.iter().all(|h| h.id != key), "{:?}", contents(&now));

    // As of the first commit: the old text, and the deleted fact.
    let then = client
        .search_as_of(&first, ask("Alice's favourite colour"))
        .await
        .unwrap();
    assert_eq!(then.as_of.id, first);
    assert!(then.as_of.message.contains("edited"), "{:?}", then.as_of);
    assert!(then.as_of.time <= Utc::now());
    let found = contents(&then.hits);
    assert!(
        found.contains(&"Alice's favourite colour is teal."),
        "{found:?}"
    );
    assert!(
        !found.contains(&"Alice's favourite colour is orange."),
        "{found:?}"
    );
    let teal = then.hits.iter().find(|h| h.id == colour).unwrap();
    assert!(
        teal.path.starts_with("entries/c1/facts"),
        "relative to the store, as the commit's tree names it: {}",
        teal.path.display()
    );
    let then = client
        .search_as_of("HEAD~2", ask("where is the spare key"))
        .await
        .unwrap();
    assert_eq!(then.as_of.id, first, "HEAD~2 is the first commit");
    assert_eq!(then.hits[0].id, key, "{:?}", contents(&then.hits));
    assert_eq!(
        then.hits[0].content,
        "The spare key hides under the blue flowerpot."
    );

    // A prefix of the id names the same commit; today's search is untouched.
    let again = client
        .search_as_of(&first[..10], ask("Bob's instrument"))
        .await
        .unwrap();
    assert_eq!(again.as_of.id, first);
    assert!(contents(&again.hits).contains(&"Bob plays the viola on Sundays."));
    let now = client.search(ask("where is the spare key")).await.unwrap();
    assert!(now.iter().all(|h| h.id != key));
    client.close_revisions();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_revision_or_a_store_without_git_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (client, _, _, _) = store_with_history(dir.path()).await;
    for rev in [
        "no-such-branch",
        "HEAD~40",
        "0123456789abcdef",
        "HEAD:entries",
    ] {
        let err = client.search_as_of(rev, ask("key")).await.unwrap_err();
        assert!(err.is_not_found(), "{rev}: {err}");
        assert!(err.to_string().contains(&format!("{rev:?}")), "{err}");
        let root = dir.path().display().to_string();
        assert!(!err.to_string().contains(&root), "no server path: {err}");
    }
    let err = client.search_as_of("", ask("key")).await.unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    let mut bad = ask("key");
    bad.top_k = Some(1000);
    let err = client.search_as_of("HEAD", bad).await.unwrap_err();
    assert!(
        err.is_invalid_input() && err.to_string().contains("top_k"),
        "{err}"
    );
    drop(client);

    let plain = tempfile::tempdir().unwrap();
    let mut config = config_without_reranker(plain.path());
    config.enable_git_versioning = false;
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap();
    let err = client.search_as_of("HEAD", ask("key")).await.unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(
        err.to_string().contains("not versioned: git is off"),
        "{err}"
    );
}

/// Reads `c1` only, `global` included.
struct ReadsC1;

impl Access for ReadsC1 {
    fn can_read(&self, conversation: &str) -> bool {
        conversation == "c1"
    }
    fn can_write(&self, _: &str) -> bool {
        false
    }
    fn can_use_agent(&self, _: &str) -> bool {
        false
    }
    fn is_unrestricted(&self) -> bool {
        false
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_searches_as_of_a_revision_only_what_it_may_read() {
    let dir = tempfile::tempdir().unwrap();
    let (client, first, _, key) = store_with_history(dir.path()).await;
    let caller = client.as_caller(Arc::new(ReadsC1));
    let result = caller
        .search_as_of(&first, ask("where is the spare key"))
        .await
        .unwrap();
    assert_eq!(result.as_of.as_ref().map(|c| c.id.as_str()), Some(&*first));
    assert_eq!(result.hits[0].id, key);
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["as_of"]["id"], first.as_str());
    let err = caller
        .search_as_of(&first, SearchRequest::new("key", conv("c2")))
        .await
        .unwrap_err();
    assert!(err.is_forbidden(), "{err}");
    let today = caller.search(ask("where is the spare key")).await.unwrap();
    assert!(today.as_of.is_none());
    assert!(serde_json::to_value(&today).unwrap().get("as_of").is_none());
}
