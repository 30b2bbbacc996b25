//! [`Embedder`]: turning texts into unit-length dense vectors for the vector index and for
//! queries, with a sentence-embedding model run through ONNX Runtime
//! ([`Embedder::load`]) or an OpenAI-compatible endpoint ([`Embedder::connect`]).
//!
//! Either way, opening checks that the model runs and learns its dimension from one probe
//! embedding, so a broken or mismatched model fails at start-up rather than on the first
//! write.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fastembed::{InitOptionsUserDefined, Pooling, TextEmbedding, UserDefinedEmbeddingModel};
use tracing::debug;

use crate::api::{ApiEmbeddings, ApiEmbeddingsConfig};
use crate::error::EmbedError;
use crate::files::ModelFiles;
use crate::recent::Recent;
use crate::runtime;
use crate::windows::{mean, window_ranges};

/// Where the model lives and how to run it.
#[derive(Debug, Clone)]
pub struct EmbedderConfig {
    /// The ONNX Runtime shared library (loaded once per process; see [`crate::runtime`]).
    pub onnxruntime_library: PathBuf,
    /// Folder with `model.onnx`, `tokenizer.json`, `config.json`, `special_tokens_map.json`
    /// and `tokenizer_config.json`.
    pub model_dir: PathBuf,
    /// Cores the ONNX session may use.
    pub threads: usize,
    /// Texts per hold of the model when embedding many at once (queries waiting go between
    /// two); each ONNX Runtime call takes at most this many texts or windows, and fewer
    /// where they would pad to more than [`TOKENS_PER_RUN`].
    pub batch_size: usize,
    /// Longer inputs are truncated to this many tokens.
    pub max_length: usize,
    /// Inputs longer than this many tokens are embedded in windows of at most this many,
    /// their vector the mean of the windows'.
    pub window_tokens: usize,
}

impl EmbedderConfig {
    /// The model in `model_dir`, run by the library at `onnxruntime_library`, with 2 threads,
    /// batches of 64 and inputs up to 256 tokens, read in windows of 128 (the length
    /// all-MiniLM-L6-v2 was trained on).
    pub fn new(onnxruntime_library: impl Into<PathBuf>, model_dir: impl Into<PathBuf>) -> Self {
        Self {
            onnxruntime_library: onnxruntime_library.into(),
            model_dir: model_dir.into(),
            threads: 2,
            batch_size: 64,
            max_length: 256,
            window_tokens: 128,
        }
    }
}

/// A sentence-embedding model. Thread-safe; with ONNX, calls are serialised on one session,
/// which itself uses `threads` cores.
pub struct Embedder {
    backend: Backend,
    dimension: usize,
    batch_size: usize,
    /// Queries waiting for the model: bulk embedding lets them go first, batch by batch.
    queries_waiting: AtomicUsize,
    /// Texts embedded lately (of at most [`MAX_RECENT_TEXT_BYTES`]), answered without the
    /// model.
    recent: Recent<String, Vec<f32>>,
    /// Nanoseconds the backend has spent computing vectors (see [`Embedder::busy`]).
    busy_nanos: AtomicU64,
}

/// What computes the vectors. One per process, behind an `Arc`: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Backend {
    Onnx {
        model: Mutex<TextEmbedding>,
        /// The content tokens the model reads of a text (its limit less the two special
        /// tokens around them).
        read_tokens: usize,
        window_tokens: usize,
    },
    Api(ApiEmbeddings),
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("dimension", &self.dimension)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    /// Loads the runtime and the model, and embeds one probe text to check that the model runs
    /// and to learn its dimension.
    pub fn load(config: &EmbedderConfig) -> Result<Self, EmbedError> {
        let files = ModelFiles::read(&config.model_dir, "the embedding model")?;
        let environment = runtime::environment(&config.onnxruntime_library)?;
        let model =
            UserDefinedEmbeddingModel::new(files.onnx, files.tokenizer).with_pooling(Pooling::Mean);
        let options = InitOptionsUserDefined::new()
            .with_environment(environment)
            .with_execution_providers(vec![runtime::cpu_with_arena()])
            .with_max_length(config.max_length)
            .with_intra_threads(config.threads.max(1))
            .with_session_config(runtime::SPINNING, "0");
        let mut model = TextEmbedding::try_new_from_user_defined(model, options).map_err(|e| {
            EmbedError::Model {
                path: config.model_dir.clone(),
                message: e.to_string(),
            }
        })?;
        let probe = model.embed([PROBE], None).map_err(|e| EmbedError::Model {
            path: config.model_dir.clone(),
            message: format!("the model does not run: {e}"),
        })?;
        let dimension = probe.first().map(Vec::len).unwrap_or(0);
        debug!(dimension, model = %config.model_dir.display(), "embedding model loaded");
        Ok(Self {
            backend: Backend::Onnx {
                model: Mutex::new(model),
                read_tokens: config.max_length.saturating_sub(2).max(1),
                window_tokens: config.window_tokens,
            },
            dimension,
            batch_size: config.batch_size.max(1),
            queries_waiting: AtomicUsize::new(0),
            recent: Recent::new(RECENT_TEXTS),
            busy_nanos: AtomicU64::new(0),
        })
    }

    /// Connects to the embeddings endpoint `config` names and embeds one probe text, to
    /// check that it answers and to learn its dimension.
    pub fn connect(config: ApiEmbeddingsConfig) -> Result<Self, EmbedError> {
        let api = ApiEmbeddings::new(config)?;
        let probe = api.embed(&[PROBE])?;
        let dimension = api.check_dimension(&probe)?;
        debug!(dimension, model = %api.model(), "embeddings endpoint answered");
        Ok(Self {
            batch_size: api.batch_size(),
            backend: Backend::Api(api),
            dimension,
            queries_waiting: AtomicUsize::new(0),
            recent: Recent::new(RECENT_TEXTS),
            busy_nanos: AtomicU64::new(0),
        })
    }

    /// Length of every vector this model returns.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// One unit-length vector per text, in order.
    pub fn embed<S: AsRef<str> + Send + Sync>(
        &self,
        texts: &[S],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut vectors = Vec::with_capacity(texts.len());
        // One batch per hold of the model: a search's query waiting meanwhile goes next, so
        // indexing a thousand files or a long turn cannot stall a chat request.
        for batch in texts.chunks(self.batch_size) {
            if batch.iter().all(|t| self.recent.contains(t.as_ref())) {
                vectors.extend(self.run(batch)?);
                continue;
            }
            // Bounded: a steady stream of queries delays a batch, never starves it (bulk
            // embedding may run under the index's write lock).
            let mut waited = 0;
            while self.queries_waiting.load(Ordering::Acquire) > 0 && waited < MAX_YIELD_MS {
                std::thread::sleep(Duration::from_millis(1));
                waited += 1;
            }
            vectors.extend(self.run(batch)?);
        }
        Ok(vectors)
    }

    /// The unit-length vector of one text: a query, which goes before bulk embedding
    /// waiting for the model.
    pub fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let _waiting = QueryWaiting::new(&self.queries_waiting);
        self.run(&[text])?
            .pop()
            .ok_or_else(|| EmbedError::Inference("the model returned no vector".into()))
    }

    /// How long the model has run (or the endpoint been waited for) since loading, the probe
    /// left out. With ONNX, runs take turns on one session: this over a stretch of wall time
    /// is the share of it the model was busy, and a server whose every request needs `m` of
    /// it answers at most one request every `m`, however many cores it has.
    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy_nanos.load(Ordering::Relaxed))
    }

    /// The vector of `text` if it was embedded lately, without running the model.
    pub fn recently_embedded(&self, text: &str) -> Option<Vec<f32>> {
        self.recent.get(text)
    }

    /// Embeds `texts` in one hold of the model (one request to an endpoint), but for those
    /// embedded lately.
    fn run<S: AsRef<str> + Send + Sync>(&self, texts: &[S]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut vectors: Vec<Option<Vec<f32>>> =
            texts.iter().map(|t| self.recent.get(t.as_ref())).collect();
        let missing: Vec<&str> = texts
            .iter()
            .zip(&vectors)
            .filter(|(_, v)| v.is_none())
            .map(|(t, _)| t.as_ref())
            .collect();
        let mut computed = self.run_model(&missing)?.into_iter();
        for (text, vector) in missing
            .iter()
            .zip(vectors.iter_mut().filter(|v| v.is_none()))
        {
            let fresh = computed.next().ok_or_else(|| {
                EmbedError::Inference("the model returned fewer vectors than texts".into())
            })?;
            if worth_keeping(text) {
                self.recent.put((*text).to_owned(), fresh.clone());
            }
            *vector = Some(fresh);
        }
        Ok(vectors.into_iter().flatten().collect())
    }

    /// Embeds `texts` with the model itself.
    fn run_model(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut vectors = match &self.backend {
            Backend::Onnx {
                model,
                read_tokens,
                window_tokens,
            } => {
                let mut model = model.lock().unwrap_or_else(|p| p.into_inner());
                let _busy = Busy::new(&self.busy_nanos);
                let windows = Windows::of(&model, texts, *read_tokens, *window_tokens);
                let vectors =
                    shortest_first(&windows.pieces, self.batch_size, *read_tokens, |run| {
                        model
                            .embed(run, Some(run.len()))
                            .map_err(|e| EmbedError::Inference(e.to_string()))
                    })?;
                windows.pool(vectors)?
            }
            Backend::Api(api) => {
                let _busy = Busy::new(&self.busy_nanos);
                api.embed(texts)?
            }
        };
        if vectors.iter().any(|v| v.len() != self.dimension) {
            return Err(EmbedError::Inference(format!(
                "the model returned vectors of another length than its {}",
                self.dimension
            )));
        }
        vectors.iter_mut().for_each(|v| normalise(v));
        Ok(vectors)
    }
}

/// The pieces a batch of texts is embedded as, and how many belong to each text.
struct Windows<'t> {
    pieces: Vec<&'t str>,
    per_text: Vec<usize>,
}

impl<'t> Windows<'t> {
    /// Each of `texts` whole, or in windows of at most `window_tokens` of the first
    /// `read_tokens` tokens the model's tokenizer finds in it.
    fn of(
        model: &TextEmbedding,
        texts: &[&'t str],
        read_tokens: usize,
        window_tokens: usize,
    ) -> Self {
        let mut windows = Self {
            pieces: Vec::with_capacity(texts.len()),
            per_text: Vec::with_capacity(texts.len()),
        };
        for text in texts {
            let ranges = Self::ranges_of(model, text, read_tokens, window_tokens);
            windows.per_text.push(ranges.len());
            windows
                .pieces
                .extend(ranges.into_iter().map(|r| text.get(r).unwrap_or(text)));
        }
        windows
    }

    /// Where `text` is cut. The model's tokenizer runs here only where a cut may be needed
    /// (it runs again inside the model's call): each token covers at least one byte, so a
    /// text of no more bytes than the window (most queries and facts) is read whole, as is
    /// every text when the window is as long as what the model reads.
    fn ranges_of(
        model: &TextEmbedding,
        text: &str,
        read_tokens: usize,
        window_tokens: usize,
    ) -> Vec<Range<usize>> {
        let whole = 0..text.len();
        if text.len() <= window_tokens || window_tokens >= read_tokens {
            return vec![whole];
        }
        // A text the tokenizer refuses goes to the model whole, which says why.
        match model.tokenizer.encode(text, false) {
            Ok(encoding) => {
                let offsets = encoding.get_offsets();
                window_ranges(
                    text,
                    &offsets[..offsets.len().min(read_tokens)],
                    window_tokens,
                )
            }
            Err(_) => vec![whole],
        }
    }

    /// One vector per text from the pieces' `vectors`, in order.
    fn pool(&self, vectors: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, EmbedError> {
        if vectors.len() != self.pieces.len() {
            return Err(EmbedError::Inference(
                "the model returned another number of vectors than texts".into(),
            ));
        }
        let mut vectors = vectors.into_iter();
        Ok(self
            .per_text
            .iter()
            .map(|&count| mean(&vectors.by_ref().take(count).collect::<Vec<_>>()))
            .collect())
    }
}

/// The most tokens one model run pads its texts to, all together: its count of texts times
/// the longest's length. A run's memory grows with it, the runtime's arena keeps what the
/// largest run needed ([`crate::runtime`]), and padding is work done for nothing: storing
/// LoCoMo's 2,760 turns (`mnemo eval locomo`) took 40 s and 525 MB at the peak in runs of
/// 64 turns without the arena, 19 s and 304 MB within this budget with it (docs/limits.md).
pub const TOKENS_PER_RUN: usize = 2048;

/// `pieces` cut into consecutive runs of at most `most` pieces that pad to at most
/// [`TOKENS_PER_RUN`] tokens, and whose longest is at most twice their shortest (at least
/// one piece each). A piece's length is bounded without the tokenizer: a token covers at
/// least one byte, and the model reads at most `read_tokens` of them, besides its two special
/// tokens. Every piece of a run is padded to its longest, so a short query beside a window of
/// a long turn costs as much as the window; a run more costs about as much as a short text.
fn runs<'p>(pieces: &'p [&'p str], most: usize, read_tokens: usize) -> Vec<&'p [&'p str]> {
    let bound = |piece: &str| piece.len().min(read_tokens) + 2;
    let mut runs = Vec::new();
    let (mut start, mut longest, mut shortest) = (0, 0, usize::MAX);
    for (at, piece) in pieces.iter().enumerate() {
        let length = bound(piece);
        let (longer, shorter) = (longest.max(length), shortest.min(length));
        let count = at - start + 1;
        if count > 1
            && (count > most.max(1) || count * longer > TOKENS_PER_RUN || longer > 2 * shorter)
        {
            runs.push(&pieces[start..at]);
            (start, longest, shortest) = (at, length, length);
        } else {
            (longest, shortest) = (longer, shorter);
        }
    }
    if start < pieces.len() {
        runs.push(&pieces[start..]);
    }
    runs
}

/// The vectors of `pieces`, in their order, from `embed` called on runs ([`runs`]) of the
/// pieces sorted by length: a run pads every piece to its longest, and a batch mixes short
/// facts and queries with the windows of long turns.
fn shortest_first(
    pieces: &[&str],
    most: usize,
    read_tokens: usize,
    mut embed: impl FnMut(&[&str]) -> Result<Vec<Vec<f32>>, EmbedError>,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let mut order: Vec<usize> = (0..pieces.len()).collect();
    order.sort_by_key(|&at| pieces[at].len());
    let sorted: Vec<&str> = order.iter().map(|&at| pieces[at]).collect();
    let mut vectors = vec![Vec::new(); pieces.len()];
    let mut places = order.iter();
    for run in runs(&sorted, most, read_tokens) {
        let embedded = embed(run)?;
        if embedded.len() != run.len() {
            return Err(EmbedError::Inference(
                "the model returned another number of vectors than texts".into(),
            ));
        }
        for (vector, &at) in embedded.into_iter().zip(places.by_ref()) {
            vectors[at] = vector;
        }
    }
    Ok(vectors)
}

/// The text embedded on opening, to learn the dimension.
const PROBE: &str = "dimension probe";

/// Texts whose vectors are kept per generation of [`Recent`] (two are kept).
const RECENT_TEXTS: usize = 1024;
/// Longer texts are not kept: they are rarely embedded twice.
const MAX_RECENT_TEXT_BYTES: usize = 2048;

/// Whether the vector of `text` is kept among [`Recent`] ones.
fn worth_keeping(text: &str) -> bool {
    text.len() <= MAX_RECENT_TEXT_BYTES
}

/// The longest a batch of bulk embedding gives way to queries, in milliseconds.
const MAX_YIELD_MS: u32 = 200;

/// Adds the time it lives to a counter of nanoseconds, even if the model panics.
struct Busy<'a> {
    nanos: &'a AtomicU64,
    since: Instant,
}

impl<'a> Busy<'a> {
    fn new(nanos: &'a AtomicU64) -> Self {
        Self {
            nanos,
            since: Instant::now(),
        }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let spent = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(spent, Ordering::Relaxed);
    }
}

/// Counts a query waiting for the model while it lives, even if the model panics.
struct QueryWaiting<'a>(&'a AtomicUsize);

impl<'a> QueryWaiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count)
    }
}

impl Drop for QueryWaiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Scales `v` to unit length, so that dot product is cosine similarity.
fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Cosine similarity of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_pad_to_at_most_their_budget_and_keep_every_piece_in_order() {
        let long = "word ".repeat(400);
        let (short, middling) = ("a word", "a longer sentence");
        let pieces: Vec<&str> = [short; 70]
            .into_iter()
            .chain([middling; 2])
            .chain([long.as_str(); 9])
            .collect();
        let cut = runs(&pieces, 64, 256);
        // 64 short ones (8 tokens at most each); the other 6, as the middling ones (19) would
        // pad them to more than twice their length; the middling ones; 7 long ones (258: 7 x
        // 258 = 1,806, and an 8th would make 2,064); the last 2.
        let sizes: Vec<usize> = cut.iter().map(|r| r.len()).collect();
        assert_eq!(sizes, [64, 6, 2, 7, 2]);
        for run in &cut {
            let lengths: Vec<usize> = run.iter().map(|p| p.len().min(256) + 2).collect();
            let longest = *lengths.iter().max().unwrap();
            assert!(run.len() * longest <= TOKENS_PER_RUN, "{}", run.len());
            assert!(longest <= 2 * lengths.iter().min().unwrap());
        }
        let joined: Vec<&str> = cut.concat();
        assert_eq!(joined, pieces);
        // A piece longer than the budget on its own still gets a run.
        assert_eq!(runs(&[long.as_str()], 64, 4096).len(), 1);
        assert!(runs(&[], 64, 256).is_empty());
    }

    #[test]
    fn pieces_are_embedded_shortest_first_and_answered_in_their_order() {
        let pieces = ["a longer piece", "a", "mid piece", "ab"];
        let mut runs_seen = Vec::new();
        let vectors = shortest_first(&pieces, 2, 256, |run| {
            runs_seen.push(run.iter().map(|p| p.to_string()).collect::<Vec<_>>());
            Ok(run.iter().map(|p| vec![p.len() as f32]).collect())
        })
        .unwrap();
        assert_eq!(
            runs_seen,
            [vec!["a", "ab"], vec!["mid piece", "a longer piece"]]
        );
        assert_eq!(vectors, [vec![14.0], vec![1.0], vec![9.0], vec![2.0]]);
        let short = shortest_first(&pieces, 2, 256, |run| Ok(vec![vec![0.0]; run.len() - 1]));
        assert!(short.is_err());
    }

    #[test]
    fn long_texts_are_not_kept() {
        assert!(worth_keeping("a short query"));
        assert!(!worth_keeping(&"x".repeat(MAX_RECENT_TEXT_BYTES + 1)));
    }
}
