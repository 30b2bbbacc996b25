//! The read path: from a query to the few memories worth showing the LLM.
//!
//! 1. **Candidates.** Two scopes (the conversation and `global`), each searched twice inside
//!    the index with the same filter (scope, no summaries, the caller's metadata filter): by
//!    dense embedding and by BM25 over the lexical vectors.
//! 2. **Fusion.** Each retriever's scores are normalised over its own candidates and blended
//!    ([`fuse`]); a chat turn also borrows relevance from the turns next to it ([`smooth`]),
//!    because an answer often sits one turn away from the words that match the question; and
//!    when the query names exactly one speaker, that speaker's turns are lifted
//!    ([`boost_speaker`]).
//! 3. **Rerank.** With a cross-encoder installed, the best candidates are rescored by it;
//!    its logits are squashed into 0..1 and normalised over the pool.
//! 4. **Recency.** `exp(-age_days / 30)` blended with weight `w` — only when the query asks
//!    about the present and names no date ([`asks_about_now`]); questions about the past keep
//!    pure relevance.
//! 5. **MMR** picks the final `top_k` from the best candidates, trading relevance (rescaled
//!    to 0..1 over that pool) for diversity (cosine of the embeddings).
//!
//! docs/retrieval.md has the measurements behind each stage.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use mnemo_core::{ConversationId, MemoryId, Metadata, RetrievalConfig, Role};
use mnemo_embed::cosine;
use mnemo_index::{Condition, Filter, Hit, Query, QueryVector};

use crate::keys::SPEAKER_FIELD;
use crate::timeline::Neighbours;
use serde::Serialize;
use std::path::PathBuf;

/// Per-call search settings; `None` takes the configured default.
#[derive(Debug, Clone, Default)]
pub struct SearchOptions {
    pub top_k: usize,
    pub recency_weight: Option<f32>,
    pub mmr_lambda: Option<f32>,
    /// Drop memories whose relevance (0..1, before recency) is below this.
    pub score_threshold: Option<f32>,
    /// A metadata filter (see [`crate::filter`]).
    pub filter: Option<serde_json::Value>,
    /// The time recency is measured from; the current time when unset.
    pub now: Option<DateTime<Utc>>,
}

impl SearchOptions {
    pub fn top_k(top_k: usize) -> Self {
        Self {
            top_k,
            ..Self::default()
        }
    }

    /// Refuses weights outside 0..1 rather than guessing what was meant.
    pub fn validate(&self) -> Result<(), crate::EngineError> {
        let unit = |name: &str, v: Option<f32>| match v {
            Some(v) if !(0.0..=1.0).contains(&v) => Err(crate::EngineError::InvalidInput(format!(
                "{name} must be between 0 and 1, got {v}"
            ))),
            _ => Ok(()),
        };
        unit("recency_weight", self.recency_weight)?;
        unit("mmr_lambda", self.mmr_lambda)?;
        unit("score_threshold", self.score_threshold)
    }
}

/// What each stage thought of a result.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StageScores {
    /// Cosine similarity to the query, when the dense search found it.
    pub dense: Option<f32>,
    /// BM25 score, when the lexical search found it.
    pub lexical: Option<f32>,
    /// First-stage relevance, 0..1: fused retrievers plus neighbouring turns.
    pub fused: f32,
    /// Cross-encoder relevance, 0..1 over the pool, when a reranker ran.
    pub rerank: Option<f32>,
    /// `exp(-age_days / 30)`.
    pub recency: f32,
    /// Relevance blended with recency: what MMR ranked by.
    pub combined: f32,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    pub id: MemoryId,
    pub conversation_id: String,
    pub role: String,
    pub content: String,
    pub created_at: Option<DateTime<Utc>>,
    pub metadata: Metadata,
    /// Absolute path of the memory's file.
    pub path: PathBuf,
    /// The final score (`scores.combined`).
    pub score: f32,
    pub scores: StageScores,
}

/// A memory found by either retriever, before ranking.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub hit: Hit,
    pub scores: StageScores,
    /// Relevance as ranked at the current stage.
    pub relevance: f32,
}

impl Candidate {
    fn text(&self, key: &str) -> &str {
        self.hit
            .payload
            .get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
    }

    pub fn content(&self) -> &str {
        self.text("content")
    }

    pub fn created_at(&self) -> Option<DateTime<Utc>> {
        DateTime::parse_from_rfc3339(self.text("created_at"))
            .ok()
            .map(|t| t.to_utc())
    }

    fn is_turn(&self) -> bool {
        matches!(self.text("role"), "user" | "assistant")
    }

    fn speaker(&self) -> Option<&str> {
        self.hit
            .payload
            .get("metadata")?
            .get(SPEAKER_FIELD)?
            .as_str()
    }
}

/// The index filters for the two scopes of a search.
pub(crate) fn scope_filters(conversation: &ConversationId, user_filter: &Filter) -> Vec<Filter> {
    let mut scopes = vec![conversation.as_str()];
    if !conversation.is_global() {
        scopes.push(ConversationId::GLOBAL);
    }
    scopes
        .into_iter()
        .map(|scope| {
            Filter::all()
                .must(Condition::equals("conversation_id", scope))
                .must_not(Condition::equals("role", Role::Summary.as_str()))
                .and(user_filter.clone())
        })
        .collect()
}

/// The two queries (dense, lexical) to run in each scope.
pub(crate) fn candidate_queries(
    dense: Vec<f32>,
    lexical: mnemo_index::SparseVector,
    filters: &[Filter],
    per_query: usize,
    config: &RetrievalConfig,
) -> Vec<(Query, Retriever)> {
    let mut queries = Vec::new();
    for filter in filters {
        if config.dense {
            queries.push((
                Query {
                    vector: QueryVector::Dense(dense.clone()),
                    filter: filter.clone(),
                    limit: per_query,
                    with_vectors: true,
                },
                Retriever::Dense,
            ));
        }
        if config.lexical {
            queries.push((
                Query {
                    vector: QueryVector::Lexical(lexical.clone()),
                    filter: filter.clone(),
                    limit: per_query,
                    with_vectors: true,
                },
                Retriever::Lexical,
            ));
        }
    }
    queries
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retriever {
    Dense,
    Lexical,
}

/// Merges the hits of every query into candidates and fuses their scores.
///
/// BM25 scores are divided by the best one (so 1 is "as good as lexical search gets for this
/// query"); cosine similarities, which crowd into a narrow band, are rescaled min-max over the
/// dense hits. Then `(1 − w)·dense + w·lexical`, where a memory one retriever did not return
/// counts 0 for it.
pub(crate) fn fuse(results: Vec<(Retriever, Vec<Hit>)>, lexical_weight: f32) -> Vec<Candidate> {
    let scores = |which: Retriever| {
        results
            .iter()
            .filter(move |(r, _)| *r == which)
            .flat_map(|(_, hits)| hits.iter().map(|h| h.score))
    };
    let best_lexical = scores(Retriever::Lexical).fold(0.0f32, f32::max);
    let best_dense = scores(Retriever::Dense).fold(f32::NEG_INFINITY, f32::max);
    let worst_dense = scores(Retriever::Dense).fold(f32::INFINITY, f32::min);
    let mut by_id: HashMap<MemoryId, Candidate> = HashMap::new();
    for (retriever, hits) in results {
        for hit in hits {
            let score = hit.score;
            let candidate = by_id.entry(hit.id).or_insert_with(|| Candidate {
                hit,
                scores: StageScores::default(),
                relevance: 0.0,
            });
            match retriever {
                Retriever::Dense => candidate.scores.dense = Some(score),
                Retriever::Lexical => candidate.scores.lexical = Some(score),
            }
        }
    }
    let lexical_norm = |score: Option<f32>| match score {
        Some(s) if best_lexical > 0.0 => (s / best_lexical).max(0.0),
        _ => 0.0,
    };
    let dense_norm = |score: Option<f32>| match score {
        // One hit, or all equally close: each is as good as dense search gets.
        Some(_) if best_dense <= worst_dense => 1.0,
        Some(s) => (s - worst_dense) / (best_dense - worst_dense),
        None => 0.0,
    };
    let mut candidates: Vec<Candidate> = by_id.into_values().collect();
    for c in &mut candidates {
        let dense = dense_norm(c.scores.dense);
        let lexical = lexical_norm(c.scores.lexical);
        c.scores.fused = (1.0 - lexical_weight) * dense + lexical_weight * lexical;
        c.relevance = c.scores.fused;
    }
    sort_by_relevance(&mut candidates);
    candidates
}

/// Turns borrow relevance from the turns just before and after them in the same
/// conversation: `fused += weight · max(neighbours' fused)`, then rescaled to 0..1.
/// `neighbours` gives, for a turn, the ids of the turns next to it.
pub(crate) fn smooth(
    candidates: &mut [Candidate],
    weight: f32,
    neighbours: impl Fn(MemoryId) -> Neighbours,
) {
    if weight <= 0.0 {
        return;
    }
    let fused: HashMap<MemoryId, f32> = candidates
        .iter()
        .map(|c| (c.hit.id, c.scores.fused))
        .collect();
    let boosts: Vec<f32> = candidates
        .iter()
        .map(|c| {
            if !c.is_turn() {
                return 0.0;
            }
            let n = neighbours(c.hit.id);
            [n.previous, n.next]
                .iter()
                .flatten()
                .filter_map(|id| fused.get(id))
                .fold(0.0f32, |a, &b| a.max(b))
        })
        .collect();
    for (c, boost) in candidates.iter_mut().zip(boosts) {
        c.scores.fused = (c.scores.fused + weight * boost) / (1.0 + weight);
        c.relevance = c.scores.fused;
    }
    sort_by_relevance(candidates);
}

/// When the query names exactly one of the candidates' speakers (a whole word, any case),
/// lifts that speaker's memories: `(fused + boost) / (1 + boost)`. A question about what
/// Caroline said is rarely answered by what Melanie said, though both share its words.
pub(crate) fn boost_speaker(candidates: &mut [Candidate], query: &str, boost: f32) {
    if boost <= 0.0 {
        return;
    }
    let words = words(query);
    let mut named: Vec<String> = candidates
        .iter()
        .filter_map(|c| c.speaker())
        .map(str::to_lowercase)
        .filter(|name| contains_phrase(&words, name))
        .collect();
    named.sort();
    named.dedup();
    let [speaker] = named.as_slice() else {
        return;
    };
    for c in candidates.iter_mut() {
        let lifted = c.speaker().is_some_and(|s| s.to_lowercase() == *speaker);
        let bonus = if lifted { boost } else { 0.0 };
        c.scores.fused = (c.scores.fused + bonus) / (1.0 + boost);
        c.relevance = c.scores.fused;
    }
    sort_by_relevance(candidates);
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// True when `phrase` (lower case, one or more words) occurs as whole words in `words`.
fn contains_phrase(words: &[String], phrase: &str) -> bool {
    let phrase: Vec<String> = self::words(phrase);
    !phrase.is_empty() && words.windows(phrase.len()).any(|w| w == phrase.as_slice())
}

/// Sets each candidate's rerank score from the cross-encoder's logits: a logistic squash,
/// then division by the best in the pool, so 1 is the best memory of this search.
pub(crate) fn apply_rerank(candidates: &mut [Candidate], logits: &[f32]) {
    let squashed: Vec<f32> = logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect();
    let best = squashed.iter().copied().fold(0.0f32, f32::max);
    for (c, s) in candidates.iter_mut().zip(squashed) {
        let score = if best > 0.0 { s / best } else { 0.0 };
        c.scores.rerank = Some(score);
        c.relevance = score;
    }
    sort_by_relevance(candidates);
}

/// `exp(-age_days / 30)`; memories from the future count as new.
pub(crate) fn recency(created_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> f32 {
    let Some(created_at) = created_at else {
        return 0.0;
    };
    let age_days = (now - created_at).num_seconds().max(0) as f32 / 86_400.0;
    (-age_days / 30.0).exp()
}

/// Words that mark a question about the present state of things ("what does she do now?"),
/// where the newest memory should win over an older one that matches as well.
const PRESENT_CUES: [&str; 13] = [
    "latest",
    "recent",
    "recently",
    "currently",
    "current",
    "now",
    "nowadays",
    "these days",
    "lately",
    "newest",
    "anymore",
    "at the moment",
    "so far",
];

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// True when the query asks about now rather than about the past: it has a present-tense cue
/// and names no date. Recency only applies then: blended into every query it buries the
/// answers to "when did ..." and "what did ... first" (on LoCoMo, recall falls from 0.50 to
/// 0.31 with dense retrieval).
pub fn asks_about_now(query: &str) -> bool {
    let words = words(query);
    PRESENT_CUES.iter().any(|cue| contains_phrase(&words, cue)) && !names_a_date(query)
}

/// A year (1900-2099) or a month name; "may" only capitalised and not first ("in May", not
/// "May I ...").
fn names_a_date(query: &str) -> bool {
    let raw: Vec<&str> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    raw.iter().enumerate().any(|(i, word)| {
        let lower = word.to_lowercase();
        let year = word.len() == 4
            && word.chars().all(|c| c.is_ascii_digit())
            && (word.starts_with("19") || word.starts_with("20"));
        let month =
            MONTHS.contains(&lower.as_str()) && (lower != "may" || (*word == "May" && i > 0));
        year || month
    })
}

/// Blends recency into relevance: `(1 − w)·relevance + w·recency`.
pub(crate) fn blend_recency(candidates: &mut [Candidate], weight: f32, now: DateTime<Utc>) {
    for c in candidates.iter_mut() {
        c.scores.recency = recency(c.created_at(), now);
        c.scores.combined = (1.0 - weight) * c.relevance + weight * c.scores.recency;
    }
    candidates.sort_by(|a, b| {
        (b.scores.combined.total_cmp(&a.scores.combined)).then(a.hit.id.cmp(&b.hit.id))
    });
}

/// Maximal marginal relevance over the best `pool` candidates: repeatedly takes the one
/// maximising `λ·relevance − (1 − λ)·max cosine to those already taken`, where relevance is
/// the combined score rescaled to 0..1 over the pool (raw scores crowd together and would let
/// the cosine term drown them). Candidates without a vector are unlike everything.
pub(crate) fn mmr(
    mut candidates: Vec<Candidate>,
    lambda: f32,
    k: usize,
    pool: usize,
) -> Vec<Candidate> {
    candidates.sort_by(|a, b| {
        (b.scores.combined.total_cmp(&a.scores.combined)).then(a.hit.id.cmp(&b.hit.id))
    });
    candidates.truncate(pool.max(k));
    let best = candidates.first().map_or(0.0, |c| c.scores.combined);
    let worst = candidates.last().map_or(0.0, |c| c.scores.combined);
    let relevance: HashMap<MemoryId, f32> = candidates
        .iter()
        .map(|c| {
            (
                c.hit.id,
                (c.scores.combined - worst) / (best - worst).max(1e-9),
            )
        })
        .collect();
    let mut pool = candidates;
    let mut chosen: Vec<Candidate> = Vec::with_capacity(k.min(pool.len()));
    while chosen.len() < k && !pool.is_empty() {
        let redundancy = |c: &Candidate| {
            let Some(v) = c.hit.vector.as_deref() else {
                return 0.0;
            };
            chosen
                .iter()
                .filter_map(|s| s.hit.vector.as_deref())
                .map(|w| cosine(v, w))
                .fold(0.0f32, f32::max)
        };
        let (best, _) = pool
            .iter()
            .enumerate()
            .map(|(i, c)| {
                (
                    i,
                    lambda * relevance[&c.hit.id] - (1.0 - lambda) * redundancy(c),
                )
            })
            .fold(
                (0, f32::NEG_INFINITY),
                |acc, x| if x.1 > acc.1 { x } else { acc },
            );
        chosen.push(pool.swap_remove(best));
    }
    chosen
}

/// Best first; ties in id order, so that equal stores give equal answers.
fn sort_by_relevance(candidates: &mut [Candidate]) {
    candidates.sort_by(|a, b| (b.relevance.total_cmp(&a.relevance)).then(a.hit.id.cmp(&b.hit.id)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hit(n: u128, score: f32, vector: Vec<f32>) -> Hit {
        Hit {
            id: MemoryId::from_uuid(uuid::Uuid::from_u128(n)),
            score,
            payload: json!({"role": "user", "content": format!("m{n}")})
                .as_object()
                .cloned()
                .unwrap(),
            vector: Some(vector),
        }
    }

    fn ids(candidates: &[Candidate]) -> Vec<u128> {
        candidates
            .iter()
            .map(|c| c.hit.id.as_uuid().as_u128())
            .collect()
    }

    #[test]
    fn fusion_normalises_each_retriever_and_blends() {
        let dense = vec![hit(1, 0.8, vec![1.0]), hit(2, 0.4, vec![1.0])];
        let lexical = vec![hit(2, 12.0, vec![1.0]), hit(3, 6.0, vec![1.0])];
        let fused = fuse(
            vec![(Retriever::Dense, dense), (Retriever::Lexical, lexical)],
            0.5,
        );
        // Dense min-max: 1 → 1, 2 → 0. Lexical over the best: 2 → 1, 3 → 0.5.
        // 2: 0.5·0 + 0.5·1 = 0.5; 1: 0.5·1 = 0.5; 3: 0.5·0.5 = 0.25.
        assert_eq!(ids(&fused[2..]), [3]);
        assert!((fused[0].scores.fused - 0.5).abs() < 1e-6);
        let two = fused
            .iter()
            .find(|c| c.hit.id.as_uuid().as_u128() == 2)
            .unwrap();
        assert_eq!(two.scores.dense, Some(0.4));
        assert_eq!(two.scores.lexical, Some(12.0));
        assert_eq!(fused[2].scores.dense, None);
    }

    #[test]
    fn neighbours_lift_a_turn_next_to_a_match() {
        let hits = vec![
            hit(1, 1.0, vec![1.0]),
            hit(2, 0.2, vec![1.0]),
            hit(3, 0.3, vec![1.0]),
        ];
        let mut c = fuse(vec![(Retriever::Dense, hits)], 0.0);
        smooth(&mut c, 0.5, |id| Neighbours {
            previous: (id.as_uuid().as_u128() == 2)
                .then(|| MemoryId::from_uuid(uuid::Uuid::from_u128(1))),
            next: None,
        });
        assert_eq!(ids(&c), [1, 2, 3], "2 sits next to the best match");
    }

    #[test]
    fn mmr_skips_near_duplicates() {
        let mut c = fuse(
            vec![(
                Retriever::Dense,
                vec![
                    hit(1, 1.0, vec![1.0, 0.0]),
                    hit(2, 0.99, vec![1.0, 0.01]),
                    hit(3, 0.9, vec![0.0, 1.0]),
                    hit(4, 0.1, vec![0.7, 0.7]),
                ],
            )],
            0.0,
        );
        blend_recency(&mut c, 0.0, Utc::now());
        assert_eq!(ids(&mmr(c.clone(), 0.7, 2, 30)), [1, 3]);
        assert_eq!(
            ids(&mmr(c, 1.0, 2, 30)),
            [1, 2],
            "lambda 1 is pure relevance"
        );
    }

    #[test]
    fn recency_decays_over_a_month() {
        let now = Utc::now();
        assert!((recency(Some(now), now) - 1.0).abs() < 1e-6);
        let month = now - chrono::Duration::days(30);
        assert!((recency(Some(month), now) - (-1.0f32).exp()).abs() < 1e-4);
        assert_eq!(recency(None, now), 0.0);
    }

    #[test]
    fn only_questions_about_now_are_recency_questions() {
        assert!(asks_about_now("Where does Anne work now?"));
        assert!(asks_about_now("what is my current address"));
        assert!(asks_about_now("What has she been reading lately?"));
        assert!(asks_about_now("What are you doing at the moment?"));
        assert!(!asks_about_now(
            "When did Caroline go to the support group?"
        ));
        assert!(!asks_about_now("What did Mel paint first?"));
        assert!(!asks_about_now("Who knows about snow?"));
        assert!(!asks_about_now(
            "What was she reading recently, in July 2023?"
        ));
        assert!(!asks_about_now("What did he do recently in 2022?"));
        assert!(
            asks_about_now("May I know what she does now?"),
            "a modal 'May'"
        );
        assert!(!asks_about_now("What did she do in May, recently?"));
    }

    fn with_speaker(mut hit: Hit, speaker: &str) -> Hit {
        hit.payload
            .insert("metadata".into(), json!({ "speaker": speaker }));
        hit
    }

    #[test]
    fn the_one_speaker_a_query_names_is_lifted() {
        let hits = vec![
            with_speaker(hit(1, 1.0, vec![1.0]), "Melanie"),
            with_speaker(hit(2, 0.98, vec![1.0]), "Caroline"),
            hit(3, 0.9, vec![1.0]),
            hit(4, 0.0, vec![1.0]),
        ];
        let fused = fuse(vec![(Retriever::Dense, hits)], 0.0);
        let mut c = fused.clone();
        boost_speaker(&mut c, "What did caroline paint?", 0.2);
        assert_eq!(ids(&c)[0], 2);
        let mut both = fused.clone();
        boost_speaker(&mut both, "Did Caroline and Melanie meet?", 0.2);
        assert_eq!(ids(&both), ids(&fused), "two names: no boost");
        let mut partial = fused;
        boost_speaker(&mut partial, "What about Carolines?", 0.2);
        assert_eq!(ids(&partial)[0], 1, "whole words only");
    }
}
