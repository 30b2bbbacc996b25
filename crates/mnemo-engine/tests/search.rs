//! The read path over a real store, the real embedding model and the real embedded index:
//! scopes, metadata filters, lexical search, neighbour-aware keys, the cross-encoder stage,
//! recency, per-request knobs, and the optional query expansion (against a scripted LLM).

use chrono::{Duration, SubsecRound, Utc};
use mnemo_core::{Config, MemoryRecord, Role};
use mnemo_engine::{MemoryClient, OpenOptions, SearchHit, SearchRequest};
use serde_json::json;

use crate::support;
use support::{config_without_reranker, conv, models, open_rebuilt};

async fn open_with(config: Config) -> MemoryClient {
    MemoryClient::open(config, OpenOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn contents(hits: &[SearchHit]) -> Vec<&str> {
    hits.iter().map(|h| h.content.as_str()).collect()
}

fn record(conversation: &str, role: Role, content: &str, minutes_ago: i64) -> MemoryRecord {
    let mut r = MemoryRecord::new(conv(conversation), role, content);
    r.created_at = (Utc::now() - Duration::minutes(minutes_ago)).trunc_subsecs(3);
    r
}

#[tokio::test(flavor = "multi_thread")]
async fn the_conversation_and_global_are_searched_never_others_or_summaries() {
    let dir = tempfile::tempdir().unwrap();
    let client = open_with(config_without_reranker(dir.path())).await;
    client
        .add_records(vec![
            record("c1", Role::Memory, "My dog Biscuit loves the beach.", 5),
            record("global", Role::Memory, "The user's dog is a beagle.", 5),
            record("c2", Role::Memory, "Another user's dog hates the beach.", 5),
            record("c1", Role::Summary, "All about the dog and the beach.", 5),
        ])
        .await
        .unwrap();
    let hits = client
        .search(SearchRequest::new("dog beach", conv("c1")).top_k(10))
        .await
        .unwrap();
    let mut found = contents(&hits);
    found.sort();
    assert_eq!(
        found,
        [
            "My dog Biscuit loves the beach.",
            "The user's dog is a beagle."
        ]
    );
    for hit in &hits {
        assert!(hit.scores.dense.is_some() || hit.scores.lexical.is_some());
        assert!((0.0..=1.0).contains(&hit.scores.fused), "{hit:?}");
        assert!(hit.path.is_file());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn metadata_filters_apply_inside_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let client = open_with(config_without_reranker(dir.path())).await;
    let mut records = Vec::new();
    for (i, topic) in ["food", "food", "work", "food"].iter().enumerate() {
        let mut r = record(
            "c1",
            Role::Memory,
            &format!("Note {i} about lunch plans."),
            5,
        );
        r.metadata.insert("topic".into(), json!(topic));
        r.metadata.insert("weight".into(), json!(i));
        records.push(r);
    }
    client.add_records(records).await.unwrap();
    let search = |filter: serde_json::Value| {
        let client = client.clone();
        async move {
            let options = SearchRequest {
                filter: Some(filter),
                ..SearchRequest::new("lunch plans", conv("c1")).top_k(10)
            };
            let mut found: Vec<String> = client
                .search(options)
                .await
                .unwrap()
                .into_iter()
                .map(|h| h.content)
                .collect();
            found.sort();
            found
        }
    };
    assert_eq!(
        search(json!({"topic": "food", "weight": {"gte": 1}})).await,
        ["Note 1 about lunch plans.", "Note 3 about lunch plans."]
    );
    assert_eq!(
        search(json!({"$or": [{"topic": "work"}, {"weight": {"lt": 1}}]})).await,
        ["Note 0 about lunch plans.", "Note 2 about lunch plans."]
    );
    assert_eq!(
        search(json!({"topic": {"nin": ["food"]}})).await,
        ["Note 2 about lunch plans."]
    );

    let options = SearchRequest {
        filter: Some(json!({"weight": {"around": 2}})),
        ..SearchRequest::new("lunch", conv("c1")).top_k(10)
    };
    let err = client.search(options).await.unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("\"around\""), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rare_exact_word_is_found_lexically() {
    let dir = tempfile::tempdir().unwrap();
    let client = open_with(config_without_reranker(dir.path())).await;
    let mut texts: Vec<String> = (0..30)
        .map(|i| format!("I bought a new gadget in week {i}."))
        .collect();
    texts.push("The router's serial number is QX7734.".into());
    client.add(texts, &conv("c1")).await.unwrap();
    let hits = client
        .search(SearchRequest::new("QX7734", conv("c1")).top_k(1))
        .await
        .unwrap();
    assert_eq!(contents(&hits), ["The router's serial number is QX7734."]);
    assert!(hits[0].scores.lexical.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_naming_a_day_finds_what_was_said_of_that_day_in_other_words() {
    let dir = tempfile::tempdir().unwrap();
    let said_on = |content: &str, day: &str| {
        let mut r = MemoryRecord::new(conv("c1"), Role::User, content);
        r.created_at = format!("{day}T14:00:00Z").parse().unwrap();
        r
    };
    let records = vec![
        // 8 May 2023: "yesterday" is 7 May.
        said_on(
            "I went swimming at the lake yesterday, and the water was lovely.",
            "2023-05-08",
        ),
        said_on("I went swimming at the lake with Ann.", "2023-06-20"),
        said_on("I went swimming at the lake, it was cold.", "2023-03-02"),
        said_on("I went swimming at the lake before work.", "2023-09-14"),
    ];
    let ask = |client: &MemoryClient, query: &str| {
        let request = SearchRequest {
            now: Some("2023-10-01T12:00:00Z".parse().unwrap()),
            ..SearchRequest::new(query, conv("c1")).top_k(1)
        };
        let client = client.clone();
        async move { client.search(request).await.unwrap() }
    };
    // Words alone cannot tell these apart; the date prefix is off so that only the tokens
    // carry dates.
    let mut lexical_only = config_without_reranker(dir.path());
    lexical_only.retrieval.dense = false;
    lexical_only.retrieval.lexical_date = false;
    let client = open_with(lexical_only).await;
    client.add_records(records).await.unwrap();
    for query in [
        "Where did I go swimming on May 7, 2023?",
        "where did I swim on the 7th of May",
        "Where did I go swimming the day before 8 May 2023?",
    ] {
        let hits = ask(&client, query).await;
        assert_eq!(
            contents(&hits),
            ["I went swimming at the lake yesterday, and the water was lovely."],
            "{query}"
        );
    }
    // A month: the one memory written in June.
    let hits = ask(&client, "Who did I swim with in June 2023?").await;
    assert_eq!(contents(&hits), ["I went swimming at the lake with Ann."]);
}

#[tokio::test(flavor = "multi_thread")]
async fn another_embedding_model_is_refused_until_a_full_reindex() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let client = open_with(config_without_reranker(&store)).await;
    client
        .add(
            vec![
                "My dog Biscuit loves the beach.".into(),
                "I work as a nurse.".into(),
            ],
            &conv("c1"),
        )
        .await
        .unwrap();
    drop(client);
    let client = open_with(config_without_reranker(&store)).await;
    assert_eq!(
        client.startup_sync().embedded,
        0,
        "same model: nothing to embed"
    );
    drop(client);

    // The same weights under another name stand for another model of the same dimension,
    // whose vectors must not be mixed with the old ones.
    let other = dir.path().join("other-model");
    std::fs::create_dir(&other).unwrap();
    for file in std::fs::read_dir(models().join("all-MiniLM-L6-v2")).unwrap() {
        let file = file.unwrap().path();
        std::fs::copy(&file, other.join(file.file_name().unwrap())).unwrap();
    }
    let mut switched = config_without_reranker(&store);
    switched.embedding_model = other.to_string_lossy().into_owned();
    let refused = MemoryClient::open(switched.clone(), OpenOptions::default())
        .await
        .err()
        .expect("another model is refused")
        .to_string();
    assert!(
        refused.contains("mnemo reindex --full") && refused.contains("other-model"),
        "{refused}"
    );
    let client = open_rebuilt(switched.clone()).await;
    assert_eq!(
        client.startup_sync().embedded,
        2,
        "a rebuild re-embeds every memory with the new model"
    );
    let hits = client
        .search(SearchRequest::new("Biscuit", conv("c1")).top_k(1))
        .await
        .unwrap();
    assert_eq!(contents(&hits), ["My dog Biscuit loves the beach."]);
    drop(client);
    let client = open_with(switched).await;
    assert_eq!(client.startup_sync().embedded, 0, "and only once");
}

/// Two memories about a novel, which a search for books finds only through the vocabulary,
/// among 25 others.
fn novels_among_errands() -> Vec<MemoryRecord> {
    let mut records = vec![
        record("c1", Role::User, "I finished a long novel last night.", 50),
        record("c1", Role::User, "That novel sounds wonderful.", 49),
        record("c1", Role::User, "The weather was lovely today.", 40),
        record("c1", Role::User, "Rainy weather again.", 39),
        record("c1", Role::User, "My guitar needs new strings.", 30),
        record("c1", Role::User, "I tuned the guitar.", 29),
        record("c1", Role::User, "I cycle to work on my bicycle.", 20),
    ];
    // Words more than a tenth of the memories use are no candidates: "errand" is not
    // offered, and a store needs twenty memories before a word two of them use is.
    records.extend((0..20).map(|i| {
        record(
            "c1",
            Role::User,
            &format!("Ran an errand, number {i}."),
            60 + i,
        )
    }));
    records
}

#[tokio::test(flavor = "multi_thread")]
async fn vocabulary_expansion_adds_the_stores_words_nearest_the_query() {
    let dir = tempfile::tempdir().unwrap();
    // Lexical only: the query shares no word with the memories; only the expansion can
    // (document expansion, which could too, is off).
    let with_words = |n: usize| {
        let mut config = config_without_reranker(dir.path());
        config.retrieval.dense = false;
        config.retrieval.document_expansion = 0;
        config.retrieval.vocabulary_expansion = n;
        config
    };
    let search = |client: MemoryClient, query: &'static str| async move {
        let hits = client
            .search(SearchRequest::new(query, conv("c1")).top_k(1))
            .await
            .unwrap();
        (client, contents(&hits).join(" "))
    };
    let books = "Which books has Ann enjoyed?";
    let client = open_with(with_words(1)).await;
    client.add_records(novels_among_errands()).await.unwrap();
    let (client, found) = search(client, books).await;
    assert!(found.contains("novel"), "{found:?}");
    // A word one memory uses is no candidate: "bicycle" is not offered yet.
    let vehicles = "What vehicles does Ann ride?";
    let (client, found) = search(client, vehicles).await;
    assert!(!found.contains("bicycle"), "{found:?}");
    // The vocabulary grows as memories are indexed.
    client
        .add_records(vec![record("c1", Role::User, "A flat bicycle tyre.", 10)])
        .await
        .unwrap();
    let (client, found) = search(client, vehicles).await;
    assert!(found.contains("bicycle"), "{found:?}");
    drop(client);

    // Off, or the added words weighing nothing: nothing shares the query's words.
    let (client, found) = search(open_with(with_words(0)).await, books).await;
    assert_eq!(found, "");
    drop(client);
    let mut weightless = with_words(1);
    weightless.retrieval.vocabulary_expansion_weight = 0.0;
    let client = open_with(weightless).await;
    client.vocabulary_built().await;
    let (client, found) = search(client, books).await;
    assert_eq!(found, "");
    drop(client);
    // Reopened, the vocabulary is built again from what the index holds, in the background.
    let client = open_with(with_words(1)).await;
    client.vocabulary_built().await;
    let (_, found) = search(client, books).await;
    assert!(found.contains("novel"), "{found:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn document_expansion_puts_the_models_words_nearest_a_memory_in_its_key() {
    let dir = tempfile::tempdir().unwrap();
    // Lexical only, without the query's expansion: only the memories' keys can bring in a
    // word the query uses.
    let with_words = |n: usize| {
        let mut config = config_without_reranker(dir.path());
        config.retrieval.dense = false;
        config.retrieval.vocabulary_expansion = 0;
        config.retrieval.document_expansion = n;
        config
    };
    let found = |client: MemoryClient, query: &'static str| async move {
        let hits = client
            .search(SearchRequest::new(query, conv("c1")).top_k(1))
            .await
            .unwrap();
        contents(&hits).join(" ")
    };
    let client = open_with(with_words(5)).await;
    client.add_records(novels_among_errands()).await.unwrap();
    // "I finished a long novel last night." holds *book*; facts (not turns) get words too.
    let fact = MemoryRecord::new(conv("c1"), Role::Memory, "The user plays the cello.");
    client.add_records(vec![fact]).await.unwrap();
    let books = "Which books has Ann enjoyed?";
    assert!(found(client.clone(), books).await.contains("novel"));
    assert!(found(client, "violin").await.contains("cello"));
    // Off: the keys are rebuilt without the words at the next start, and nothing matches.
    assert_eq!(found(open_with(with_words(0)).await, books).await, "");
    let mut weightless = with_words(5);
    weightless.retrieval.document_expansion_weight = 0.0;
    assert_eq!(found(open_with(weightless).await, books).await, "");
    // On again: rebuilt with them, from the vectors the index holds (nothing re-embedded).
    let client = open_with(with_words(5)).await;
    assert_eq!(client.startup_sync().embedded, 0);
    assert!(found(client, books).await.contains("novel"));
}

/// A turn's key is built again whenever a neighbour changes, but its nearest model words
/// depend on its own text only: the snapshot keeps them, and a rebuilt key takes them from
/// there, not from the model again. Shown with a word planted in the snapshot by hand: once
/// a new neighbour rebuilds the turn's key, the key holds it. Words the model does not have,
/// or more than the scheme takes, are not taken.
#[tokio::test(flavor = "multi_thread")]
async fn a_rebuilt_key_takes_its_nearest_words_from_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        let mut config = config_without_reranker(dir.path());
        config.retrieval.dense = false;
        config.retrieval.vocabulary_expansion = 0;
        config.retrieval.document_expansion = 2;
        // Every turn added below is in the first one's window.
        config.retrieval.lexical_neighbour_turns = 8;
        config
    };
    let found = |client: &MemoryClient, query: &'static str| {
        let client = client.clone();
        async move {
            let hits = client
                .search(SearchRequest::new(query, conv("c1")).top_k(1))
                .await
                .unwrap();
            contents(&hits).join(" ")
        }
    };
    let texts = [
        "The train was late again.",
        "Sorry to hear that.",
        "I walked home.",
    ];
    let all = turns("c1", &texts);
    let client = open_with(config()).await;
    client.add_records(all[..3].to_vec()).await.unwrap();
    let first = client.list(Some(conv("c1"))).await.unwrap()[0].path.clone();
    drop(client);
    let first = first
        .strip_prefix(dir.path())
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let snapshot_path = dir.path().join("memory_index.json");
    let plant = |words: &str| {
        let mut snapshot: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&snapshot_path).unwrap()).unwrap();
        let entry = &mut snapshot["files"][&first];
        assert!(entry["nearest_words"].is_string(), "recorded: {entry}");
        entry["nearest_words"] = words.into();
        std::fs::write(&snapshot_path, serde_json::to_vec(&snapshot).unwrap()).unwrap();
    };
    plant("banana");
    let client = open_with(config()).await;
    assert_eq!(found(&client, "banana").await, "", "the key is as it was");
    let mut next = record("c1", Role::User, "Tomorrow I take the bus.", 0);
    next.created_at = all[2].created_at + Duration::seconds(1);
    client.add_records(vec![next]).await.unwrap();
    assert_eq!(
        found(&client, "banana").await,
        texts[0],
        "rebuilt with the kept words"
    );
    drop(client);

    for junk in ["zzqqxv", "banana apple cherry"] {
        plant(junk);
        let client = open_with(config()).await;
        let mut next = record("c1", Role::User, "The bus was on time.", 0);
        next.created_at = Utc::now().trunc_subsecs(3);
        client.add_records(vec![next]).await.unwrap();
        for word in junk.split(' ') {
            assert_eq!(found(&client, word).await, "", "{junk}");
        }
        drop(client);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_vocabularys_vectors_are_kept_between_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config_without_reranker(dir.path());
    config.retrieval.dense = false;
    config.retrieval.vocabulary_expansion = 1;
    let file = dir.path().join("vocabulary.bin");
    let reopened = || async {
        let client = open_with(config.clone()).await;
        let report = client
            .vocabulary_built()
            .await
            .expect("a vocabulary is built");
        let hits = client
            .search(SearchRequest::new("Which books has Ann enjoyed?", conv("c1")).top_k(1))
            .await
            .unwrap();
        assert!(contents(&hits).join(" ").contains("novel"), "{hits:?}");
        (client, report)
    };
    let client = open_with(config.clone()).await;
    client.add_records(novels_among_errands()).await.unwrap();
    drop(client);
    assert!(
        !file.exists(),
        "words indexed as memories come are kept by the next build"
    );

    let (client, first) = reopened().await;
    assert!(first.words > 5, "{first:?}");
    assert_eq!((first.embedded, first.from_file), (first.words, 0));
    drop(client);
    assert!(file.is_file());
    // Every vector from the file, and searches expand as before.
    let (client, second) = reopened().await;
    assert_eq!((second.embedded, second.from_file), (0, first.words));
    // A new memory's words are all the next build embeds.
    client
        .add_records(vec![record("c1", Role::User, "A flat tyre.", 10)])
        .await
        .unwrap();
    drop(client);
    let (client, third) = reopened().await;
    assert_eq!(
        (third.embedded, third.from_file),
        (2, first.words),
        "flat, tyre"
    );
    drop(client);

    // A damaged file or a link in its place is not used: every word is embedded again, and
    // the file written anew.
    std::fs::write(&file, b"MNEMOVOC and then nonsense").unwrap();
    let (client, damaged) = reopened().await;
    assert_eq!((damaged.embedded, damaged.from_file), (third.words, 0));
    drop(client);
    let elsewhere = dir.path().join("elsewhere.bin");
    std::fs::rename(&file, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    let (client, linked) = reopened().await;
    assert_eq!((linked.embedded, linked.from_file), (third.words, 0));
    drop(client);
    assert!(!file.is_symlink(), "the link replaced by a file of mnemo's");
    let (_, restored) = reopened().await;
    assert_eq!(restored.from_file, third.words);
}

#[tokio::test(flavor = "multi_thread")]
async fn query_expansion_adds_the_llms_words_and_never_fails_a_search() {
    use mnemo_scripted_llm::{ChatRequest, Reply, ScriptedLlm};
    let dir = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::with_handler(|_: &ChatRequest| {
        Reply::text("books, novel, reading,\n author, Dune, series")
    })
    .await;
    // Lexical only: the query shares no word with the memory; only the expansion does.
    let with_expansion = |on: bool, wait_ms: u64| {
        let mut config = config_without_reranker(dir.path());
        config.openai_base_url = Some(llm.base_url());
        config.retrieval.dense = false;
        config.retrieval.query_expansion = on;
        config.retrieval.query_expansion_timeout_ms = wait_ms;
        config
    };
    let question = "Which stories has Ann enjoyed?";
    let dune = "I finally finished Dune by Frank Herbert.";
    {
        let client = open_with(with_expansion(false, 60_000)).await;
        client
            .add_records(vec![
                record("c1", Role::User, dune, 30),
                record("c1", Role::User, "The weather was lovely today.", 20),
            ])
            .await
            .unwrap();
        let hits = client
            .search(SearchRequest::new(question, conv("c1")).top_k(1))
            .await
            .unwrap();
        assert!(hits.is_empty(), "{:?}", contents(&hits));
        assert_eq!(llm.chat_calls(), 0, "off: no call");
    }
    // The model answers at once; the wait is one no load on the machine can use up.
    let client = open_with(with_expansion(true, 60_000)).await;
    let hits = client
        .search(SearchRequest::new(question, conv("c1")).top_k(1))
        .await
        .unwrap();
    assert_eq!(contents(&hits), [dune]);
    let asked = String::from_utf8_lossy(&llm.requests()[0].raw_body).into_owned();
    assert!(asked.contains(question), "{asked}");

    drop(client);

    // A failing or late LLM leaves the query as it is: no error, no expansion. The late
    // answer would expand the query (and find Dune) were the search to wait for it: it comes
    // after 30 s, long after the 500 ms wait, and before the call's own deadline (120 s).
    let client = open_with(with_expansion(true, 500)).await;
    for fault in [
        Reply::status(500, "boom"),
        Reply::delay(std::time::Duration::from_secs(30), Reply::text("Dune")),
    ] {
        llm.set_handler(move |_: &ChatRequest| fault.clone());
        let hits = client
            .search(SearchRequest::new(question, conv("c1")).top_k(1))
            .await
            .unwrap();
        assert!(hits.is_empty(), "{:?}", contents(&hits));
    }
}

fn turns(conversation: &str, texts: &[&str]) -> Vec<MemoryRecord> {
    let start = Utc::now() - Duration::hours(1);
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            let mut r = MemoryRecord::new(conv(conversation), role, *text);
            r.created_at = (start + Duration::seconds(i as i64)).trunc_subsecs(3);
            r
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_is_found_through_the_question_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let client = open_with(config_without_reranker(dir.path())).await;
    client
        .add_records(turns(
            "c1",
            &[
                "Which instrument did your grandmother teach you?",
                "The cello, when I was eight.",
                "Lovely. Any plans for the weekend?",
                "Groceries and a long walk.",
            ],
        ))
        .await
        .unwrap();
    // "instrument" and "grandmother" appear only in the question turn; the answer's key
    // carries them as its neighbour's words.
    let hits = client
        .search(SearchRequest::new("instrument grandmother taught", conv("c1")).top_k(2))
        .await
        .unwrap();
    let found = contents(&hits);
    assert!(found.contains(&"The cello, when I was eight."), "{found:?}");
    let answer = hits
        .iter()
        .find(|h| h.content.starts_with("The cello"))
        .unwrap();
    assert!(
        answer.scores.lexical.is_some(),
        "matched by its neighbour's words"
    );
}

async fn answers(client: &MemoryClient, queries: &[&str]) -> Vec<Vec<(String, String)>> {
    let mut all = Vec::new();
    for q in queries {
        let hits = client
            .search(SearchRequest::new(*q, conv("c1")).top_k(4))
            .await
            .unwrap();
        all.push(
            hits.into_iter()
                .map(|h| (h.id.to_string(), format!("{:.4}", h.score)))
                .collect(),
        );
    }
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_follow_neighbour_edits_and_match_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let texts = [
        "What did you cook on Sunday?",
        "A lentil soup with lots of cumin.",
        "Did the kids like it?",
        "They asked for seconds.",
        "What about dessert?",
        "Baked apples with cinnamon.",
    ];
    let queries = [
        "soup cumin",
        "kids seconds",
        "dessert apples",
        "what did the children think of the curry",
    ];
    // Two turns on each side, so that the window's edge falls inside the exchange.
    let config = || {
        let mut config = config_without_reranker(dir.path());
        config.retrieval.lexical_neighbour_turns = 2;
        config
    };
    {
        let client = open_with(config()).await;
        let all = turns("c1", &texts);
        // Two writes: the first batch's last turn gains its next neighbour later.
        client.add_records(all[..3].to_vec()).await.unwrap();
        client.add_records(all[3..].to_vec()).await.unwrap();
        let path = client.list(Some(conv("c1"))).await.unwrap()[3].path.clone();
        drop(client);
        // A hand edit of a middle turn changes the keys of the four turns around it.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("seconds", "a curry next time")).unwrap();
    }
    let client = open_with(config()).await;
    assert_eq!(client.startup_sync().embedded, 1, "only the edited file");
    // The edit reached the keys of the turns two away, not three.
    let hits = client
        .search(SearchRequest::new("curry", conv("c1")).top_k(6))
        .await
        .unwrap();
    for (text, near) in [("Baked apples", true), ("What did you cook", false)] {
        let hit = hits.iter().find(|h| h.content.starts_with(text)).unwrap();
        assert_eq!(hit.scores.lexical.is_some(), near, "{text}: {hits:?}");
    }
    let incremental = answers(&client, &queries).await;
    drop(client);

    let rebuilt = open_rebuilt(config()).await;
    assert_eq!(answers(&rebuilt, &queries).await, incremental);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cross_encoder_decides_the_order_when_installed() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = models().join("tiny-cross-encoder");
    assert!(
        tiny.join("model.onnx").is_file(),
        "{} is missing: run `scripts/setup test`",
        tiny.display()
    );
    let mut cfg = config_without_reranker(dir.path());
    cfg.retrieval.reranker = mnemo_core::RerankerMode::On;
    cfg.retrieval.reranker_model = tiny.to_string_lossy().into_owned();
    let client = open_with(cfg).await;
    assert!(client.has_reranker());
    // The tiny model scores apple 3, banana 2, cherry 1, rotten -4 (docs side only).
    let texts = [
        "fruit salad with cherry",
        "fruit: a rotten apple",
        "fruit: banana",
        "fruit: apple",
    ];
    client
        .add(texts.iter().map(|t| t.to_string()).collect(), &conv("c1"))
        .await
        .unwrap();
    let options = SearchRequest {
        mmr_lambda: Some(1.0),
        ..SearchRequest::new("fruit", conv("c1")).top_k(4)
    };
    let hits = client.search(options).await.unwrap();
    assert_eq!(
        contents(&hits),
        [
            "fruit: apple",
            "fruit: banana",
            "fruit salad with cherry",
            "fruit: a rotten apple"
        ]
    );
    assert_eq!(hits[0].scores.rerank, Some(1.0));
    assert!(hits.iter().all(|h| h.scores.rerank.is_some()));
    let apple = hits[0].scores.rerank_absolute.unwrap();
    assert!(
        (apple - 1.0 / (1.0 + (-3.0f32).exp())).abs() < 1e-3,
        "{apple}"
    );

    // An absolute floor drops what the model itself scores low (the rotten apple at
    // logistic(-1) ≈ 0.27), whatever the best of the pool; the relative threshold, over the
    // best, drops the cherry (0.73 / 0.95 ≈ 0.77) as well.
    let floored = |absolute, relative| SearchRequest {
        mmr_lambda: Some(1.0),
        min_rerank_score: absolute,
        score_threshold: relative,
        ..SearchRequest::new("fruit", conv("c1")).top_k(4)
    };
    let hits = client.search(floored(Some(0.35), None)).await.unwrap();
    assert_eq!(
        contents(&hits),
        ["fruit: apple", "fruit: banana", "fruit salad with cherry"]
    );
    let hits = client.search(floored(None, Some(0.8))).await.unwrap();
    assert_eq!(contents(&hits), ["fruit: apple", "fruit: banana"]);
    let refused = client.search(floored(Some(1.5), None)).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("min_rerank_score must be between 0 and 1"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn recency_speaks_only_for_questions_about_now() {
    let dir = tempfile::tempdir().unwrap();
    let client = open_with(config_without_reranker(dir.path())).await;
    client
        .add_records(vec![
            record(
                "c1",
                Role::Memory,
                "I work at the bakery on Elm Street.",
                60 * 24 * 300,
            ),
            record(
                "c1",
                Role::Memory,
                "I work at the bookshop by the station.",
                10,
            ),
        ])
        .await
        .unwrap();
    let top = |query: &'static str, weight: f32| {
        let client = client.clone();
        async move {
            let options = SearchRequest {
                recency_weight: Some(weight),
                mmr_lambda: Some(1.0),
                ..SearchRequest::new(query, conv("c1")).top_k(2)
            };
            let hits = client.search(options).await.unwrap();
            (hits[0].content.clone(), hits[1].scores.recency)
        }
    };
    let (now, _) = top("Where do I work now? bakery", 0.9).await;
    assert_eq!(now, "I work at the bookshop by the station.");
    let (past, _) = top("Where did I work? bakery", 0.9).await;
    assert_eq!(
        past, "I work at the bakery on Elm Street.",
        "no cue: no recency"
    );
    let (off, _) = top("Where do I work now? bakery", 0.0).await;
    assert_eq!(
        off, "I work at the bakery on Elm Street.",
        "weight 0 per request"
    );

    let bad = SearchRequest {
        recency_weight: Some(1.5),
        ..SearchRequest::new("work", conv("c1")).top_k(2)
    };
    let err = client.search(bad).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("recency_weight must be between 0 and 1"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_threshold_drops_weak_matches_and_top_k_zero_retrieves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let client = open_with(config_without_reranker(dir.path())).await;
    client
        .add(
            vec![
                "My sister lives in Lisbon.".into(),
                "The printer needs new toner.".into(),
            ],
            &conv("c1"),
        )
        .await
        .unwrap();
    let options = SearchRequest {
        score_threshold: Some(0.5),
        ..SearchRequest::new("where does my sister live", conv("c1")).top_k(5)
    };
    let hits = client.search(options).await.unwrap();
    assert_eq!(contents(&hits), ["My sister lives in Lisbon."]);
    let none = client
        .search(SearchRequest::new("sister", conv("c1")).top_k(0))
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_key_scheme_or_bm25_setting_rebuilds_every_lexical_vector() {
    let dir = tempfile::tempdir().unwrap();
    let lexical_only = |date: bool, k1: f64| {
        let mut config = config_without_reranker(dir.path());
        config.retrieval.dense = false;
        config.retrieval.lexical_date = date;
        config.retrieval.bm25_k1 = k1;
        config
    };
    let lexical_scores = |hits: &[SearchHit]| -> Vec<(String, String)> {
        hits.iter()
            .map(|h| {
                (
                    h.content.clone(),
                    format!("{:.5}", h.scores.lexical.unwrap()),
                )
            })
            .collect()
    };
    let mut records = turns(
        "c1",
        &[
            "We planted the tomatoes.",
            "Tomatoes need sun, lots of sun.",
            "The basil went in too.",
        ],
    );
    for r in &mut records {
        r.created_at = chrono::DateTime::parse_from_rfc3339("2023-05-08T13:56:00Z")
            .unwrap()
            .to_utc();
    }
    let query = || SearchRequest::new("tomatoes sun 2023", conv("c1")).top_k(3);

    let without_dates = open_with(lexical_only(false, 1.2)).await;
    without_dates.add_records(records).await.unwrap();
    let hits = without_dates
        .search(SearchRequest::new("2023", conv("c1")).top_k(3))
        .await
        .unwrap();
    assert!(
        hits.is_empty(),
        "no key holds a date yet: {:?}",
        contents(&hits)
    );
    drop(without_dates);

    // The same files under a scheme with dates: every key is rebuilt on opening, nothing is
    // re-embedded.
    let with_dates = open_with(lexical_only(true, 1.2)).await;
    assert_eq!(with_dates.startup_sync().embedded, 0);
    let hits = with_dates
        .search(SearchRequest::new("2023", conv("c1")).top_k(3))
        .await
        .unwrap();
    assert_eq!(hits.len(), 3, "every key now carries its date");
    let k1_12 = lexical_scores(&with_dates.search(query()).await.unwrap());
    drop(with_dates);

    // Another BM25 saturation: the term weights change, so every vector is rebuilt, and the
    // index answers as one built from scratch under the new setting would.
    let resaturated = open_with(lexical_only(true, 2.0)).await;
    let k1_20 = lexical_scores(&resaturated.search(query()).await.unwrap());
    assert_ne!(k1_20, k1_12, "the scores follow the new k1");
    drop(resaturated);
    let rebuilt = open_rebuilt(lexical_only(true, 2.0)).await;
    assert_eq!(
        lexical_scores(&rebuilt.search(query()).await.unwrap()),
        k1_20
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn turns_that_say_nothing_give_their_places_to_memories_that_do() {
    let refusal = "I'm sorry, I don't have that information about your grandfather.";
    let mut records = turns(
        "c1",
        &[
            "Where did my grandfather grow up, again?",
            refusal,
            "My grandfather grew up in Ribe and he repaired fishing boats.",
            "Good to know, noted!",
        ],
    );
    records.push(record(
        "c1",
        Role::Memory,
        "The user's grandfather grew up in Ribe.",
        30,
    ));
    let ask = |client: &MemoryClient| {
        let client = client.clone();
        async move {
            let request =
                SearchRequest::new("Where did my grandfather grow up?", conv("c1")).top_k(3);
            client.search(request).await.unwrap()
        }
    };

    // Ranked like any memory, the refusal is among the three best: it shares the question's
    // words.
    let dir = tempfile::tempdir().unwrap();
    let mut as_any = config_without_reranker(dir.path());
    as_any.retrieval.low_information_last = false;
    let client = open_with(as_any).await;
    client.add_records(records.clone()).await.unwrap();
    let hits = ask(&client).await;
    assert!(contents(&hits).contains(&refusal), "{:?}", contents(&hits));
    let flagged: Vec<&str> = hits
        .iter()
        .filter(|h| h.scores.low_information)
        .map(|h| h.content.as_str())
        .collect();
    assert_eq!(flagged, [refusal], "the flag is set either way");
    drop(client);

    // By default it gives its place to what names the town, and so does the assistant's
    // "Good to know, noted!", which MMR would otherwise like for being unlike the rest.
    let dir = tempfile::tempdir().unwrap();
    let client = open_with(config_without_reranker(dir.path())).await;
    client.add_records(records).await.unwrap();
    let hits = ask(&client).await;
    let found = contents(&hits);
    assert!(!found.contains(&refusal), "{found:?}");
    assert!(
        found.contains(&"The user's grandfather grew up in Ribe."),
        "{found:?}"
    );
    assert!(
        found.contains(&"My grandfather grew up in Ribe and he repaired fishing boats."),
        "{found:?}"
    );
    assert!(hits.iter().all(|h| !h.scores.low_information), "{found:?}");
    // With more places than memories that say something, they fill the rest, last.
    let request = SearchRequest::new("Where did my grandfather grow up?", conv("c1")).top_k(5);
    let hits = client.search(request).await.unwrap();
    let quiet: Vec<bool> = hits.iter().map(|h| h.scores.low_information).collect();
    assert_eq!(
        quiet,
        [false, false, false, true, true],
        "{:?}",
        contents(&hits)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_is_found_by_the_facts_drawn_from_it_and_gives_them_its_place() {
    let dir = tempfile::tempdir().unwrap();
    // Only facts may bring "adopt" into the turn's key (document expansion would too).
    let lexical_only = |facts: bool| {
        let mut config = config_without_reranker(dir.path());
        config.retrieval.dense = false;
        config.retrieval.document_expansion = 0;
        config.retrieval.lexical_facts = facts;
        config
    };
    let records = turns(
        "c1",
        &[
            "Researching agencies, it's been a dream to give kids a loving home.",
            "That's wonderful!",
            "Any plans for the weekend?",
            "Groceries and a long walk.",
        ],
    );
    let turn = records[0].clone();
    let mut fact = MemoryRecord::new(
        conv("c1"),
        Role::Memory,
        "The user wants to adopt children.",
    );
    fact.source_id = Some(turn.id);
    let search = |client: &MemoryClient| {
        let client = client.clone();
        async move {
            let hits = client
                .search(SearchRequest::new("adopt", conv("c1")).top_k(5))
                .await
                .unwrap();
            hits.into_iter().map(|h| h.content).collect::<Vec<_>>()
        }
    };

    let client = open_with(lexical_only(true)).await;
    client.add_records(records).await.unwrap();
    assert!(search(&client).await.is_empty(), "no key says 'adopt' yet");
    let fact = client.add_records(vec![fact]).await.unwrap().remove(0);
    // Both the turn (through its fact) and the fact match; they take one place: the fact's.
    assert_eq!(
        search(&client).await,
        std::slice::from_ref(&fact.record.content)
    );
    drop(client);
    let mut config = lexical_only(true);
    config.retrieval.facts_stand_for_turns = false;
    let both = open_with(config).await;
    let found = search(&both).await;
    assert!(found.contains(&turn.content), "{found:?}");
    assert!(found.contains(&fact.record.content), "{found:?}");
    drop(both);

    // Without facts in keys, only the fact holds the word.
    let without = open_with(lexical_only(false)).await;
    assert_eq!(
        without.startup_sync().embedded,
        0,
        "keys rebuilt, nothing re-embedded"
    );
    assert_eq!(
        search(&without).await,
        std::slice::from_ref(&fact.record.content)
    );
    drop(without);

    // A snapshot from before facts recorded their turn is completed from the files.
    let snapshot_path = dir.path().join("memory_index.json");
    let mut snapshot: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&snapshot_path).unwrap()).unwrap();
    snapshot["fact_sources"] = json!(false);
    for entry in snapshot["files"].as_object_mut().unwrap().values_mut() {
        entry.as_object_mut().unwrap().remove("source_id");
    }
    std::fs::write(&snapshot_path, serde_json::to_vec(&snapshot).unwrap()).unwrap();
    let mut config = lexical_only(true);
    config.retrieval.facts_stand_for_turns = false;
    let client = open_with(config).await;
    assert_eq!(client.startup_sync().embedded, 0, "nothing re-embedded");
    let found = search(&client).await;
    assert!(found.contains(&turn.content), "{found:?}");

    // Once the fact is deleted, the turn's key no longer holds its words.
    client.delete(fact.record.id).await.unwrap();
    assert!(search(&client).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_query_about_nothing_stored_finds_nothing_above_the_relevance_floor() {
    let dir = tempfile::tempdir().unwrap();
    let client = open_with(config_without_reranker(dir.path())).await;
    client
        .add_records(vec![
            record(
                "c1",
                Role::Memory,
                "The user grows tomatoes on the balcony.",
                5,
            ),
            record("c1", Role::Memory, "The user's sister teaches violin.", 5),
            record("c1", Role::User, "I repotted the basil this morning.", 5),
        ])
        .await
        .unwrap();
    let search = |query: &str, floor: Option<f32>| {
        let request = SearchRequest {
            relevance_floor: floor,
            ..SearchRequest::new(query, conv("c1")).top_k(5)
        };
        let client = &client;
        async move { client.search(request).await.unwrap() }
    };
    let unrelated = "Which train goes to the airport after midnight?";
    let default_floor = Config::default().relevance_floor;
    let floor = Some(default_floor);
    assert_eq!(
        contents(&search(unrelated, floor).await),
        Vec::<&str>::new()
    );
    // The floor is all that withheld them: a search that asks for none (the default of a
    // search; the chat path sets the configured one) gets the nearest memories.
    let unfloored = search(unrelated, None).await;
    assert!(!unfloored.is_empty());
    let best = unfloored
        .iter()
        .filter_map(|h| h.scores.dense)
        .fold(0.0_f32, f32::max);
    assert!(best < default_floor, "{best}");
    // A related question passes it, and each hit shows the cosine it was judged by.
    let related = search("What vegetables does the user grow?", floor).await;
    assert_eq!(
        contents(&related)[0],
        "The user grows tomatoes on the balcony."
    );
    assert!(related[0].scores.dense >= Some(default_floor));
    let invalid = client
        .search(SearchRequest {
            relevance_floor: Some(1.5),
            ..SearchRequest::new("x", conv("c1"))
        })
        .await
        .unwrap_err();
    assert!(invalid.to_string().contains("relevance_floor"), "{invalid}");
}
