//! The ranking stages of the read path, as functions of the candidates: fusion, neighbour
//! smoothing, the speaker boost, the cross-encoder's scores, recency and MMR. Each takes the
//! candidates of one search and leaves them best first.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use mnemo_core::{MemoryId, Role};
use mnemo_embed::cosine;
use mnemo_index::Hit;

use super::cues::{contains_phrase, words};
use super::StageScores;
use crate::index::keys::SPEAKER_FIELD;
use crate::index::timeline::Neighbours;

/// A memory found by either retriever, before ranking.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    /// What the index returned.
    pub hit: Hit,
    /// Each stage's score so far.
    pub scores: StageScores,
    /// Relevance as ranked at the current stage.
    pub relevance: f32,
}

impl Candidate {
    /// The memory's text.
    pub fn content(&self) -> &str {
        &self.hit.payload.content
    }

    fn is_turn(&self) -> bool {
        self.hit.payload.is_turn()
    }

    fn speaker(&self) -> Option<&str> {
        self.hit.payload.metadata_str(SPEAKER_FIELD)
    }
}

/// Which first-stage search found a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retriever {
    /// Cosine similarity of the embeddings.
    Dense,
    /// BM25 over the lexical keys.
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

/// Merges two rankings of candidates (each best first) by reciprocal rank:
/// `1/(offset + rank)` summed over the rankings a memory is in, then divided by the best sum
/// so that relevance stays in 0..1. Ties keep the first ranking's order: the second adds
/// words to the query, and should not decide between memories the query alone ranked.
pub(crate) fn merge_by_rank(
    first: Vec<Candidate>,
    second: Vec<Candidate>,
    offset: f32,
) -> Vec<Candidate> {
    // id → (candidate, summed score, place in the first ranking)
    let mut merged: HashMap<MemoryId, (Candidate, f32, usize)> = HashMap::new();
    for (ranking, from_first) in [(first, true), (second, false)] {
        for (rank, c) in ranking.into_iter().enumerate() {
            let score = 1.0 / (offset + rank as f32 + 1.0);
            let place = if from_first { rank } else { usize::MAX };
            merged
                .entry(c.hit.id)
                .and_modify(|(_, s, _)| *s += score)
                .or_insert((c, score, place));
        }
    }
    let best = merged.values().map(|(_, s, _)| *s).fold(0.0f32, f32::max);
    let mut ranked: Vec<(Candidate, usize)> = merged
        .into_values()
        .map(|(mut c, s, place)| {
            c.scores.fused = if best > 0.0 { s / best } else { 0.0 };
            c.relevance = c.scores.fused;
            (c, place)
        })
        .collect();
    ranked.sort_by(|(a, a_place), (b, b_place)| {
        b.relevance
            .total_cmp(&a.relevance)
            .then(a_place.cmp(b_place))
            .then(a.hit.id.cmp(&b.hit.id))
    });
    ranked.into_iter().map(|(c, _)| c).collect()
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

/// Sets each candidate's rerank score from the cross-encoder's logits: a logistic squash,
/// then division by the best in the pool, so 1 is the best memory of this search.
pub(crate) fn apply_rerank(candidates: &mut [Candidate], logits: &[f32]) {
    let squashed: Vec<f32> = logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect();
    let best = squashed.iter().copied().fold(0.0f32, f32::max);
    for (c, s) in candidates.iter_mut().zip(squashed) {
        let score = if best > 0.0 { s / best } else { 0.0 };
        c.scores.rerank = Some(score);
        c.scores.rerank_absolute = Some(s);
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

/// Blends recency into relevance: `(1 − w)·relevance + w·recency`.
pub(crate) fn blend_recency(candidates: &mut [Candidate], weight: f32, now: DateTime<Utc>) {
    for c in candidates.iter_mut() {
        c.scores.recency = recency(Some(c.hit.payload.created_at), now);
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
    sort_by_combined(&mut candidates);
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
    // Each candidate's highest cosine to anything chosen so far, updated with the latest
    // choice only: O(k · pool) in all, not O(k² · pool).
    let mut redundancy = vec![0.0f32; pool.len()];
    let mut chosen: Vec<Candidate> = Vec::with_capacity(k.min(pool.len()));
    while chosen.len() < k && !pool.is_empty() {
        let (best, _) = pool
            .iter()
            .zip(&redundancy)
            .enumerate()
            .map(|(i, (c, r))| (i, lambda * relevance[&c.hit.id] - (1.0 - lambda) * r))
            .fold(
                (0, f32::NEG_INFINITY),
                |acc, x| if x.1 > acc.1 { x } else { acc },
            );
        redundancy.swap_remove(best);
        let taken = pool.swap_remove(best);
        if let Some(w) = taken.hit.vector.as_deref() {
            for (c, r) in pool.iter().zip(redundancy.iter_mut()) {
                if let Some(v) = c.hit.vector.as_deref() {
                    *r = r.max(cosine(v, w));
                }
            }
        }
        chosen.push(taken);
    }
    chosen
}

/// One place per turn: a turn and the facts drawn from it (their `source_id`) say the same
/// thing, and a turn's key holds its facts' words, so they rank together and would take
/// several of the few places a prompt has for one exchange. When one fact of a candidate
/// turn is a candidate, the fact takes the turn's place: it is what the write path kept, and
/// it stays current through corrections. It keeps the better of its own and the turn's
/// score and, for MMR, the turn's embedding. When several are, none of them says all the
/// turn says ("I sold the van and bought a cargo bike" gives one fact for
/// each half), so the turn keeps its place and its facts are returned, to fill only places
/// left after every other candidate. Facts whose turn is not a candidate are left as they
/// are. `candidates` must be best first; they stay so.
pub(crate) fn facts_stand_for_turns(candidates: &mut Vec<Candidate>) -> Vec<Candidate> {
    let turns: HashMap<MemoryId, usize> = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.is_turn())
        .map(|(i, c)| (c.hit.id, i))
        .collect();
    let mut facts_of: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, fact) in candidates.iter().enumerate() {
        let turn = match fact.hit.payload.role {
            Role::Memory => fact.hit.payload.source_id.and_then(|id| turns.get(&id)),
            _ => None,
        };
        if let Some(&turn) = turn {
            facts_of.entry(turn).or_default().push(i);
        }
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Place {
        Own,
        Left,
        Last,
    }
    let mut places = vec![Place::Own; candidates.len()];
    for (turn, facts) in facts_of {
        if let [fact] = facts[..] {
            places[turn] = Place::Left;
            let (combined, relevance) =
                (candidates[turn].scores.combined, candidates[turn].relevance);
            // MMR weighs what the whole exchange says against the rest: facts are short and
            // alike ("Caroline is ..."), and by their own embeddings look redundant with
            // facts of other exchanges (on LoCoMo: R_all@10 0.799 against 0.808).
            if let Some(vector) = candidates[turn].hit.vector.take() {
                candidates[fact].hit.vector = Some(vector);
            }
            let fact = &mut candidates[fact];
            fact.scores.combined = fact.scores.combined.max(combined);
            fact.relevance = fact.relevance.max(relevance);
        } else {
            for fact in facts {
                places[fact] = Place::Last;
            }
        }
    }
    let (last, kept): (Vec<_>, Vec<_>) = candidates
        .drain(..)
        .zip(places)
        .filter(|(_, place)| *place != Place::Left)
        .partition(|(_, place)| *place == Place::Last);
    *candidates = kept.into_iter().map(|(c, _)| c).collect();
    sort_by_combined(candidates);
    last.into_iter().map(|(c, _)| c).collect()
}

/// Best combined score first; ties in id order.
pub(crate) fn sort_by_combined(candidates: &mut [Candidate]) {
    candidates.sort_by(|a, b| {
        (b.scores.combined.total_cmp(&a.scores.combined)).then(a.hit.id.cmp(&b.hit.id))
    });
}

/// Best first; ties in id order, so that equal stores give equal answers.
fn sort_by_relevance(candidates: &mut [Candidate]) {
    candidates.sort_by(|a, b| (b.relevance.total_cmp(&a.relevance)).then(a.hit.id.cmp(&b.hit.id)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemo_core::{ConversationId, MemoryRecord};
    use mnemo_index::PointPayload;

    fn hit(n: u128, score: f32, vector: Vec<f32>) -> Hit {
        let record = MemoryRecord::new(
            ConversationId::new("c").unwrap(),
            Role::User,
            format!("m{n}"),
        );
        Hit {
            id: MemoryId::from_uuid(uuid::Uuid::from_u128(n)),
            score,
            payload: PointPayload::of(&record, "p"),
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
    fn a_merge_by_rank_keeps_the_first_rankings_order_on_ties() {
        let ranking = |order: &[u128]| {
            let hits = order.iter().map(|&n| hit(n, 1.0, vec![1.0])).collect();
            let mut c = fuse(vec![(Retriever::Dense, hits)], 0.0);
            // `fuse` sorts ties by id: keep the order given.
            c.sort_by_key(|c| {
                order
                    .iter()
                    .position(|&n| n == c.hit.id.as_uuid().as_u128())
            });
            c
        };
        // 9 and 1 swap places: equal sums, and the query alone put 9 first.
        let merged = merge_by_rank(ranking(&[9, 1, 5]), ranking(&[1, 9, 7]), 10.0);
        assert_eq!(ids(&merged), [9, 1, 5, 7]);
        assert_eq!(merged[0].scores.fused, 1.0);
        assert_eq!(merged[1].scores.fused, 1.0);
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
    fn a_turn_gives_its_place_to_its_facts() {
        let candidate = |hit: Hit, combined: f32| Candidate {
            hit,
            scores: StageScores {
                combined,
                ..StageScores::default()
            },
            relevance: combined,
        };
        let fact_of = |n: u128, turn: &Hit| {
            let mut fact = hit(n, 0.0, vec![1.0]);
            fact.payload.role = Role::Memory;
            fact.payload.source_id = Some(turn.id);
            fact
        };
        let turn = hit(1, 0.0, vec![0.5]);
        let lone_turn = hit(2, 0.0, vec![1.0]);
        let mut unrelated_fact = hit(3, 0.0, vec![1.0]);
        unrelated_fact.payload.role = Role::Memory;
        let told_twice = hit(6, 0.0, vec![1.0]);
        let mut candidates = vec![
            candidate(turn.clone(), 0.9),
            candidate(lone_turn, 0.8),
            candidate(unrelated_fact, 0.7),
            candidate(told_twice.clone(), 0.65),
            candidate(fact_of(4, &turn), 0.6),
            candidate(fact_of(7, &told_twice), 0.55),
            candidate(fact_of(8, &told_twice), 0.5),
        ];
        let later = facts_stand_for_turns(&mut candidates);
        // The turn's only fact ranks where the turn did; a turn with two facts keeps its
        // place, and its facts come after the rest.
        assert_eq!(ids(&candidates), [4, 2, 3, 6]);
        assert_eq!(candidates[0].scores.combined, 0.9);
        assert_eq!(
            candidates[0].hit.vector,
            Some(vec![0.5]),
            "the turn's, for MMR"
        );
        assert_eq!(ids(&later), [7, 8]);
    }

    #[test]
    fn recency_decays_over_a_month() {
        let now = Utc::now();
        assert!((recency(Some(now), now) - 1.0).abs() < 1e-6);
        let month = now - chrono::Duration::days(30);
        assert!((recency(Some(month), now) - (-1.0f32).exp()).abs() < 1e-4);
        assert_eq!(recency(None, now), 0.0);
    }

    fn with_speaker(mut hit: Hit, speaker: &str) -> Hit {
        hit.payload
            .metadata
            .insert(SPEAKER_FIELD.into(), speaker.into());
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
