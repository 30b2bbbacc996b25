//! The embedding model's own words, embedded one by one: what document expansion adds to a
//! memory's lexical key.
//!
//! A turn such as "I'm reading Dune by Frank Herbert" answers "What books has John read?"
//! without a word in common. Vocabulary expansion ([`crate::index::vocabulary`]) adds *novels* to
//! the query; document expansion adds to the turn's key the few words whose embedding lies
//! closest to the turn's own (`novel`, `sci`, ...), each at a fraction of a word of the turn's
//! ([`crate::index::keys`]). On LoCoMo it helps only together with the query side, where the two meet
//! on kind-words (docs/retrieval.md).
//!
//! The candidates are the whole words of the model's tokenizer: lower-case, alphabetic, 3 to 24
//! characters, not stop words (21,245 for all-MiniLM-L6-v2). Unlike the store's vocabulary
//! they depend on the model alone, so a memory's key never depends on what else the store held
//! when it was indexed, and an index rebuilt from the files matches one kept up to date.
//! Embedding them takes about 13 s on 2 cores, once per model folder: the vectors are kept in
//! [`WORDS_FILE`] beside the model, in [`crate::index::vocabulary_file`]'s format and checked like it
//! (a damaged file, or one whose words are not the tokenizer's, is embedded again and
//! rewritten). A process loads them once for every store it opens.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use mnemo_core::{Config, EmbeddingProvider};
use mnemo_embed::{ApiEmbeddingsConfig, Embedder, EmbedderConfig, Recent};
use mnemo_index::{LexicalEncoder, LexicalOptions, SparseVector};
use tracing::{info, warn};

use crate::error::ModelWordsError;
use crate::index::vocabulary_file::VocabularyFile;
use crate::index::word_rules::{dot, is_candidate_word, MAX_WORDS};

/// The file, in the embedding model's folder, that keeps the words' vectors.
pub const WORDS_FILE: &str = "mnemo-words.bin";

/// Vectors whose nearest words are computed in one pass over the words' matrix.
const QUERY_BLOCK: usize = 64;

/// Below this many memories, words are scored by a loop of dot products (see `scores`).
const FEW_QUERIES: usize = 3;

/// A tokenizer file larger than this is not one a model ships with.
const MAX_TOKENIZER_BYTES: u64 = 64 << 20;

/// Loads the embedding model `config` names and embeds its words now, unless they are kept
/// already: what `mnemo models --prepare-words` does, so that the first store opened need
/// not. Returns how many words there are and the file that keeps them.
pub fn prepare(config: &Config) -> Result<(usize, PathBuf), ModelWordsError> {
    let paths = config.model_paths();
    let embedder = Embedder::load(&embedder_config(config))?;
    // A word's term is its stem's id, whatever BM25's parameters.
    let lexical = LexicalEncoder::new(LexicalOptions::default())?;
    let model = dense_model_description(&config.embedding_model, embedder.dimension());
    let words = ModelWords::open(&paths.embedding_model_dir, &model, &embedder, &lexical)?;
    Ok((words.len(), paths.embedding_model_dir.join(WORDS_FILE)))
}

/// How the snapshot and the words files name an embedding model: name and dimension.
pub fn dense_model_description(name: &str, dimension: usize) -> String {
    format!("{name} ({dimension} dimensions)")
}

/// The model's words with their vectors and lexical terms.
#[derive(Debug)]
pub struct ModelWords {
    words: Vec<String>,
    /// Each word's lexical term (its stem's id), so that words a memory says already are
    /// left out, and two words of one stem count once.
    terms: Vec<u32>,
    vectors: Vec<f32>,
    dimension: usize,
    /// Identifies the vectors: keys built from other vectors are rebuilt.
    fingerprint: String,
    /// Answers given lately (positions in `words`), by a hash of the question: a new
    /// memory's words are found before the index's lock is taken, and the key built under it
    /// asks the same question. (A key rebuilt later takes them from the snapshot entry.)
    recent: Recent<u64, Vec<usize>>,
}

/// Answers kept per generation (two are kept).
const RECENT_ANSWERS: usize = 2048;

/// Identifies a nearest-words question: every bit of the vector, the stems left out, `n`.
fn question(vector: &[f32], own: &SparseVector, n: usize) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for x in vector {
        hasher.update(&x.to_le_bytes());
    }
    for term in &own.indices {
        hasher.update(&term.to_le_bytes());
    }
    hasher.update(&n.to_le_bytes());
    hasher.digest()
}

/// Model words loaded in this process, by folder and model: every store opened shares them.
type Loaded = Vec<(PathBuf, String, Arc<ModelWords>)>;
static LOADED: Mutex<Loaded> = Mutex::new(Vec::new());

impl ModelWords {
    /// The words of the model in `model_dir` (described as `model`, as the snapshot records
    /// it), embedded by `embedder`: read from [`WORDS_FILE`], or embedded and written there.
    pub fn open(
        model_dir: &Path,
        model: &str,
        embedder: &Embedder,
        lexical: &LexicalEncoder,
    ) -> Result<Arc<Self>, ModelWordsError> {
        // Held while embedding, so that stores opened meanwhile wait instead of embedding too.
        let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, _, words)) = loaded
            .iter()
            .find(|(dir, m, _)| dir == model_dir && m == model)
        {
            return Ok(Arc::clone(words));
        }
        let words = Arc::new(Self::load_or_embed(model_dir, model, embedder, lexical)?);
        loaded.push((model_dir.to_owned(), model.to_owned(), Arc::clone(&words)));
        Ok(words)
    }

    fn load_or_embed(
        model_dir: &Path,
        model: &str,
        embedder: &Embedder,
        lexical: &LexicalEncoder,
    ) -> Result<Self, ModelWordsError> {
        let tokenizer = model_dir.join("tokenizer.json");
        let bytes =
            mnemo_store::untrusted::read_regular(&tokenizer, MAX_TOKENIZER_BYTES).map_err(|e| {
                ModelWordsError::Tokenizer {
                    path: tokenizer.clone(),
                    reason: e.to_string(),
                }
            })?;
        let (words, terms) =
            tokenizer_words(&bytes, lexical).map_err(|reason| ModelWordsError::Tokenizer {
                path: tokenizer.clone(),
                reason,
            })?;
        let file = VocabularyFile::new(model_dir.join(WORDS_FILE), model, embedder.dimension());
        let stored = file.read().unwrap_or_else(|e| {
            warn!(file = %file.path().display(), "model words not reused ({e}); embedding them again");
            Default::default()
        });
        let kept: Option<Vec<&[f32]>> = (stored.len() == words.len())
            .then(|| words.iter().map(|w| stored.get(w)).collect())
            .flatten();
        let vectors: Vec<f32> = match kept {
            Some(kept) => kept.concat(),
            None => {
                let started = std::time::Instant::now();
                info!(
                    words = words.len(),
                    "embedding the model's words for document expansion, once for this model"
                );
                let vectors = embedder.embed(&words)?.concat();
                let bytes = file.encode(words_with_vectors(&words, &vectors, embedder.dimension()));
                match file.write(&bytes) {
                    Ok(()) => info!(
                        seconds = started.elapsed().as_secs_f64(),
                        file = %file.path().display(),
                        "model words embedded and kept"
                    ),
                    Err(e) => warn!(
                        file = %file.path().display(),
                        "model words not kept ({e}): the next start embeds them again"
                    ),
                }
                vectors
            }
        };
        let fingerprint = fingerprint(&words, &vectors);
        Ok(Self {
            words,
            terms,
            vectors,
            dimension: embedder.dimension(),
            fingerprint,
            recent: Recent::new(RECENT_ANSWERS),
        })
    }

    /// Words held.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether `word` is one of the words held (they are sorted).
    pub fn has(&self, word: &str) -> bool {
        self.words
            .binary_search_by(|held| held.as_str().cmp(word))
            .is_ok()
    }

    /// Whether it holds no word.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Identifies the words and their vectors (part of the key scheme's description).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The `n` words closest to `vector` (a unit vector of the same model), best first, one
    /// per stem, leaving out stems `own` holds.
    pub fn nearest(&self, vector: &[f32], own: &SparseVector, n: usize) -> Vec<&str> {
        self.nearest_each(&[(vector, own)], n)
            .pop()
            .unwrap_or_default()
    }

    /// [`nearest`](Self::nearest) for each `(vector, own)`, scored in blocks of
    /// 64 vectors: one matrix product each.
    pub fn nearest_each(&self, queries: &[(&[f32], &SparseVector)], n: usize) -> Vec<Vec<&str>> {
        let questions: Vec<u64> = queries.iter().map(|(v, own)| question(v, own, n)).collect();
        let mut answers: Vec<Option<Vec<usize>>> =
            questions.iter().map(|q| self.recent.get(q)).collect();
        let unanswered: Vec<usize> = (0..queries.len())
            .filter(|&i| answers[i].is_none())
            .collect();
        for block in unanswered.chunks(QUERY_BLOCK) {
            let vectors: Vec<&[f32]> = block.iter().map(|&i| queries[i].0).collect();
            let scores = if n > 0 {
                scores(&self.vectors, self.dimension, &vectors)
            } else {
                vec![Vec::new(); block.len()]
            };
            for (&i, scores) in block.iter().zip(scores) {
                let answer = self.best(scores, queries[i].1, n);
                self.recent.put(questions[i], answer.clone());
                answers[i] = Some(answer);
            }
        }
        answers
            .into_iter()
            .map(|positions| {
                positions
                    .unwrap_or_default()
                    .into_iter()
                    .map(|at| self.words[at].as_str())
                    .collect()
            })
            .collect()
    }

    /// The `n` best-scored words, one per stem, leaving out stems `own` holds.
    fn best(&self, scores: Vec<f32>, own: &SparseVector, n: usize) -> Vec<usize> {
        let mut scored: Vec<(f32, usize)> = scores
            .into_iter()
            .enumerate()
            .map(|(at, score)| (score, at))
            .collect();
        let better = |a: &(f32, usize), b: &(f32, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        // Only the first few are wanted: select them, and sort the rest only if words the
        // memory says already used them up.
        let head = (n * 8).max(64).min(scored.len());
        if head < scored.len() {
            scored.select_nth_unstable_by(head, better);
        }
        scored[..head].sort_unstable_by(better);
        let mut taken: Vec<usize> = Vec::with_capacity(n);
        let pick = |ranked: &[(f32, usize)], taken: &mut Vec<usize>| {
            for &(_, at) in ranked {
                if taken.len() == n {
                    return;
                }
                let term = self.terms[at];
                if !own.indices.contains(&term) && !taken.iter().any(|&t| self.terms[t] == term) {
                    taken.push(at);
                }
            }
        };
        pick(&scored[..head], &mut taken);
        if taken.len() < n && head < scored.len() {
            scored[head..].sort_unstable_by(better);
            pick(&scored[head..], &mut taken);
        }
        taken
    }
}

/// A hash of the words and every bit of their vectors (xxh3: a few milliseconds for the
/// 30 MB, where sha256 took 60, and only mnemo's own files are compared with it).
fn fingerprint(words: &[String], vectors: &[f32]) -> String {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for word in words {
        hasher.update(word.as_bytes());
        hasher.update(b" ");
    }
    let mut bytes = Vec::with_capacity(4096);
    for chunk in vectors.chunks(1024) {
        bytes.clear();
        bytes.extend(chunk.iter().flat_map(|x| x.to_le_bytes()));
        hasher.update(&bytes);
    }
    format!("{:016x}", hasher.digest())
}

/// Each of `queries` scored against every row of `rows` (vectors of `dimension` components,
/// one after another): `scores[q][row]`, their dot product. For a few queries, a loop of dot
/// products; for more, one matrix product, whose kernels use the processor's vector
/// instructions (AVX2 and FMA where it has them) and read the rows once for all queries: for
/// a block of 64 memories about 0.6 ms each against 4 ms for the loop, on 2 cores. It packs
/// the whole matrix first, though, which makes it the slower for one or two queries.
fn scores(rows: &[f32], dimension: usize, queries: &[&[f32]]) -> Vec<Vec<f32>> {
    let count = rows.len() / dimension.max(1);
    if dimension == 0 || queries.iter().any(|q| q.len() != dimension) {
        return vec![Vec::new(); queries.len()];
    }
    let rows = &rows[..count * dimension];
    if queries.len() < FEW_QUERIES {
        return queries
            .iter()
            .map(|q| {
                rows.chunks_exact(dimension)
                    .map(|row| dot(row, q))
                    .collect()
            })
            .collect();
    }
    let matrix = ndarray::ArrayView2::from_shape((count, dimension), rows);
    let asked = ndarray::Array2::from_shape_vec((queries.len(), dimension), queries.concat());
    match (matrix, asked) {
        (Ok(matrix), Ok(asked)) => {
            let products = matrix.dot(&asked.t());
            products.columns().into_iter().map(|c| c.to_vec()).collect()
        }
        _ => vec![Vec::new(); queries.len()],
    }
}

fn words_with_vectors<'w>(
    words: &'w [String],
    vectors: &'w [f32],
    dimension: usize,
) -> impl ExactSizeIterator<Item = (&'w str, &'w [f32])> {
    words
        .iter()
        .map(String::as_str)
        .zip(vectors.chunks_exact(dimension.max(1)))
}

/// The whole words of a tokenizer (`tokenizer.json`'s `model.vocab`, a map of tokens as
/// WordPiece and BPE write it, or a list of `[piece, score]` as Unigram does) that the
/// vocabulary would take and that are not stop words, sorted, each with its lexical term:
/// the first [`MAX_WORDS`] in the tokenizer's order. A word piece (`##ing`) is no word; a
/// leading `Ġ` or `▁` (a word's start) is dropped.
pub(crate) fn tokenizer_words(
    json: &[u8],
    lexical: &LexicalEncoder,
) -> Result<(Vec<String>, Vec<u32>), String> {
    let value: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("not JSON: {e}"))?;
    let vocab = &value["model"]["vocab"];
    // In the tokenizer's order: ids (WordPiece, BPE) and Unigram's list put common tokens first.
    let tokens: Vec<&str> = match vocab {
        serde_json::Value::Object(map) => {
            let mut by_id: Vec<(u64, &str)> = map
                .iter()
                .map(|(token, id)| (id.as_u64().unwrap_or(u64::MAX), token.as_str()))
                .collect();
            by_id.sort_unstable();
            by_id.into_iter().map(|(_, token)| token).collect()
        }
        serde_json::Value::Array(pieces) => pieces
            .iter()
            .filter_map(|p| p.get(0).and_then(serde_json::Value::as_str))
            .collect(),
        _ => return Err("no word list (`model.vocab`)".into()),
    };
    let mut seen = std::collections::HashSet::new();
    let mut kept = Vec::new();
    for token in tokens {
        let word = token.trim_start_matches(['Ġ', '▁']);
        if kept.len() == MAX_WORDS || !is_candidate_word(word) || !seen.insert(word) {
            continue;
        }
        // Stop words have no term.
        if let Some(&term) = lexical.query(word).indices.first() {
            kept.push((word.to_owned(), term));
        }
    }
    // The most common words of a large vocabulary (a multilingual one has 250,000 tokens),
    // as many as a words file holds; then in a fixed order.
    kept.sort_unstable();
    let (kept, terms): (Vec<String>, Vec<u32>) = kept.into_iter().unzip();
    if kept.is_empty() {
        return Err("its word list holds no whole word".into());
    }
    Ok((kept, terms))
}

/// The embedder `config` names: the ONNX model, or the embeddings endpoint (probed once).
pub(crate) fn load_embedder(config: &Config) -> Result<Embedder, mnemo_embed::EmbedError> {
    match config.embedding_provider {
        EmbeddingProvider::Onnx => Embedder::load(&embedder_config(config)),
        EmbeddingProvider::Openai => Embedder::connect(ApiEmbeddingsConfig {
            base_url: config.embedding_url().unwrap_or_default().to_owned(),
            api_key: config.embedding_key().map(|k| k.expose().to_owned()),
            model: config.embedding_model.clone(),
            dimensions: config.embedding_dimensions,
            timeout: std::time::Duration::from_secs(config.embedding_timeout_secs),
            batch_size: config.embed_batch_size,
        }),
    }
}

/// How the snapshot and the words files name the embedder `config` names, whose vectors
/// have `dimension` components: an endpoint's model is named with its provider, as the same
/// name may mean other weights there.
pub(crate) fn embedder_description(config: &Config, dimension: usize) -> String {
    match config.embedding_provider {
        EmbeddingProvider::Onnx => dense_model_description(&config.embedding_model, dimension),
        EmbeddingProvider::Openai => {
            dense_model_description(&format!("openai:{}", config.embedding_model), dimension)
        }
    }
}

/// How the ONNX embedding model `config` names is loaded, for opening a store and for
/// preparing the model's words alike.
pub(crate) fn embedder_config(config: &Config) -> EmbedderConfig {
    let paths = config.model_paths();
    EmbedderConfig {
        threads: config.embed_threads,
        batch_size: config.embed_batch_size,
        max_length: mnemo_core::MAX_EMBED_TOKENS,
        window_tokens: config.embed_window_tokens(),
        ..EmbedderConfig::new(&paths.onnxruntime_library, &paths.embedding_model_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lexical() -> LexicalEncoder {
        LexicalEncoder::new(LexicalOptions::default()).unwrap()
    }

    #[test]
    fn a_tokenizers_whole_words_are_its_candidates() {
        let wordpiece = br###"{"model": {"type": "WordPiece", "vocab": {"[CLS]": 101,
            "novel": 3, "##ing": 4, "the": 5, "Paris": 6, "read": 7, "x2": 8, "an": 9,
            "reading": 10}}}"###;
        let (words, terms) = tokenizer_words(wordpiece, &lexical()).unwrap();
        assert_eq!(words, ["novel", "read", "reading"]);
        assert_eq!(terms[1], terms[2], "one stem");
        let bpe = "{\"model\": {\"vocab\": {\"Ġnovel\": 1, \"novel\": 2, \"Ġbooks\": 3}}}";
        assert_eq!(
            tokenizer_words(bpe.as_bytes(), &lexical()).unwrap().0,
            ["books", "novel"]
        );
        let unigram = "{\"model\": {\"vocab\": [[\"▁garden\", -3.5], [\"<unk>\", 0]]}}";
        assert_eq!(
            tokenizer_words(unigram.as_bytes(), &lexical()).unwrap().0,
            ["garden"]
        );
        for (json, reason) in [
            (&b"{"[..], "not JSON"),
            (&b"{\"model\": {}}"[..], "no word list"),
            (
                &b"{\"model\": {\"vocab\": {\"##s\": 1}}}"[..],
                "no whole word",
            ),
        ] {
            let err = tokenizer_words(json, &lexical()).unwrap_err();
            assert!(err.contains(reason), "{err}");
        }
    }

    #[test]
    fn a_large_vocabulary_gives_its_first_words_up_to_what_a_words_file_holds() {
        let letters = |i: usize| -> String {
            (0..4)
                .map(|k| (b'a' + (i / 26usize.pow(k) % 26) as u8) as char)
                .collect()
        };
        let vocab: serde_json::Map<String, serde_json::Value> =
            (0..60_000).map(|i| (letters(i), i.into())).collect();
        let json = serde_json::json!({"model": {"vocab": vocab}}).to_string();
        let (words, _) = tokenizer_words(json.as_bytes(), &lexical()).unwrap();
        assert_eq!(words.len(), MAX_WORDS);
        assert!(words.contains(&letters(0)), "the first ids are kept");
        assert!(!words.contains(&letters(59_999)), "the last are not");
    }

    fn words(entries: &[(&str, [f32; 2])]) -> ModelWords {
        let lexical = lexical();
        ModelWords {
            words: entries.iter().map(|(w, _)| (*w).to_owned()).collect(),
            terms: entries
                .iter()
                .map(|(w, _)| lexical.query(w).indices[0])
                .collect(),
            vectors: entries.iter().flat_map(|(_, v)| *v).collect(),
            dimension: 2,
            fingerprint: String::new(),
            recent: Recent::new(RECENT_ANSWERS),
        }
    }

    #[test]
    fn the_nearest_words_leave_out_the_memorys_own_stems_and_repeat_none() {
        let w = words(&[
            ("novel", [1.0, 0.0]),
            ("novels", [0.99, 0.14]),
            ("reading", [0.98, 0.2]),
            ("books", [0.9, 0.43]),
            ("garden", [0.0, 1.0]),
        ]);
        let own = lexical().query("I'm reading Dune");
        assert_eq!(w.nearest(&[1.0, 0.0], &own, 2), ["novel", "books"]);
        assert_eq!(
            w.nearest(&[1.0, 0.0], &own, 9),
            ["novel", "books", "garden"]
        );
        assert!(w.nearest(&[1.0, 0.0], &own, 0).is_empty());
        assert!(
            w.nearest(&[1.0, 0.0, 0.0], &own, 2).is_empty(),
            "another model"
        );
    }

    #[test]
    fn ties_are_broken_the_same_way_every_time() {
        let w = words(&[
            ("alpha", [0.6, 0.8]),
            ("beta", [0.6, 0.8]),
            ("gamma", [0.8, 0.6]),
        ]);
        let nothing = SparseVector::default();
        for _ in 0..3 {
            assert_eq!(w.nearest(&[0.6, 0.8], &nothing, 2), ["alpha", "beta"]);
        }
    }
}
