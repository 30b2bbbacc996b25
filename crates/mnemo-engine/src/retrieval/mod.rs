//! The read path: from a query to the few memories worth showing the LLM, in one place.
//!
//! Every front end (the CLI, REST, the chat proxy, the library) fills one [`SearchRequest`];
//! [`SearchRequest::resolve`] checks it and fills in the configured defaults, once.
//! `ReadPath` borrows what a search needs (embedder, lexical encoder, index, cross-encoder,
//! turn timeline, configuration) and runs the stages in order:
//!
//! 1. **Candidates.** Two scopes (the conversation and `global`), each searched twice inside
//!    the index with the same filter (scope, no summaries, the caller's metadata filter): by
//!    dense embedding and by BM25 over the lexical vectors.
//! 2. **Fusion** (`rank::fuse`): each retriever's scores are normalised over its own
//!    candidates and blended; a chat turn also borrows relevance from the turns next to it
//!    (`rank::smooth`), because an answer often sits one turn away from the words that match
//!    the question; and when the query names exactly one speaker, that speaker's turns are
//!    lifted (`rank::boost_speaker`).
//!    With query expansion on (`[retrieval] query_expansion`, off by default), the engine
//!    first asks the upstream LLM for words an answer would use (`answer_words`); the
//!    query followed by them goes through stages 1-2 as well, and the two rankings are
//!    merged by reciprocal rank (`rank::merge_by_rank`). Vocabulary expansion
//!    (`[retrieval] vocabulary_expansion`, on by default) adds the store's own words nearest
//!    the query's embedding ([`crate::index::vocabulary`]) to the lexical terms, each at a fraction
//!    of a query word's weight; no LLM, and no second search.
//! 3. **Rerank.** With a cross-encoder installed, the best candidates are rescored by it;
//!    its logits are squashed into 0..1 and normalised over the pool.
//! 4. **Recency.** `exp(-age_days / 30)` blended with weight `w` — only when the query asks
//!    about the present and names no date ([`cues::asks_about_now`]); questions about the
//!    past keep pure relevance.
//! 5. **MMR** (`rank::mmr`) picks the final `top_k` from the best candidates, trading
//!    relevance (rescaled to 0..1 over that pool) for diversity (cosine of the embeddings).
//!    A chat turn that says nothing of its own ("Thanks!", an assistant's "I don't have that
//!    information": [`crate::text::low_information`]) is picked only for places left after every candidate
//!    that says something: to MMR it looks diverse, not useless. A turn and the facts drawn
//!    from it take one place (`rank::facts_stand_for_turns`): the turn's key holds the facts'
//!    words, so they rank together. A turn's one fact stands for it; a turn that gave
//!    several keeps its place, and its facts come last.
//!
//! docs/retrieval.md has the measurements behind each stage.

pub(crate) mod answer_words;
pub mod cues;
pub(crate) mod rank;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use chrono::{DateTime, Utc};
use mnemo_core::{Config, ConversationId, MemoryId, Metadata, Role, MAX_TOP_K};
use mnemo_embed::{Embedder, Reranker};
use mnemo_index::{
    Condition, Filter, LexicalEncoder, PointPayload, Query, QueryVector, SparseVector, VectorIndex,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::EngineError;
use crate::index::timeline::Timeline;
use crate::index::vocabulary::Vocabulary;
use rank::{Candidate, Retriever};

/// One search, as every front end asks for it: what to look for, where, and how to rank.
/// Unset knobs take the configured defaults ([`SearchRequest::resolve`]).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// What to look for: at most [`mnemo_core::MAX_QUERY_BYTES`] (4 KiB).
    #[schema(max_length = 4096)]
    pub query: String,
    /// The conversation whose memories (and `global`'s) are searched; `default` when unset.
    #[serde(default = "ConversationId::default_conversation")]
    #[schema(value_type = String, pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")]
    pub conversation_id: ConversationId,
    /// How many memories to return, at most [`MAX_TOP_K`]; 0 returns none.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 100)]
    pub top_k: Option<usize>,
    /// Weight of recency, 0..1, for queries about the present.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1)]
    pub recency_weight: Option<f32>,
    /// MMR trade-off, 0..1: 1 is relevance only.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1)]
    pub mmr_lambda: Option<f32>,
    /// Drop memories whose relevance (0..1, before recency) is below this.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1)]
    pub score_threshold: Option<f32>,
    /// Return nothing when the best memory found is less similar to the query than this
    /// (cosine, 0..1, absolute); unset or 0: no floor. (The chat path injects memories
    /// under the configured `relevance_floor`.)
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1)]
    pub relevance_floor: Option<f32>,
    /// Drop memories whose cross-encoder score (the logistic of its logit, 0..1, absolute)
    /// is below this; no effect when no reranker runs.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1)]
    pub min_rerank_score: Option<f32>,
    /// A metadata filter (see `crate::index::filter`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<Value>,
    /// The time recency is measured from; now when unset (benchmarks replay the past).
    #[serde(skip)]
    pub now: Option<DateTime<Utc>>,
    /// Leave `global` out: set by a front end for a caller that may not read it, never by
    /// the request itself.
    #[serde(skip)]
    pub without_global: bool,
}

impl SearchRequest {
    /// A search for `query` among the memories of `conversation` (and `global`), with the
    /// configured defaults.
    pub fn new(query: impl Into<String>, conversation: ConversationId) -> Self {
        Self {
            query: query.into(),
            conversation_id: conversation,
            ..Self::default()
        }
    }

    /// The same search, returning `top_k` memories.
    pub fn top_k(mut self, top_k: usize) -> Self {
        self.top_k = Some(top_k);
        self
    }

    /// Checks every value the caller set; the message names the field and the allowed range.
    pub fn validate(&self) -> Result<(), EngineError> {
        self.check_knobs()?;
        if let Some(filter) = &self.filter {
            crate::index::filter::compile(filter)?;
        }
        Ok(())
    }

    /// The range checks of [`validate`](Self::validate), all but the filter's.
    fn check_knobs(&self) -> Result<(), EngineError> {
        let invalid = |m: String| Err(EngineError::InvalidInput(m));
        if self.query.len() > mnemo_core::MAX_QUERY_BYTES {
            return invalid(format!(
                "query is {} bytes; a query holds at most {} (ask a question, not a document)",
                self.query.len(),
                mnemo_core::MAX_QUERY_BYTES
            ));
        }
        if let Some(k) = self.top_k.filter(|&k| k > MAX_TOP_K) {
            return invalid(format!("top_k may be at most {MAX_TOP_K}, got {k}"));
        }
        for (name, value) in [
            ("recency_weight", self.recency_weight),
            ("mmr_lambda", self.mmr_lambda),
            ("score_threshold", self.score_threshold),
            ("relevance_floor", self.relevance_floor),
            ("min_rerank_score", self.min_rerank_score),
        ] {
            if let Some(v) = value.filter(|v| !(0.0..=1.0).contains(v)) {
                return invalid(format!("{name} must be between 0 and 1, got {v}"));
            }
        }
        Ok(())
    }

    /// Checks the request and decides every knob: the request's value, else the config's.
    pub fn resolve(&self, config: &Config) -> Result<ResolvedSearch, EngineError> {
        self.check_knobs()?;
        Ok(ResolvedSearch {
            top_k: self.top_k.unwrap_or(config.default_top_k),
            recency_weight: self.recency_weight.unwrap_or(config.recency_weight),
            mmr_lambda: self.mmr_lambda.unwrap_or(config.mmr_lambda),
            score_threshold: self.score_threshold.or(config.score_threshold),
            // A search asked for is ranked however weak its best match; the chat path sets
            // the configured floor (`relevance_floor`) for what it injects.
            relevance_floor: self.relevance_floor.unwrap_or(0.0),
            min_rerank_score: self.min_rerank_score.or(config.min_rerank_score),
            filter: match &self.filter {
                Some(filter) => crate::index::filter::compile(filter)?,
                None => Filter::all(),
            },
            now: self.now.unwrap_or_else(Utc::now),
        })
    }
}

/// A [`SearchRequest`] with every knob decided and checked.
#[derive(Debug, Clone)]
pub struct ResolvedSearch {
    /// Memories to return.
    pub top_k: usize,
    /// Weight of recency for queries about the present.
    pub recency_weight: f32,
    /// MMR trade-off.
    pub mmr_lambda: f32,
    /// Minimum relevance, if any.
    pub score_threshold: Option<f32>,
    /// The cosine the best memory found must reach for any to be returned (0: off).
    pub relevance_floor: f32,
    /// Minimum absolute cross-encoder score, if any.
    pub min_rerank_score: Option<f32>,
    /// The caller's metadata filter, compiled for the index.
    pub filter: Filter,
    /// The time recency is measured from.
    pub now: DateTime<Utc>,
}

/// What each stage thought of a result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema, schemars::JsonSchema)]
pub struct StageScores {
    /// Cosine similarity to the query, when the dense search found it.
    pub dense: Option<f32>,
    /// BM25 score, when the lexical search found it.
    pub lexical: Option<f32>,
    /// First-stage relevance, 0..1: fused retrievers plus neighbouring turns.
    pub fused: f32,
    /// Cross-encoder relevance, 0..1 over the pool, when a reranker ran.
    pub rerank: Option<f32>,
    /// The cross-encoder's own score, the logistic of its logit (0..1, not divided by the
    /// pool's best): what `min_rerank_score` compares.
    pub rerank_absolute: Option<f32>,
    /// `exp(-age_days / 30)`.
    pub recency: f32,
    /// Relevance blended with recency: what MMR ranked by.
    pub combined: f32,
    /// The turn says nothing that is not filler or in the turn it answers
    /// (`crate::text::low_information`); with `[retrieval] low_information_last` (the default) it comes
    /// after every result that says something.
    pub low_information: bool,
}

/// What a search found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Searched {
    /// The memories, best first.
    pub hits: Vec<SearchHit>,
    /// Memories found but withheld because even the best of them fell below the relevance
    /// floor: the query is about nothing stored (0 when any was returned).
    pub below_floor: usize,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema, schemars::JsonSchema)]
pub struct SearchHit {
    /// The memory's id.
    #[schema(value_type = String, format = Uuid)]
    #[schemars(with = "String")]
    pub id: MemoryId,
    /// Its conversation (the one searched, or `global`).
    #[schema(value_type = String)]
    #[schemars(with = "String")]
    pub conversation_id: ConversationId,
    /// What kind of memory it is: `memory` (a fact), `user`, `assistant` or `summary`.
    #[schema(value_type = String)]
    #[schemars(with = "String")]
    pub role: Role,
    /// Its text.
    pub content: String,
    /// When it was said or learned.
    pub created_at: DateTime<Utc>,
    /// Its free-form metadata.
    #[schema(value_type = Object)]
    pub metadata: Metadata,
    /// The memory's file (absolute from the engine; relative to the store in answers over
    /// the network).
    #[schema(value_type = String)]
    pub path: PathBuf,
    /// On a fact: the later fact that holds over it until a person resolves their conflict
    /// (front matter `conflicts_with`).
    #[schema(value_type = Option<String>, format = Uuid)]
    #[schemars(with = "Option<String>")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflicts_with: Option<MemoryId>,
    /// The final score (`scores.combined`).
    pub score: f32,
    /// Each stage's score.
    pub scores: StageScores,
}

impl SearchHit {
    /// A memory that no search ranked (a fact shown because a retrieved one names it), with
    /// no score.
    pub fn unranked(memory: mnemo_store::StoredMemory) -> Self {
        let record = memory.record;
        Self {
            id: record.id,
            conversation_id: record.conversation_id,
            role: record.role,
            content: record.content,
            created_at: record.created_at,
            metadata: record.metadata,
            path: memory.path,
            conflicts_with: record.conflicts_with,
            score: 0.0,
            scores: StageScores::default(),
        }
    }
}

/// Everything a search reads, borrowed from the engine for the length of one search.
pub(crate) struct ReadPath<'a> {
    pub config: &'a Config,
    pub embedder: &'a Embedder,
    pub lexical: &'a LexicalEncoder,
    pub index: &'a dyn VectorIndex,
    /// The cross-encoder, when one is loaded.
    pub reranker: Option<&'a Reranker>,
    /// Which turns are neighbours.
    pub timeline: &'a Timeline,
    /// The store's words, when vocabulary expansion is on.
    pub vocabulary: Option<&'a RwLock<Vocabulary>>,
    /// The store's root, which hits' paths are relative to.
    pub store_root: &'a Path,
}

impl ReadPath<'_> {
    /// The memories of the request's conversation and of `global` that best answer its
    /// query, best first. Summaries are not searched.
    ///
    /// With `expansion` (words an answer would use, from the LLM), the first stage also runs
    /// for the query followed by those words, and the two rankings are merged by reciprocal
    /// rank. The store's words nearest the query (vocabulary expansion) join the lexical
    /// terms of every search, at `vocabulary_expansion_weight`.
    ///
    /// When no memory found is as similar to the query as `relevance_floor` (the cosine of
    /// their embeddings, the dense retriever's own score), none is returned: the query is
    /// about nothing stored. Memories found only by their words or as a neighbouring turn
    /// have no cosine and do not lift the best.
    pub fn search(
        &self,
        request: &SearchRequest,
        settings: &ResolvedSearch,
        expansion: Option<&str>,
    ) -> Result<Searched, EngineError> {
        let query = request.query.as_str();
        if settings.top_k == 0 || query.trim().is_empty() {
            return Ok(Searched::default());
        }
        let dense = self.embedder.embed_one(query)?;
        let lexical = self.query_terms(query, settings);
        let related = self.related_terms(&lexical, &dense);
        let mut candidates = self.candidates(query, dense, lexical, &related, request, settings)?;
        if let Some(words) = expansion {
            let expanded = format!("{query}\n{words}");
            let dense = self.embedder.embed_one(&expanded)?;
            let lexical = self.query_terms(&expanded, settings);
            let more = self.candidates(&expanded, dense, lexical, &related, request, settings)?;
            candidates = rank::merge_by_rank(candidates, more, EXPANSION_RANK_OFFSET);
        }
        let best = candidates
            .iter()
            .filter_map(|c| c.scores.dense)
            .fold(0.0_f32, f32::max);
        if !candidates.is_empty() && best < settings.relevance_floor {
            return Ok(Searched {
                hits: Vec::new(),
                below_floor: candidates.len(),
            });
        }
        let tuning = &self.config.retrieval;
        self.rerank(query, &mut candidates)?;
        if let Some(threshold) = settings.score_threshold {
            candidates.retain(|c| c.relevance >= threshold);
        }
        if let (Some(threshold), Some(_)) = (settings.min_rerank_score, self.reranker) {
            // Past the reranked pool nothing was scored: those go too.
            candidates.retain(|c| c.scores.rerank_absolute.is_some_and(|s| s >= threshold));
        }
        let mut weight = settings.recency_weight;
        if tuning.query_aware_recency && !cues::asks_about_now(query) {
            weight = 0.0;
        }
        rank::blend_recency(&mut candidates, weight, settings.now);
        let judged = 2 * tuning.mmr_pool.max(settings.top_k);
        self.judge_information(&mut candidates, judged)?;
        // Facts of a turn that kept its place: they repeat it, so they come last.
        let repeats = if tuning.facts_stand_for_turns {
            rank::facts_stand_for_turns(&mut candidates)
        } else {
            Vec::new()
        };
        let (mut last, first): (Vec<_>, Vec<_>) = candidates
            .into_iter()
            .partition(|c| tuning.low_information_last && c.scores.low_information);
        last.extend(repeats);
        let pick = |candidates, k| rank::mmr(candidates, settings.mmr_lambda, k, tuning.mmr_pool);
        let mut chosen = pick(first, settings.top_k);
        if chosen.len() < settings.top_k {
            let rest = settings.top_k - chosen.len();
            chosen.extend(pick(last, rest));
        }
        Ok(Searched {
            hits: chosen.into_iter().map(|c| self.hit(c)).collect(),
            below_floor: 0,
        })
    }

    /// The lexical terms of `query`: its words, and its dates resolved as canonical tokens
    /// ([`crate::text::dates`]).
    fn query_terms(&self, query: &str, settings: &ResolvedSearch) -> SparseVector {
        if self.config.retrieval.lexical_date_tokens {
            let dates = crate::text::dates::date_tokens(query, settings.now.date_naive());
            self.lexical.query(&format!("{query}\n{dates}"))
        } else {
            self.lexical.query(query)
        }
    }

    /// Stages 1 and 2, best first: both retrievers in both scopes, fused, smoothed over
    /// neighbouring turns, and the speaker the query names lifted. The `related` terms of
    /// vocabulary expansion join the query's `lexical` terms at their configured weight.
    fn candidates(
        &self,
        query: &str,
        dense: Vec<f32>,
        mut lexical: SparseVector,
        related: &SparseVector,
        request: &SearchRequest,
        settings: &ResolvedSearch,
    ) -> Result<Vec<Candidate>, EngineError> {
        let tuning = &self.config.retrieval;
        lexical.add_missing_terms(related, tuning.vocabulary_expansion_weight);
        let per_query = (settings.top_k * 3).max(tuning.min_candidates);
        let mut results = Vec::new();
        let scopes = scope_filters(
            &request.conversation_id,
            !request.without_global,
            &settings.filter,
        );
        for filter in scopes {
            let mut run = |vector: QueryVector, retriever: Retriever| -> Result<(), EngineError> {
                let hits = self.index.query(&Query {
                    vector,
                    filter: filter.clone(),
                    limit: per_query,
                    with_vectors: true,
                })?;
                results.push((retriever, hits));
                Ok(())
            };
            if tuning.dense {
                run(QueryVector::Dense(dense.clone()), Retriever::Dense)?;
            }
            if tuning.lexical {
                run(QueryVector::Lexical(lexical.clone()), Retriever::Lexical)?;
            }
        }
        let mut candidates = rank::fuse(results, tuning.lexical_weight);
        rank::smooth(&mut candidates, tuning.neighbour_weight, |id| {
            self.timeline.neighbours(id)
        });
        rank::boost_speaker(&mut candidates, query, tuning.speaker_boost);
        Ok(candidates)
    }

    /// The lexical terms of the store's words closest to the query ([`crate::index::vocabulary`]),
    /// leaving out words the query's `lexical` terms have; none when vocabulary expansion is
    /// off or finds nothing.
    fn related_terms(&self, lexical: &SparseVector, dense: &[f32]) -> SparseVector {
        let n = self.config.retrieval.vocabulary_expansion;
        let Some(vocabulary) = self.vocabulary else {
            return SparseVector::default();
        };
        let vocabulary = vocabulary.read().unwrap_or_else(|p| p.into_inner());
        vocabulary.nearest_terms(dense, lexical, n, self.lexical)
    }

    /// Rescores the best candidates with the cross-encoder, when one is loaded; the rest
    /// keep their order below them.
    fn rerank(&self, query: &str, candidates: &mut Vec<Candidate>) -> Result<(), EngineError> {
        let Some(reranker) = self.reranker else {
            return Ok(());
        };
        let pool = self
            .config
            .retrieval
            .rerank_candidates
            .min(candidates.len());
        let rest = candidates.split_off(pool);
        let texts: Vec<&str> = candidates.iter().map(Candidate::content).collect();
        let logits = reranker.score(query, &texts)?;
        rank::apply_rerank(candidates, &logits);
        candidates.extend(rest.into_iter().map(|mut c| {
            c.relevance = 0.0;
            c
        }));
        Ok(())
    }

    /// Marks the turns among the best `judged` candidates that say nothing of their own
    /// ([`crate::text::low_information::says_something`]); the turns they answer are read from the index.
    fn judge_information(
        &self,
        candidates: &mut [Candidate],
        judged: usize,
    ) -> Result<(), EngineError> {
        rank::sort_by_combined(candidates);
        let judged = judged.min(candidates.len());
        let turns = &mut candidates[..judged];
        let answered: Vec<Option<MemoryId>> = turns
            .iter()
            .map(|c| {
                c.hit
                    .payload
                    .is_turn()
                    .then(|| self.timeline.neighbours(c.hit.id).previous)
                    .flatten()
            })
            .collect();
        let wanted: Vec<MemoryId> = answered.iter().flatten().copied().collect();
        let texts: HashMap<MemoryId, String> = self
            .index
            .retrieve(&wanted, false)?
            .into_iter()
            .map(|hit| (hit.id, hit.payload.content))
            .collect();
        for (candidate, answered) in turns.iter_mut().zip(&answered) {
            if !candidate.hit.payload.is_turn() {
                continue;
            }
            let before = answered.and_then(|id| texts.get(&id)).map(String::as_str);
            candidate.scores.low_information =
                !crate::text::low_information::says_something(candidate.content(), before);
        }
        Ok(())
    }

    fn hit(&self, candidate: Candidate) -> SearchHit {
        let payload = candidate.hit.payload;
        SearchHit {
            id: candidate.hit.id,
            path: self.store_root.join(&payload.path),
            conversation_id: payload.conversation_id,
            role: payload.role,
            content: payload.content,
            created_at: payload.created_at,
            metadata: payload.metadata,
            conflicts_with: payload.conflicts_with,
            score: candidate.scores.combined,
            scores: candidate.scores,
        }
    }
}

/// Reciprocal-rank offset when the rankings of a query with and without its expansion are
/// merged: small, so that what leads either ranking stays ahead.
const EXPANSION_RANK_OFFSET: f32 = 10.0;

/// The index filters for the two scopes of a search: the conversation, then `global` (when
/// `with_global`).
fn scope_filters(
    conversation: &ConversationId,
    with_global: bool,
    user_filter: &Filter,
) -> Vec<Filter> {
    let mut scopes = vec![conversation.as_str()];
    if with_global && !conversation.is_global() {
        scopes.push(ConversationId::GLOBAL);
    }
    scopes
        .into_iter()
        .map(|scope| {
            Filter::all()
                .must(Condition::equals(PointPayload::FIELD_CONVERSATION, scope))
                .must_not(Condition::equals(
                    PointPayload::FIELD_ROLE,
                    Role::Summary.as_str(),
                ))
                .and(user_filter.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv() -> ConversationId {
        ConversationId::new("c").unwrap()
    }

    #[test]
    fn a_request_is_defaulted_from_the_config_and_capped_once() {
        let config = Config::default();
        let resolved = SearchRequest::new("q", conv()).resolve(&config).unwrap();
        assert_eq!(resolved.top_k, config.default_top_k);
        assert_eq!(resolved.mmr_lambda, config.mmr_lambda);
        let asked = SearchRequest {
            recency_weight: Some(0.5),
            ..SearchRequest::new("q", conv()).top_k(MAX_TOP_K)
        };
        let resolved = asked.resolve(&config).unwrap();
        assert_eq!((resolved.top_k, resolved.recency_weight), (MAX_TOP_K, 0.5));
        let err = SearchRequest::new("q", conv())
            .top_k(MAX_TOP_K + 1)
            .resolve(&config)
            .unwrap_err();
        assert!(
            err.to_string().contains("top_k may be at most 100"),
            "{err}"
        );
    }

    #[test]
    fn a_query_has_a_documented_length_limit() {
        let config = Config::default();
        let longest = "é".repeat(mnemo_core::MAX_QUERY_BYTES / 2);
        assert!(SearchRequest::new(longest.clone(), conv())
            .validate()
            .is_ok());
        let err = SearchRequest::new(format!("{longest}x"), conv())
            .resolve(&config)
            .unwrap_err();
        assert!(err.is_invalid_input());
        assert!(
            err.to_string()
                .starts_with("query is 4097 bytes; a query holds at most 4096"),
            "{err}"
        );
    }

    #[test]
    fn a_request_deserialises_with_typed_ids_and_no_unknown_fields() {
        let request: SearchRequest =
            serde_json::from_value(serde_json::json!({"query": "q", "top_k": 3})).unwrap();
        assert_eq!(request.conversation_id.as_str(), "default");
        assert_eq!(request.top_k, Some(3));
        for bad in [
            serde_json::json!({"query": "q", "conversation_id": "../x"}),
            serde_json::json!({"query": "q", "topk": 3}),
            serde_json::json!({"query": "q", "top_k": -1}),
        ] {
            assert!(
                serde_json::from_value::<SearchRequest>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn global_is_left_out_only_when_the_front_end_says_so() {
        let all = Filter::all();
        assert_eq!(scope_filters(&conv(), true, &all).len(), 2);
        assert_eq!(scope_filters(&conv(), false, &all).len(), 1);
        let global = ConversationId::new(ConversationId::GLOBAL).unwrap();
        assert_eq!(scope_filters(&global, true, &all).len(), 1);
        // A request cannot set it: only a front end that checks access does.
        let asked = serde_json::json!({"query": "q", "without_global": false});
        assert!(serde_json::from_value::<SearchRequest>(asked).is_err());
    }

    #[test]
    fn out_of_range_knobs_are_named() {
        for (request, expected) in [
            (
                SearchRequest {
                    mmr_lambda: Some(1.5),
                    ..SearchRequest::new("q", conv())
                },
                "mmr_lambda must be between 0 and 1",
            ),
            (
                SearchRequest {
                    filter: Some(serde_json::json!([1])),
                    ..SearchRequest::new("q", conv())
                },
                "filter: ",
            ),
        ] {
            let err = request.validate().unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
    }
}
