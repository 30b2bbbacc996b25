//! The embedded qdrant-edge index on a real directory.

use mnemo_core::MemoryId;
use mnemo_index::{
    Bounds, Condition, EdgeIndex, EdgeIndexOptions, Filter, LexicalEncoder, LexicalOptions, Point,
    Query, QueryVector, SparseVector, VectorIndex,
};
use serde_json::json;

const DIM: usize = 8;

/// A unit vector pointing mostly along axis `axis`, tilted by `tilt` towards the next axis.
fn vector(axis: usize, tilt: f32) -> Vec<f32> {
    let mut v = [0.0; DIM];
    v[axis % DIM] = 1.0;
    v[(axis + 1) % DIM] = tilt;
    let n = (1.0 + tilt * tilt).sqrt();
    v.iter().map(|x| x / n).collect()
}

fn point(conversation: &str, role: &str, axis: usize, tilt: f32) -> Point {
    let payload = json!({"conversation_id": conversation, "role": role, "content": format!("{conversation}/{axis}/{tilt}")});
    Point {
        id: MemoryId::random(),
        vector: vector(axis, tilt),
        lexical: SparseVector::default(),
        payload: payload.as_object().unwrap().clone(),
    }
}

fn open(dir: &std::path::Path) -> EdgeIndex {
    EdgeIndex::open(&dir.join("index"), &EdgeIndexOptions::new(DIM)).unwrap()
}

fn scoped(conversation: &str) -> Filter {
    Filter::all()
        .must(Condition::any_of(
            "conversation_id",
            [conversation, "global"],
        ))
        .must_not(Condition::equals("role", "summary"))
}

#[test]
fn nearest_first_with_vectors_and_payload() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    let near = point("a", "memory", 0, 0.1);
    let far = point("a", "memory", 0, 2.0);
    index.upsert(vec![far.clone(), near.clone()]).unwrap();
    let hits = index
        .query(&Query {
            vector: vector(0, 0.0).into(),
            filter: Filter::all(),
            limit: 10,
            with_vectors: true,
        })
        .unwrap();
    assert_eq!(
        hits.iter().map(|h| h.id).collect::<Vec<_>>(),
        vec![near.id, far.id]
    );
    assert!(hits[0].score > hits[1].score);
    assert_eq!(hits[0].payload["content"], near.payload["content"]);
    let v = hits[0].vector.as_ref().expect("vector requested");
    assert!(v
        .iter()
        .zip(&near.vector)
        .all(|(a, b)| (a - b).abs() < 1e-5));
}

#[test]
fn filters_by_conversation_global_and_role() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    let mine = point("a", "memory", 0, 0.3);
    let shared = point("global", "memory", 0, 0.2);
    let other = point("b", "memory", 0, 0.0);
    let summary = point("a", "summary", 0, 0.0);
    index
        .upsert(vec![mine.clone(), shared.clone(), other.clone(), summary])
        .unwrap();
    let hits = index
        .query(&Query {
            vector: vector(0, 0.0).into(),
            filter: scoped("a"),
            limit: 10,
            with_vectors: false,
        })
        .unwrap();
    let ids: Vec<_> = hits.iter().map(|h| h.id).collect();
    assert_eq!(ids, vec![shared.id, mine.id]);
    assert!(hits.iter().all(|h| h.vector.is_none()));
    assert_eq!(index.count(&scoped("b")).unwrap(), 2);
    assert_eq!(index.count(&Filter::all()).unwrap(), 4);
}

#[test]
fn survives_reopen_and_deletes_stick() {
    let dir = tempfile::tempdir().unwrap();
    let kept = point("a", "memory", 1, 0.0);
    let gone = point("a", "memory", 2, 0.0);
    {
        let index = open(dir.path());
        index.upsert(vec![kept.clone(), gone.clone()]).unwrap();
        index.delete(&[gone.id]).unwrap();
    }
    let index = open(dir.path());
    assert_eq!(index.count(&Filter::all()).unwrap(), 1);
    let got = index.retrieve(&[kept.id, gone.id], true).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, kept.id);
    assert_eq!(got[0].payload, kept.payload);

    // An upsert of an existing id replaces it, and the replacement persists too.
    let mut changed = kept.clone();
    changed.payload.insert("content".into(), json!("changed"));
    index.upsert(vec![changed]).unwrap();
    drop(index);
    let index = open(dir.path());
    let got = index.retrieve(&[kept.id], false).unwrap();
    assert_eq!(got[0].payload["content"], "changed");
}

#[test]
fn wrong_dimensions_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    let err =
        EdgeIndex::open(&dir.path().join("index"), &EdgeIndexOptions::new(DIM + 1)).unwrap_err();
    assert!(err.to_string().contains("8-dimensional"), "{err}");
    let index = open(dir.path());
    let mut bad = point("a", "memory", 0, 0.0);
    bad.vector.push(0.0);
    assert!(index
        .upsert(vec![bad])
        .unwrap_err()
        .to_string()
        .contains("9 dimensions"));
}

fn lexical_point(lexical: &LexicalEncoder, conversation: &str, text: &str, n: i64) -> Point {
    let payload =
        json!({"conversation_id": conversation, "role": "memory", "content": text, "n": n});
    Point {
        id: MemoryId::random(),
        vector: vector(0, 0.0),
        lexical: lexical.document(text),
        payload: payload.as_object().unwrap().clone(),
    }
}

fn lexical_query(
    index: &EdgeIndex,
    lexical: &LexicalEncoder,
    text: &str,
    filter: Filter,
) -> Vec<String> {
    index
        .query(&Query {
            vector: QueryVector::Lexical(lexical.query(text)),
            filter,
            limit: 10,
            with_vectors: false,
        })
        .unwrap()
        .into_iter()
        .map(|h| h.payload["content"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn lexical_search_weighs_rare_terms_by_idf() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    let lexical = LexicalEncoder::new(LexicalOptions::default()).unwrap();
    let texts = [
        "I went hiking with my dog",
        "my dog loves the beach",
        "my dog is called Miso",
        "we went to Lisbon in May",
        "nothing in common here",
    ];
    let points = texts
        .iter()
        .enumerate()
        .map(|(i, t)| lexical_point(&lexical, "a", t, i as i64))
        .collect();
    index.upsert(points).unwrap();
    // "dog" is in three memories, "hiking" in one: the rare term decides.
    let hits = lexical_query(&index, &lexical, "hiking dogs", Filter::all());
    assert_eq!(hits[0], texts[0]);
    assert_eq!(hits.len(), 3, "only memories sharing a term: {hits:?}");
    assert!(lexical_query(&index, &lexical, "unrelated words", Filter::all()).is_empty());
    assert!(lexical_query(&index, &lexical, "the and of", Filter::all()).is_empty());
}

#[test]
fn ranges_and_alternatives_filter_inside_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    let lexical = LexicalEncoder::new(LexicalOptions::default()).unwrap();
    let points = (0..6)
        .map(|n| lexical_point(&lexical, "a", &format!("dog number {n}"), n))
        .collect();
    index.upsert(points).unwrap();
    let at_least_4 = Filter::all().must(Condition::range(
        "n",
        Bounds {
            gte: Some(json!(4)),
            ..Bounds::default()
        },
    ));
    let mut hits = lexical_query(&index, &lexical, "dog", at_least_4);
    hits.sort();
    assert_eq!(hits, ["dog number 4", "dog number 5"]);
    let zero_or_five = Filter::all().must(Condition::Either(vec![
        Filter::all().must(Condition::equals("n", 0)),
        Filter::all().must(Condition::equals("n", 5)),
    ]));
    let mut hits = lexical_query(&index, &lexical, "dog", zero_or_five);
    hits.sort();
    assert_eq!(hits, ["dog number 0", "dog number 5"]);
}

#[test]
fn writes_survive_a_flush_and_reopen_and_a_failed_flush_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let kept = point("a", "memory", 1, 0.0);
    {
        let index = open(dir.path());
        index.upsert(vec![kept.clone()]).unwrap();
        index.flush().unwrap();
    }
    let index = open(dir.path());
    assert_eq!(index.ids().unwrap(), vec![kept.id]);

    // The folder vanishes under a live index (as a full disk would fail the writes): the
    // flush reports it, and closing the index does not bring the process down.
    index.upsert(vec![point("a", "memory", 2, 0.0)]).unwrap();
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let err = index.flush().unwrap_err().to_string();
    assert!(err.contains("cannot flush the index"), "{err}");
    drop(index);
}
