//! Conflicts end to end against a scripted model that only ever adds (as a small model
//! does): the older value marked in its file, the summary without it, the chat request
//! showing both facts in time order with the older marked, and each of the three
//! resolutions, committed.

use std::path::Path;
use std::sync::Arc;

use mnemo_core::{Config, ConversationId, Role};
use mnemo_engine::{
    ChatReply, Conflict, EngineError, MemoryClient, OpenOptions, Resolution, Resolved, Unrestricted,
};
use mnemo_scripted_llm::{add_every_fact, ChatRequest, Reply, ScriptedLlm};
use serde_json::json;

use crate::support;
use support::{config_without_reranker, conv};

/// Extracts the user's message as it is (a first-person sentence becomes "The user ..."),
/// adds every fact beside what is known, writes a summary of everything it is told, and
/// answers chats with "Noted.".
fn adding_model(request: &ChatRequest) -> Reply {
    let said = request.last_user_message().unwrap_or_default();
    match request.schema_name() {
        Some("facts") => {
            let fact = said
                .lines()
                .last()
                .unwrap_or_default()
                .replacen("I ", "The user ", 1);
            Reply::Json(json!({"facts": [fact]}))
        }
        Some("memory_operations") => add_every_fact(request),
        // A summary that keeps everything, the old value included: what the write path's
        // check must mend.
        Some("summary") => {
            let previous = said
                .split("PREVIOUS summary:\n")
                .nth(1)
                .and_then(|rest| rest.split("\n\nNEW facts:").next())
                .unwrap_or_default();
            let mut everything: Vec<&str> = vec![previous.trim()];
            everything.extend(said.lines().filter_map(|l| l.strip_prefix("- ")));
            Reply::Json(json!({"summary": everything.join(" ").trim()}))
        }
        _ => Reply::text("Noted."),
    }
}

fn config(memory_path: &Path, llm: &ScriptedLlm) -> Config {
    Config {
        openai_base_url: Some(llm.base_url()),
        llm_timeout_secs: 5,
        start_watcher: false,
        ..config_without_reranker(memory_path)
    }
}

async fn say(client: &MemoryClient, conversation: &ConversationId, message: &str) {
    let turn = mnemo_core::MemoryRecord::new(conversation.clone(), Role::User, message);
    let turn = client.add_records(vec![turn]).await.unwrap().pop().unwrap();
    client
        .learn_from_turn(conversation, Some(&turn), 1)
        .await
        .unwrap();
}

/// A store where the user said they live in Leuven, then in Ghent, then that they keep
/// bees; the model added each beside the others.
async fn moved(dir: &Path, llm: &ScriptedLlm) -> (MemoryClient, ConversationId) {
    let client = MemoryClient::open(config(dir, llm), OpenOptions::default())
        .await
        .unwrap();
    let conversation = conv("home");
    say(&client, &conversation, "I live in Leuven.").await;
    say(&client, &conversation, "I live in Ghent.").await;
    say(&client, &conversation, "I keep bees.").await;
    (client, conversation)
}

fn owner(client: &MemoryClient) -> mnemo_engine::ScopedClient {
    client.as_caller(Arc::new(Unrestricted))
}

async fn first_conflict(client: &MemoryClient, conversation: &ConversationId) -> Conflict {
    let open = owner(client).conflicts(conversation).await.unwrap();
    open.conflicts.first().cloned().expect("a conflict")
}

async fn resolve(
    client: &MemoryClient,
    conversation: &ConversationId,
    pair: &Conflict,
    resolution: Resolution,
) -> Result<Resolved, EngineError> {
    owner(client)
        .resolve_conflict(conversation, pair.earlier.id, pair.later.id, resolution)
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_later_value_marks_the_earlier_and_the_summary_drops_it() {
    let llm = ScriptedLlm::with_handler(adding_model).await;
    let dir = tempfile::tempdir().unwrap();
    let (client, conversation) = moved(dir.path(), &llm).await;

    let facts = client.list(Some(conversation.clone())).await.unwrap();
    let fact = |text: &str| {
        facts
            .iter()
            .find(|m| m.record.content == text)
            .unwrap_or_else(|| panic!("no fact {text:?} among {facts:?}"))
    };
    let (leuven, ghent, bees) = (
        fact("The user live in Leuven."),
        fact("The user live in Ghent."),
        fact("The user keep bees."),
    );
    // The file says which one holds; an unrelated fact is no rival.
    assert_eq!(leuven.record.conflicts_with, Some(ghent.record.id));
    assert_eq!(ghent.record.conflicts_with, None);
    assert_eq!(bees.record.conflicts_with, None);
    let file = std::fs::read_to_string(&leuven.path).unwrap();
    assert!(
        file.contains(&format!("conflicts_with: {}", ghent.record.id)),
        "{file}"
    );
    // The model's summary kept Leuven; the pass's check did not.
    let summary = owner(&client).summary(&conversation).await.unwrap();
    assert!(!summary.contains("Leuven"), "{summary}");
    assert!(summary.contains("Ghent"), "{summary}");

    let open = owner(&client).conflicts(&conversation).await.unwrap();
    assert_eq!(open.conflicts.len(), 1);
    let pair = &open.conflicts[0];
    assert_eq!(pair.earlier.id, leuven.record.id);
    assert_eq!(pair.later.id, ghent.record.id);
    assert_eq!(
        pair.earlier_source.as_ref().map(|t| t.content.as_str()),
        Some("I live in Leuven.")
    );
    assert_eq!(
        pair.later_source.as_ref().map(|t| t.content.as_str()),
        Some("I live in Ghent.")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_sees_both_values_oldest_first_with_the_old_one_marked() {
    let llm = ScriptedLlm::with_handler(adding_model).await;
    let dir = tempfile::tempdir().unwrap();
    let (client, conversation) = moved(dir.path(), &llm).await;
    llm.clear_requests();
    let body = json!({
        "model": "m",
        "memory_id": conversation.as_str(),
        "memory_learn": false,
        "messages": [{"role": "user", "content": "Which city do I live in?"}]
    });
    let ChatReply::Answer(_) = client.chat(body).await.unwrap() else {
        panic!("a whole answer");
    };
    let sent = llm.last_forwarded_chat();
    let text = sent["messages"][0]["content"].as_str().unwrap().to_owned();
    let memories = &text[text
        .find("Relevant memories")
        .unwrap_or_else(|| panic!("{text}"))..];
    let old = memories
        .find("The user live in Leuven. (superseded by the next memory)")
        .unwrap_or_else(|| panic!("{text}"));
    let new = memories
        .find("The user live in Ghent.")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(old < new, "{text}");
    assert!(
        text.contains("oldest first (where a later memory says otherwise, the later one holds)"),
        "{text}"
    );
    // The old value is not stated anywhere else as current: not by the summary.
    let before_memories = &text[..text.find("Relevant memories").unwrap()];
    assert!(!before_memories.contains("Leuven"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn keeping_the_later_retires_the_earlier_with_a_reason_in_git() {
    let llm = ScriptedLlm::with_handler(adding_model).await;
    let dir = tempfile::tempdir().unwrap();
    let (client, conversation) = moved(dir.path(), &llm).await;
    let pair = first_conflict(&client, &conversation).await;
    let resolved = resolve(&client, &conversation, &pair, Resolution::KeepLater)
        .await
        .unwrap();
    let retired = resolved.retired.expect("a tombstone");
    assert_eq!(retired.id, pair.earlier.id);
    assert_eq!(retired.replaced_by, Some(pair.later.id));
    assert_eq!(
        retired.reason.as_deref(),
        Some("conflict resolved by a person: the later fact holds")
    );
    assert!(
        retired.path.starts_with("entries/home/deleted/facts"),
        "{retired:?}"
    );
    assert!(owner(&client)
        .conflicts(&conversation)
        .await
        .unwrap()
        .conflicts
        .is_empty());
    assert!(client.get(pair.earlier.id).await.unwrap().is_none());
    let log = client.log(Some(conversation.clone()), 1).await.unwrap();
    assert!(
        log[0].message.contains("the later fact holds"),
        "{:?}",
        log[0].message
    );
    assert_eq!(resolved.commit.as_deref(), Some(log[0].short_id.as_str()));
    // Resolved once is resolved: the pair is no conflict any more.
    let again = resolve(&client, &conversation, &pair, Resolution::KeepLater).await;
    assert!(matches!(again, Err(EngineError::NotFound(_))), "{again:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn keeping_the_earlier_or_both_leaves_the_right_facts_live() {
    let llm = ScriptedLlm::with_handler(adding_model).await;
    let dir = tempfile::tempdir().unwrap();
    let (client, conversation) = moved(dir.path(), &llm).await;
    let pair = first_conflict(&client, &conversation).await;
    let resolved = resolve(&client, &conversation, &pair, Resolution::KeepEarlier)
        .await
        .unwrap();
    assert_eq!(resolved.retired.map(|r| r.id), Some(pair.later.id));
    let kept = client.get(pair.earlier.id).await.unwrap().unwrap();
    assert_eq!(kept.record.conflicts_with, None);
    assert!(client.get(pair.later.id).await.unwrap().is_none());

    // Both hold: nothing retired, the pair remembered as compatible.
    let dir = tempfile::tempdir().unwrap();
    let (client, conversation) = moved(dir.path(), &llm).await;
    let pair = first_conflict(&client, &conversation).await;
    let resolved = resolve(&client, &conversation, &pair, Resolution::BothHold)
        .await
        .unwrap();
    assert!(resolved.retired.is_none());
    assert_eq!(resolved.kept.len(), 2);
    let earlier = client.get(pair.earlier.id).await.unwrap().unwrap();
    assert_eq!(earlier.record.conflicts_with, None);
    assert_eq!(earlier.record.compatible_with, [pair.later.id]);
    assert!(owner(&client)
        .conflicts(&conversation)
        .await
        .unwrap()
        .conflicts
        .is_empty());
}

/// Recording a person's decision rewrites both facts' files with the text they had: their
/// vectors are taken from the index, not computed again (shown on a store opened afresh, so
/// the embedder has no recent vectors to answer from); a fact whose text changed by hand
/// meanwhile is embedded again.
#[tokio::test(flavor = "multi_thread")]
async fn a_rewrite_with_the_text_it_had_does_not_run_the_model() {
    let llm = ScriptedLlm::with_handler(adding_model).await;
    let dir = tempfile::tempdir().unwrap();
    let (client, conversation) = moved(dir.path(), &llm).await;
    let pair = first_conflict(&client, &conversation).await;
    drop(client);

    let client = MemoryClient::open(config(dir.path(), &llm), OpenOptions::default())
        .await
        .unwrap();
    // The vocabulary is built again in the background, embedding the store's words.
    client.vocabulary_built().await;
    let before = client.embedding_busy();
    resolve(&client, &conversation, &pair, Resolution::BothHold)
        .await
        .unwrap();
    assert_eq!(client.embedding_busy(), before, "nothing embedded");
    let found = client
        .search(
            mnemo_engine::SearchRequest::new("Where does the user live?", conversation.clone())
                .top_k(2),
        )
        .await
        .unwrap();
    assert_eq!(
        found.len(),
        2,
        "both facts found by their vectors: {found:?}"
    );
    drop(client);

    // A fact edited by hand and not indexed yet (no watcher runs here): its new text is
    // embedded.
    let dir = tempfile::tempdir().unwrap();
    let (client, conversation) = moved(dir.path(), &llm).await;
    let pair = first_conflict(&client, &conversation).await;
    let earlier = client.get(pair.earlier.id).await.unwrap().unwrap();
    let text = std::fs::read_to_string(&earlier.path).unwrap();
    std::fs::write(&earlier.path, text.replace("Leuven", "Bruges")).unwrap();
    let before = client.embedding_busy();
    resolve(&client, &conversation, &pair, Resolution::BothHold)
        .await
        .unwrap();
    assert!(
        client.embedding_busy() > before,
        "the edited text was embedded"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pair_of_another_conversation_or_of_strangers_is_no_conflict() {
    let llm = ScriptedLlm::with_handler(adding_model).await;
    let dir = tempfile::tempdir().unwrap();
    let (client, conversation) = moved(dir.path(), &llm).await;
    let pair = first_conflict(&client, &conversation).await;
    let elsewhere = owner(&client)
        .resolve_conflict(
            &conv("work"),
            pair.earlier.id,
            pair.later.id,
            Resolution::KeepLater,
        )
        .await;
    assert!(
        matches!(elsewhere, Err(EngineError::NotFound(_))),
        "{elsewhere:?}"
    );
    let reversed = owner(&client)
        .resolve_conflict(
            &conversation,
            pair.later.id,
            pair.earlier.id,
            Resolution::KeepLater,
        )
        .await;
    assert!(
        matches!(reversed, Err(EngineError::NotFound(_))),
        "{reversed:?}"
    );
    // Nothing was touched by the refusals.
    assert_eq!(
        owner(&client)
            .conflicts(&conversation)
            .await
            .unwrap()
            .conflicts
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_marking_off_nothing_is_marked() {
    let llm = ScriptedLlm::with_handler(adding_model).await;
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        conflict_marking: false,
        ..config(dir.path(), &llm)
    };
    let client = MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap();
    let conversation = conv("home");
    say(&client, &conversation, "I live in Leuven.").await;
    say(&client, &conversation, "I live in Ghent.").await;
    let facts = client.list(Some(conversation.clone())).await.unwrap();
    assert!(facts.iter().all(|m| m.record.conflicts_with.is_none()));
}

/// A fact's nearest model words depend on its text alone, so marking it (its file rewritten
/// with the text it had) takes them from the snapshot instead of scoring every word of the
/// model again; a hand edit made since it was indexed is not taken for the indexed file.
/// Shown with a word planted in the snapshot by hand, which only the kept words can put in
/// the fact's key.
#[tokio::test(flavor = "multi_thread")]
async fn a_marked_fact_keeps_the_nearest_words_its_snapshot_entry_holds() {
    let llm = ScriptedLlm::with_handler(adding_model).await;
    for hand_edited in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            let mut config = config(dir.path(), &llm);
            config.retrieval.dense = false;
            config.retrieval.vocabulary_expansion = 0;
            config.retrieval.document_expansion = 2;
            MemoryClient::open(config, OpenOptions::default())
        };
        let conversation = conv("home");
        let client = open().await.unwrap();
        say(&client, &conversation, "I live in Leuven.").await;
        let memories = client.list(Some(conversation.clone())).await.unwrap();
        let leuven = memories
            .iter()
            .find(|m| m.record.role == Role::Memory)
            .expect("the fact")
            .path
            .clone();
        drop(client);

        let snapshot_path = dir.path().join("memory_index.json");
        let mut snapshot: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&snapshot_path).unwrap()).unwrap();
        let relative = leuven.strip_prefix(dir.path()).unwrap().to_str().unwrap();
        let entry = &mut snapshot["files"][relative];
        assert!(entry["nearest_words"].is_string(), "recorded: {entry}");
        entry["nearest_words"] = "banana".into();
        std::fs::write(&snapshot_path, serde_json::to_vec(&snapshot).unwrap()).unwrap();

        let client = open().await.unwrap();
        let banana = || {
            let request = mnemo_engine::SearchRequest::new("banana", conversation.clone());
            client.search(request.top_k(1))
        };
        assert!(banana().await.unwrap().is_empty(), "the key is as it was");
        if hand_edited {
            // Bytes changed, text not: no watcher indexes it before the mark.
            let text = std::fs::read_to_string(&leuven).unwrap();
            std::fs::write(&leuven, format!("{text}\n")).unwrap();
        }
        say(&client, &conversation, "I live in Ghent.").await;
        let marked = std::fs::read_to_string(&leuven).unwrap();
        assert!(marked.contains("conflicts_with"), "marked: {marked}");
        let found: Vec<String> = banana()
            .await
            .unwrap()
            .into_iter()
            .map(|hit| hit.content)
            .collect();
        let expected: &[&str] = if hand_edited {
            &[]
        } else {
            &["The user live in Leuven."]
        };
        assert_eq!(found, expected, "hand edited: {hand_edited}");
    }
}
