//! The store's vocabulary, embedded word by word: the words a search adds to a query that
//! names a kind of thing ("books", "music") so that it also finds the turns that name an
//! instance of it ("Dune", "Bach and Mozart") in words the question does not use.
//!
//! Every word the memories use, lower-case as written (so names, which are capitalised, are
//! left out), that is not a stop word, is embedded alone with the store's embedding model; it
//! is a candidate once [`MIN_MEMORIES`] memories use it, and until more than [`MAX_SHARE`] of
//! them do. A search takes the words closest to the query's own embedding (computed for
//! dense search anyway, so this costs one product with the vocabulary's matrix) and adds
//! them to the query's lexical terms, each at a fraction of a query word's weight
//! ([`crate::retrieval`]). Only the store's own words are candidates: a word no memory uses
//! would match nothing. A memory indexed again (edited) counts again: the counts steer, they
//! need not be exact.
//!
//! The vocabulary grows as memories are indexed. When the engine opens, [`BackgroundBuild`]
//! reads every memory's text from the index on a thread of its own and merges what it built
//! with what was indexed meanwhile; searches until then expand with what the vocabulary holds
//! so far. Embedding is what a build costs (about 1,000 new words a second on 2 cores), so
//! the vectors are kept between runs in `vocabulary.bin` ([`crate::index::vocabulary_file`]) and a
//! build embeds only words the last one did not write; counting the memories' words again
//! is quick. Counts are never decreased while the engine runs: a word whose memories were all
//! deleted stays a candidate and simply matches nothing, until the next start.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;

use mnemo_core::MemoryId;
use mnemo_embed::Embedder;
use mnemo_index::{LexicalEncoder, SparseVector, VectorIndex};
use tracing::{info, warn};

use crate::error::EngineError;
use crate::index::vocabulary_file::{StoredWords, VocabularyFile};
pub use crate::index::word_rules::MAX_WORDS;
use crate::index::word_rules::{candidate_words, dot};

/// Memories whose texts are read from the index at a time, to build the vocabulary.
const READ_BATCH: usize = 128;

/// A word becomes a candidate once this many memories use it: a word said once is as often
/// a typo as a topic.
pub const MIN_MEMORIES: u32 = 2;

/// A word more than this share of memories use says nothing about any of them ("user" in
/// facts, "love" in chat): it is no candidate.
pub const MAX_SHARE: f32 = 0.1;

/// The store's words with their embeddings.
#[derive(Debug, Default)]
pub struct Vocabulary {
    words: Vec<String>,
    /// How many memories used each word (as they were indexed).
    memories: Vec<u32>,
    /// Each word's unit vector, one after another.
    vectors: Vec<f32>,
    position: HashMap<String, usize>,
    dimension: usize,
    /// Memories whose words were counted.
    texts: u32,
}

impl Vocabulary {
    /// Words the vocabulary holds.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Counts the words of `texts` (each text one memory) and takes in the new ones, with
    /// their vectors from `stored` or else embedded. Returns how many were embedded.
    pub fn add<S: AsRef<str>>(
        &mut self,
        texts: &[S],
        lexical: &LexicalEncoder,
        embedder: &Embedder,
        stored: &StoredWords,
    ) -> Result<usize, EngineError> {
        let mut words = Vec::new();
        let mut to_embed = Vec::new();
        for word in self.unknown_words(texts, lexical) {
            match stored.get(&word) {
                Some(vector) => words.push((word, vector.to_vec())),
                None => to_embed.push(word),
            }
        }
        let vectors = embedder.embed(&to_embed)?;
        let embedded = to_embed.len();
        words.extend(to_embed.into_iter().zip(vectors));
        self.count(texts, words);
        Ok(embedded)
    }

    /// Each word with its vector, in the order they were taken in.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &[f32])> {
        self.words
            .iter()
            .map(String::as_str)
            .zip(self.vectors.chunks_exact(self.dimension.max(1)))
    }

    /// The distinct words of `texts` that the vocabulary would take and does not hold yet:
    /// what to embed before [`count`](Self::count), without holding the vocabulary's lock.
    pub fn unknown_words<S: AsRef<str>>(
        &self,
        texts: &[S],
        lexical: &LexicalEncoder,
    ) -> Vec<String> {
        let mut unknown: Vec<String> = texts
            .iter()
            .flat_map(|text| candidate_words(text.as_ref()))
            .filter(|word| !self.position.contains_key(word))
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        unknown.retain(|word| !lexical.query(word).is_empty());
        unknown.truncate(MAX_WORDS.saturating_sub(self.words.len()));
        unknown
    }

    /// Counts the words of `texts` (each text one memory); a word not held yet enters with
    /// its vector from `embedded`, or not at all.
    pub fn count<S: AsRef<str>>(&mut self, texts: &[S], embedded: Vec<(String, Vec<f32>)>) {
        self.texts = self.texts.saturating_add(texts.len() as u32);
        let mut embedded: HashMap<String, Vec<f32>> = embedded.into_iter().collect();
        for text in texts {
            for word in candidate_words(text.as_ref()) {
                if let Some(&at) = self.position.get(&word) {
                    self.memories[at] = self.memories[at].saturating_add(1);
                } else if let Some(vector) = embedded.remove(&word) {
                    self.push(word, &vector, 1);
                }
            }
        }
    }

    /// The lexical terms of the `n` candidate words closest to `query_vector` (a unit vector
    /// of the same model), leaving out words whose stem the query's terms already hold.
    pub fn nearest_terms(
        &self,
        query_vector: &[f32],
        query_terms: &SparseVector,
        n: usize,
        lexical: &LexicalEncoder,
    ) -> SparseVector {
        let mut terms = SparseVector::default();
        if n == 0 || self.dimension != query_vector.len() {
            return terms;
        }
        let most = (self.texts as f32 * MAX_SHARE) as u32;
        let mut scored: Vec<(f32, usize)> = self
            .vectors
            .chunks_exact(self.dimension)
            .zip(&self.memories)
            .enumerate()
            .filter(|(_, (_, &memories))| (MIN_MEMORIES..=most).contains(&memories))
            .map(|(at, (vector, _))| (dot(vector, query_vector), at))
            .collect();
        scored.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
        let mut taken = 0;
        for (_, at) in scored {
            if taken == n {
                break;
            }
            let word = lexical.query(&self.words[at]);
            if !word.indices.iter().any(|t| query_terms.indices.contains(t)) {
                // A query term weighs 1 however often it occurs: the union is the words' query.
                terms.add_missing_terms(&word, 1.0);
                taken += 1;
            }
        }
        terms
    }

    /// Adds what `newer` holds: the words of memories indexed while `self` was being built.
    fn absorb(&mut self, newer: Vocabulary) {
        self.texts = self.texts.saturating_add(newer.texts);
        let vectors = newer.vectors.chunks_exact(newer.dimension.max(1));
        for ((word, count), vector) in newer.words.into_iter().zip(newer.memories).zip(vectors) {
            if let Some(&at) = self.position.get(&word) {
                self.memories[at] = self.memories[at].saturating_add(count);
            } else {
                self.push(word, vector, count);
            }
        }
    }

    /// Takes in a word it does not hold, unless it is full ([`MAX_WORDS`]).
    fn push(&mut self, word: String, vector: &[f32], count: u32) {
        if self.words.len() >= MAX_WORDS {
            return;
        }
        self.dimension = vector.len();
        self.vectors.extend_from_slice(vector);
        self.memories.push(count);
        self.position.insert(word.clone(), self.words.len());
        self.words.push(word);
    }
}

/// What building the vocabulary at opening did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildReport {
    /// Words of the memories the index held at opening that the vocabulary took.
    pub words: usize,
    /// Of those, words embedded because `vocabulary.bin` did not hold them.
    pub embedded: usize,
    /// Of those, words whose vectors `vocabulary.bin` held.
    pub from_file: usize,
}

/// The vocabulary of what an index holds, built on a thread of its own and merged into the
/// engine's. Dropping it stops the build between batches and waits for the thread, so that a
/// closed engine leaves nothing running.
pub struct BackgroundBuild {
    cancel: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    report: Arc<std::sync::OnceLock<BuildReport>>,
}

impl BackgroundBuild {
    /// Starts building from the memories `ids` names (what `index` held when the engine
    /// opened: `live` counts what is indexed after, so nothing is counted twice) into `live`,
    /// reusing the vectors `file` holds and writing it anew when the build embedded words.
    pub fn spawn(
        ids: Vec<MemoryId>,
        index: Arc<dyn VectorIndex>,
        embedder: Arc<Embedder>,
        lexical: LexicalEncoder,
        live: Arc<RwLock<Vocabulary>>,
        file: VocabularyFile,
    ) -> std::io::Result<Self> {
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&cancel);
        let report = Arc::new(std::sync::OnceLock::new());
        let reported = Arc::clone(&report);
        let thread = std::thread::Builder::new()
            .name("mnemo-vocabulary".into())
            .spawn(move || {
                let done = build_into(
                    &ids,
                    index.as_ref(),
                    &embedder,
                    &lexical,
                    &live,
                    &file,
                    &stop,
                );
                if let Some(report) = done {
                    let _ = reported.set(report);
                }
            })?;
        Ok(Self {
            cancel,
            thread: Some(thread),
            report,
        })
    }

    /// Whether the build is over (done, failed or cancelled).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// What the build did, once it is done; `None` before, or when it failed or was stopped.
    pub fn report(&self) -> Option<BuildReport> {
        self.report.get().copied()
    }
}

impl Drop for BackgroundBuild {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Builds the vocabulary of the memories `ids` names, merges it into `live` and keeps its
/// vectors in `file`; `None` when cancelled or failed (said in the log).
fn build_into(
    ids: &[MemoryId],
    index: &dyn VectorIndex,
    embedder: &Embedder,
    lexical: &LexicalEncoder,
    live: &RwLock<Vocabulary>,
    file: &VocabularyFile,
    cancel: &AtomicBool,
) -> Option<BuildReport> {
    let started = std::time::Instant::now();
    let stored = file.read().unwrap_or_else(|e| {
        warn!(
            file = %file.path().display(),
            "vocabulary vectors not reused ({e}); embedding every word again"
        );
        StoredWords::default()
    });
    let (mut built, embedded) = match build(ids, index, embedder, lexical, &stored, cancel) {
        Ok(Some(built)) => built,
        Ok(None) => return None,
        Err(e) => {
            warn!("vocabulary expansion has only new memories' words: {e}");
            return None;
        }
    };
    let words = built.len();
    let report = BuildReport {
        words,
        embedded,
        from_file: words.saturating_sub(embedded),
    };
    // Encoded before the live vocabulary is locked, written after.
    let bytes =
        (embedded > 0 || report.from_file != stored.len()).then(|| file.encode(built.entries()));
    {
        let mut live = live.write().unwrap_or_else(|p| p.into_inner());
        built.absorb(std::mem::take(&mut *live));
        *live = built;
    }
    if let Some(Err(e)) = bytes.map(|bytes| file.write(&bytes)) {
        warn!(file = %file.path().display(), "vocabulary vectors not kept: {e}");
    }
    info!(
        words,
        embedded,
        from_file = report.from_file,
        seconds = started.elapsed().as_secs_f64(),
        "vocabulary built"
    );
    Some(report)
}

/// The vocabulary of the memories `ids` names, and how many of its words were embedded (not
/// in `stored`); `None` when cancelled.
fn build(
    ids: &[MemoryId],
    index: &dyn VectorIndex,
    embedder: &Embedder,
    lexical: &LexicalEncoder,
    stored: &StoredWords,
    cancel: &AtomicBool,
) -> Result<Option<(Vocabulary, usize)>, EngineError> {
    let mut vocabulary = Vocabulary::default();
    let mut embedded = 0;
    for ids in ids.chunks(READ_BATCH) {
        if cancel.load(Ordering::Acquire) {
            return Ok(None);
        }
        let hits = index.retrieve(ids, false)?;
        let texts: Vec<&str> = hits.iter().map(|h| h.payload.content.as_str()).collect();
        embedded += vocabulary.add(&texts, lexical, embedder, stored)?;
    }
    Ok(Some((vocabulary, embedded)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocabulary(words: &[(&str, u32, f32)], texts: u32) -> Vocabulary {
        let mut v = Vocabulary {
            dimension: 1,
            texts,
            ..Vocabulary::default()
        };
        for &(word, count, x) in words {
            v.position.insert(word.into(), v.words.len());
            v.words.push(word.into());
            v.memories.push(count);
            v.vectors.push(x);
        }
        v
    }

    #[test]
    fn a_build_absorbs_the_words_indexed_meanwhile() {
        let mut built = vocabulary(&[("novel", 2, 1.0), ("guitar", 1, -1.0)], 30);
        built.absorb(vocabulary(&[("guitar", 1, -1.0), ("bicycle", 2, 0.5)], 3));
        assert_eq!(built.words, ["novel", "guitar", "bicycle"]);
        assert_eq!(built.memories, [2, 2, 2]);
        assert_eq!(built.vectors, [1.0, -1.0, 0.5]);
        assert_eq!(built.texts, 33);
        assert_eq!(built.position["bicycle"], 2);
    }

    #[test]
    fn counting_takes_embedded_words_and_counts_known_ones() {
        let lexical = LexicalEncoder::new(Default::default()).unwrap();
        let mut v = vocabulary(&[("novel", 1, 1.0)], 1);
        let texts = ["a novel and the guitar", "the guitar, the bicycle"];
        let unknown = v.unknown_words(&texts, &lexical);
        assert_eq!(
            unknown,
            ["bicycle", "guitar"],
            "stop words and known words left out"
        );
        // Embedded elsewhere meanwhile, "bicycle" is not offered: it is left out.
        v.count(&texts, vec![("guitar".into(), vec![-1.0])]);
        assert_eq!(v.words, ["novel", "guitar"]);
        assert_eq!(v.memories, [2, 2]);
        assert_eq!(v.texts, 3);
    }

    #[test]
    fn candidate_words_are_lower_case_alphabetic_and_distinct() {
        let words = candidate_words("Reading Dune by Frank Herbert; I love reading novels, ok? x2");
        assert_eq!(words, ["love", "novels", "reading"]);
    }
}
