//! What every [`VectorIndex`] must do, whatever its backend: one suite, run by each backend's
//! test file through [`vector_index_conformance!`] with a function that opens (or reopens)
//! that backend's index for a folder.

use std::path::Path;

use mnemo_core::{ConversationId, MemoryId, MemoryRecord, Role};
use mnemo_index::{
    Bounds, Condition, Filter, LexicalEncoder, LexicalOptions, Point, PointPayload, Query,
    QueryVector, SparseVector, VectorIndex,
};
use serde_json::json;

/// Dimension of the vectors every conformance test writes.
pub const DIM: usize = 8;

/// Opens the index kept for `dir`: a fresh one the first time, the same one after.
pub type Open = fn(&Path) -> Box<dyn VectorIndex>;

/// Expands to one `#[test]` per conformance check, each run on the index `$open` opens.
/// With `$ready` (a `fn() -> Result<(), String>`), a backend that needs something from
/// outside the project (a server binary) says whether it can run here; when it cannot, each
/// test goes through `mnemo_test_support::require` (the test file's crate must have it): it
/// skips saying why, or fails under `CI=true`.
#[macro_export]
macro_rules! vector_index_conformance {
    ($open:expr) => {
        $crate::vector_index_conformance!(@all $open, {});
    };
    ($open:expr, $ready:expr) => {
        $crate::vector_index_conformance!(@all $open, {
            mnemo_test_support::skip_unless!(($ready)());
        });
    };
    (@all $open:expr, $before:block) => {
        $crate::vector_index_conformance!(@tests $open, $before;
            nearest_first_with_vectors_and_payload,
            filters_by_conversation_global_and_role,
            survives_reopen_and_deletes_stick,
            flushed_writes_survive_a_reopen,
            wrong_dimensions_are_clear_errors,
            lexical_search_weighs_rare_terms_by_idf,
            lexical_vectors_can_be_replaced_and_removed,
            ranges_and_alternatives_filter_inside_the_index,
            ids_and_retrieve_see_every_point,
        );
    };
    (@tests $open:expr, $before:block; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $before
                conformance::$name($open);
            }
        )*
    };
}

/// A unit vector pointing mostly along axis `axis`, tilted by `tilt` towards the next axis.
pub fn vector(axis: usize, tilt: f32) -> Vec<f32> {
    let mut v = [0.0; DIM];
    v[axis % DIM] = 1.0;
    v[(axis + 1) % DIM] = tilt;
    let n = (1.0 + tilt * tilt).sqrt();
    v.iter().map(|x| x / n).collect()
}

fn payload(conversation: &str, role: Role, content: &str) -> PointPayload {
    let record = MemoryRecord::new(ConversationId::new(conversation).unwrap(), role, content);
    PointPayload::of(&record, &format!("entries/{conversation}/x.md"))
}

/// A point of `conversation` with a dense vector only.
pub fn point(conversation: &str, role: Role, axis: usize, tilt: f32) -> Point {
    Point {
        id: MemoryId::random(),
        vector: vector(axis, tilt),
        lexical: SparseVector::default(),
        payload: payload(conversation, role, &format!("{conversation}/{axis}/{tilt}")),
    }
}

fn lexical_point(lexical: &LexicalEncoder, text: &str, n: i64) -> Point {
    let mut payload = payload("a", Role::Memory, text);
    payload.metadata.insert("n".into(), json!(n));
    Point {
        id: MemoryId::random(),
        vector: vector(0, 0.0),
        lexical: lexical.document(text),
        payload,
    }
}

fn encoder() -> LexicalEncoder {
    LexicalEncoder::new(LexicalOptions::default()).unwrap()
}

fn scoped(conversation: &str) -> Filter {
    Filter::all()
        .must(Condition::any_of(
            PointPayload::FIELD_CONVERSATION,
            [conversation, ConversationId::GLOBAL],
        ))
        .must_not(Condition::equals(PointPayload::FIELD_ROLE, "summary"))
}

fn dense(index: &dyn VectorIndex, filter: Filter, with_vectors: bool) -> Vec<mnemo_index::Hit> {
    index
        .query(&Query {
            vector: vector(0, 0.0).into(),
            filter,
            limit: 10,
            with_vectors,
        })
        .unwrap()
}

fn lexical_query(
    index: &dyn VectorIndex,
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
        .map(|h| h.payload.content)
        .collect()
}

pub fn nearest_first_with_vectors_and_payload(open: Open) {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    let near = point("a", Role::Memory, 0, 0.1);
    let far = point("a", Role::Memory, 0, 2.0);
    index.upsert(vec![far.clone(), near.clone()]).unwrap();
    let hits = dense(index.as_ref(), Filter::all(), true);
    assert_eq!(
        hits.iter().map(|h| h.id).collect::<Vec<_>>(),
        vec![near.id, far.id]
    );
    assert!(hits[0].score > hits[1].score);
    assert_eq!(hits[0].payload, near.payload);
    let v = hits[0].vector.as_ref().expect("vector requested");
    assert!(v
        .iter()
        .zip(&near.vector)
        .all(|(a, b)| (a - b).abs() < 1e-5));
}

pub fn filters_by_conversation_global_and_role(open: Open) {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    let mine = point("a", Role::Memory, 0, 0.3);
    let shared = point("global", Role::Memory, 0, 0.2);
    let other = point("b", Role::Memory, 0, 0.0);
    let summary = point("a", Role::Summary, 0, 0.0);
    index
        .upsert(vec![mine.clone(), shared.clone(), other.clone(), summary])
        .unwrap();
    let hits = dense(index.as_ref(), scoped("a"), false);
    let ids: Vec<_> = hits.iter().map(|h| h.id).collect();
    assert_eq!(ids, vec![shared.id, mine.id]);
    assert!(hits.iter().all(|h| h.vector.is_none()));
    assert_eq!(index.count(&scoped("b")).unwrap(), 2);
    assert_eq!(index.count(&Filter::all()).unwrap(), 4);
}

pub fn survives_reopen_and_deletes_stick(open: Open) {
    let dir = tempfile::tempdir().unwrap();
    let kept = point("a", Role::Memory, 1, 0.0);
    let gone = point("a", Role::Memory, 2, 0.0);
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
    changed.payload.content = "changed".into();
    index.upsert(vec![changed]).unwrap();
    drop(index);
    let index = open(dir.path());
    let got = index.retrieve(&[kept.id], false).unwrap();
    assert_eq!(got[0].payload.content, "changed");
    assert_eq!(
        index.count(&Filter::all()).unwrap(),
        1,
        "replaced, not added"
    );
}

pub fn flushed_writes_survive_a_reopen(open: Open) {
    let dir = tempfile::tempdir().unwrap();
    let kept = point("a", Role::Memory, 1, 0.0);
    {
        let index = open(dir.path());
        index.upsert(vec![kept.clone()]).unwrap();
        index.flush().unwrap();
    }
    let index = open(dir.path());
    assert_eq!(index.ids().unwrap(), vec![kept.id]);
}

pub fn wrong_dimensions_are_clear_errors(open: Open) {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    assert_eq!(index.dimension(), DIM);
    let mut bad = point("a", Role::Memory, 0, 0.0);
    bad.vector.push(0.0);
    let err = index.upsert(vec![bad]).unwrap_err().to_string();
    assert!(err.contains("9 dimensions"), "{err}");
    let err = index
        .query(&Query {
            vector: vec![1.0; DIM - 1].into(),
            filter: Filter::all(),
            limit: 1,
            with_vectors: false,
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("7 dimensions"), "{err}");
}

pub fn lexical_search_weighs_rare_terms_by_idf(open: Open) {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    let lexical = encoder();
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
        .map(|(i, t)| lexical_point(&lexical, t, i as i64))
        .collect();
    index.upsert(points).unwrap();
    // "dog" is in three memories, "hiking" in one: the rare term decides.
    let hits = lexical_query(index.as_ref(), &lexical, "hiking dogs", Filter::all());
    assert_eq!(hits[0], texts[0]);
    assert_eq!(hits.len(), 3, "only memories sharing a term: {hits:?}");
    assert!(lexical_query(index.as_ref(), &lexical, "unrelated words", Filter::all()).is_empty());
    assert!(lexical_query(index.as_ref(), &lexical, "the and of", Filter::all()).is_empty());
}

pub fn lexical_vectors_can_be_replaced_and_removed(open: Open) {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    let lexical = encoder();
    let cat = lexical_point(&lexical, "my cat sleeps", 0);
    let dog = lexical_point(&lexical, "my dog barks", 1);
    index.upsert(vec![cat.clone(), dog.clone()]).unwrap();
    index
        .set_lexical(vec![
            (cat.id, lexical.document("a parrot talks")),
            (dog.id, SparseVector::default()),
        ])
        .unwrap();
    let found = |text| lexical_query(index.as_ref(), &lexical, text, Filter::all());
    assert_eq!(found("parrot"), vec![cat.payload.content.clone()]);
    assert!(found("cat").is_empty(), "the old key is gone");
    assert!(found("dog").is_empty(), "an empty vector removes the key");
    let kept = index.retrieve(&[dog.id], true).unwrap();
    assert_eq!(kept[0].payload, dog.payload, "payload untouched");
    assert_eq!(
        kept[0].vector.as_deref(),
        Some(dog.vector.as_slice()),
        "dense untouched"
    );
}

pub fn ranges_and_alternatives_filter_inside_the_index(open: Open) {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    let lexical = encoder();
    let points = (0..6)
        .map(|n| lexical_point(&lexical, &format!("dog number {n}"), n))
        .collect();
    index.upsert(points).unwrap();
    let at_least_4 = Filter::all().must(Condition::range(
        "metadata.n",
        Bounds {
            gte: Some(json!(4)),
            ..Bounds::default()
        },
    ));
    let mut hits = lexical_query(index.as_ref(), &lexical, "dog", at_least_4);
    hits.sort();
    assert_eq!(hits, ["dog number 4", "dog number 5"]);
    let zero_or_five = Filter::all().must(Condition::Either(vec![
        Filter::all().must(Condition::equals("metadata.n", 0)),
        Filter::all().must(Condition::equals("metadata.n", 5)),
    ]));
    let mut hits = lexical_query(index.as_ref(), &lexical, "dog", zero_or_five);
    hits.sort();
    assert_eq!(hits, ["dog number 0", "dog number 5"]);
}

pub fn ids_and_retrieve_see_every_point(open: Open) {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    let points: Vec<Point> = (0..1500)
        .map(|i| point("a", Role::User, i % DIM, (i % 7) as f32 / 10.0))
        .collect();
    index.upsert(points.clone()).unwrap();
    let mut ids = index.ids().unwrap();
    ids.sort();
    let mut expected: Vec<MemoryId> = points.iter().map(|p| p.id).collect();
    expected.sort();
    assert_eq!(ids, expected, "more than one page of ids");
    let wanted = [points[3].id, points[1400].id, MemoryId::random()];
    let mut got: Vec<MemoryId> = index
        .retrieve(&wanted, false)
        .unwrap()
        .into_iter()
        .map(|h| h.id)
        .collect();
    got.sort();
    let mut known = vec![points[3].id, points[1400].id];
    known.sort();
    assert_eq!(got, known, "unknown ids are skipped");
}
