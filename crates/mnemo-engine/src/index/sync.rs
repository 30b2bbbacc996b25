//! Keeping the vector index in step with the files.
//!
//! [`Indexer`] turns memory files into index points and records each in the [`Snapshot`]:
//! [`Indexer::sync`] brings the whole index in step (on start-up and `mnemo reindex`),
//! [`Indexer::sync_path`] one file the watcher saw change, and `Indexer::refresh_keys`
//! rebuilds the lexical keys whose neighbouring turns changed. Files whose bytes hash to what
//! the snapshot recorded, and whose point the index holds, are not even parsed.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use mnemo_core::{ConversationId, MemoryId, MemoryRecord, Role};
use mnemo_embed::Embedder;
use mnemo_index::{LexicalEncoder, Point, PointPayload, SparseVector, VectorIndex};
use mnemo_store::{sha256_hex, FileStore, StoredMemory};
use serde::Serialize;
use tracing::{info, warn};

use crate::error::EngineError;
use crate::index::keys::{self, KeyContextTexts, KeyScheme};
use crate::index::model_words::ModelWords;
use crate::index::snapshot::{KeyContext, Snapshot, SnapshotEntry};
use crate::index::timeline::Timeline;
use crate::index::vocabulary::Vocabulary;

/// Progress of a sync, for progress bars.
#[derive(Debug, Clone, Copy)]
pub struct SyncProgress {
    /// Files embedded so far.
    pub embedded: usize,
    /// Files this sync embeds in all.
    pub to_embed: usize,
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SyncReport {
    /// Live memory files found.
    pub files: usize,
    /// Seconds the sync took.
    pub seconds: f64,
    /// Files (re-)embedded.
    pub embedded: usize,
    /// Points deleted because no live file claims them.
    pub deleted: usize,
    /// Files that could not be read as memories, and why.
    pub skipped: Vec<String>,
}

/// Memories embedded, upserted and recorded per step of [`Indexer::index_memories`] (the
/// embedder cuts each step into its own batches): a sync stopped midway keeps what its
/// finished steps recorded.
const MEMORIES_PER_STEP: usize = 64;

/// What it takes to turn memory files into index points.
pub struct Indexer<'a> {
    /// The files.
    pub store: &'a FileStore,
    /// Embeds dense keys.
    pub embedder: &'a Embedder,
    /// Encodes lexical keys.
    pub lexical: &'a LexicalEncoder,
    /// The index the files are kept in.
    pub index: &'a dyn VectorIndex,
    /// How lexical keys are built.
    pub scheme: KeyScheme,
    /// [`KeyScheme::describe`] plus the BM25 parameters: what the snapshot records.
    pub scheme_description: String,
    /// The store's vocabulary, which grows with what is indexed (when vocabulary expansion
    /// is on).
    pub vocabulary: Option<&'a RwLock<Vocabulary>>,
    /// The model's words, when document expansion is on.
    pub model_words: Option<&'a ModelWords>,
    /// Vectors embedded before the snapshot lock was taken ([`Indexer::embed_ahead`]), used
    /// instead of embedding again under it.
    pub ahead: Option<&'a EmbeddedAhead>,
}

/// What a file rewritten with the dense key it was indexed under (a conflict marked, a
/// person's decision recorded) keeps, by that key: its vector, as the index holds it, and the
/// model's words nearest it, as the snapshot does. Neither is worked out again.
#[derive(Debug, Default)]
pub struct KeptKeys {
    /// Dense vectors by key.
    pub vectors: HashMap<String, Vec<f32>>,
    /// The model's words nearest each key, separated by spaces.
    pub nearest: HashMap<String, String>,
}

/// Vectors of memories about to be indexed, and of their words the vocabulary lacks,
/// computed before the snapshot lock is taken: the embedder serves searches first, so a
/// writer that embedded under that lock would hold every other writer (the write path, the
/// turns of other chats) behind the searches of a busy server.
#[derive(Debug, Default)]
pub struct EmbeddedAhead {
    /// By the dense key embedded.
    dense: HashMap<String, Vec<f32>>,
    /// Words the vocabulary lacked, with their vectors.
    words: Vec<(String, Vec<f32>)>,
    /// The model's words nearest each dense key, where the snapshot knew them already.
    nearest: HashMap<String, String>,
}

impl<'a> Indexer<'a> {
    /// This indexer, taking the vectors in `ahead` instead of embedding them again.
    pub fn with_ahead(self, ahead: &'a EmbeddedAhead) -> Self {
        Self {
            ahead: Some(ahead),
            ..self
        }
    }

    /// Embeds what indexing `records` needs (their dense keys, the words the vocabulary
    /// lacks), without touching the snapshot, so the caller can do it before locking it.
    /// `kept` holds what is known already of some dense keys (a file rewritten with the same
    /// text): their vectors are not embedded again, nor their nearest words looked for.
    pub fn embed_ahead<'r>(
        &self,
        records: impl IntoIterator<Item = &'r MemoryRecord>,
        kept: KeptKeys,
    ) -> Result<EmbeddedAhead, EngineError> {
        let records: Vec<&MemoryRecord> = records.into_iter().collect();
        let texts: Vec<String> = records.iter().map(|r| keys::dense_key(r)).collect();
        let vectors = self.vectors_of_keys(&texts, |text| kept.vectors.get(text))?;
        // The model's words nearest each: the answers are kept (`ModelWords`), and the key
        // upkeep under the lock finds them there, since it takes a new memory's vector from
        // the embedder's recent ones too.
        let with_vectors: Vec<(&MemoryRecord, Option<&[f32]>)> = records
            .iter()
            .zip(texts.iter().zip(&vectors))
            .filter(|(_, (text, _))| !kept.nearest.contains_key(*text))
            .map(|(r, (_, v))| (*r, Some(v.as_slice())))
            .collect();
        self.nearest_words(&with_vectors);
        let contents: Vec<&str> = records.iter().map(|r| r.content.as_str()).collect();
        Ok(EmbeddedAhead {
            dense: texts.into_iter().zip(vectors).collect(),
            words: self.embed_unknown_words(&contents).unwrap_or_default(),
            nearest: kept.nearest,
        })
    }

    /// The vectors of the dense keys `texts`: those `known` has as they are, the others
    /// embedded now.
    fn vectors_of_keys<'k>(
        &self,
        texts: &[String],
        known: impl Fn(&String) -> Option<&'k Vec<f32>>,
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        let missing: Vec<&String> = texts.iter().filter(|t| known(t).is_none()).collect();
        let mut embedded = self.embedder.embed(&missing)?.into_iter();
        texts
            .iter()
            .map(|text| match known(text) {
                Some(vector) => Ok(vector.clone()),
                None => embedded.next().ok_or_else(|| {
                    EngineError::Task("the embedder returned fewer vectors than texts".into())
                }),
            })
            .collect()
    }

    /// The model's words nearest a memory's dense key that the snapshot holds for the file
    /// at `path` (store-relative), if they were found under this key scheme, with the hash
    /// of the file they were found for.
    pub(crate) fn kept_nearest_words<'s>(
        &self,
        snapshot: &'s Snapshot,
        path: &str,
    ) -> Option<(&'s str, &'s str)> {
        let entry = snapshot.files().get(path)?;
        let other_scheme = snapshot.key_scheme != self.scheme_description;
        let words = self.kept_words(entry, other_scheme)?;
        Some((entry.sha256.as_str(), words))
    }

    /// The nearest model words `entry` holds, unless the snapshot was keyed under another
    /// scheme (`other_scheme`: its words would find other ones) or they are not words this
    /// scheme could have found (a snapshot edited by hand may hold anything).
    fn kept_words<'e>(&self, entry: &'e SnapshotEntry, other_scheme: bool) -> Option<&'e str> {
        let words = entry.nearest_words.as_deref()?;
        (!other_scheme && self.could_be_nearest_words(words)).then_some(words)
    }
}

impl Indexer<'_> {
    /// The dense vectors of `texts`: those embedded ahead, the others embedded now.
    fn dense_vectors_of(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EngineError> {
        let ahead = self.ahead;
        self.vectors_of_keys(texts, |text| ahead.and_then(|a| a.dense.get(text)))
    }

    /// Embeds `memories` and upserts them, in batches, recording each flushed batch.
    pub fn index_memories(
        &self,
        snapshot: &mut Snapshot,
        memories: &[(StoredMemory, String)],
        progress: &mut dyn FnMut(SyncProgress),
    ) -> Result<(), EngineError> {
        let store = self.store;
        let mut done = 0;
        for batch in memories.chunks(MEMORIES_PER_STEP) {
            let texts: Vec<String> = batch
                .iter()
                .map(|(m, _)| keys::dense_key(&m.record))
                .collect();
            let vectors = self.dense_vectors_of(&texts)?;
            // A turn's neighbours, facts and nearest words are filled in by `refresh_keys`,
            // once every new memory is recorded.
            let needing_words: Vec<(&MemoryRecord, Option<&[f32]>)> = batch
                .iter()
                .zip(&vectors)
                .map(|((m, _), v)| {
                    let record = &m.record;
                    (
                        record,
                        (!self.key_reads_context(record.role)).then_some(v.as_slice()),
                    )
                })
                .collect();
            let nearest = self.nearest_words(&needing_words);
            let points = batch
                .iter()
                .zip(vectors)
                .zip(&nearest)
                .map(|(((memory, _), vector), nearest)| {
                    let record = &memory.record;
                    let context = KeyContextTexts {
                        nearest_words: nearest,
                        ..KeyContextTexts::default()
                    };
                    let key = keys::lexical_key(record, context, self.scheme);
                    Point {
                        id: record.id,
                        vector,
                        lexical: self.lexical.weighted_document(&key.weighted()),
                        payload: PointPayload::of(record, &store.relative(&memory.path)),
                    }
                })
                .collect();
            self.index.upsert(points)?;
            self.grow_vocabulary(batch.iter().map(|(m, _)| m.record.content.as_str()));
            for ((memory, sha256), nearest) in batch.iter().zip(nearest) {
                let mut entry = SnapshotEntry::of(&memory.record, sha256.clone());
                // Kept for a rewrite of the same text; a turn's are kept with its key.
                if !self.key_reads_context(memory.record.role) {
                    entry.nearest_words = Some(nearest);
                }
                snapshot.insert(store.relative(&memory.path).into_owned(), entry);
            }
            done += batch.len();
            progress(SyncProgress {
                embedded: done,
                to_embed: memories.len(),
            });
        }
        Ok(())
    }

    /// Adds the words of memories just indexed to the vocabulary. New words are embedded
    /// before the vocabulary is locked, so searches do not wait for them. A failure costs
    /// only expansion words, so it is logged, not returned.
    fn grow_vocabulary<'t>(&self, texts: impl Iterator<Item = &'t str>) {
        let Some(vocabulary) = self.vocabulary else {
            return;
        };
        let texts: Vec<&str> = texts.collect();
        let mut words = self.ahead.map(|a| a.words.clone()).unwrap_or_default();
        // Words first seen since they were embedded ahead (another writer's) are embedded now.
        let known: HashSet<&str> = words.iter().map(|(w, _)| w.as_str()).collect();
        match self.embed_unknown_words_except(&texts, &known) {
            Some(more) => words.extend(more),
            None => return,
        }
        vocabulary
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .count(&texts, words);
    }

    /// The words of `texts` the vocabulary lacks, embedded; `None` (logged) when the
    /// embedder fails, which costs only expansion words.
    fn embed_unknown_words(&self, texts: &[&str]) -> Option<Vec<(String, Vec<f32>)>> {
        self.embed_unknown_words_except(texts, &HashSet::new())
    }

    fn embed_unknown_words_except(
        &self,
        texts: &[&str],
        known: &HashSet<&str>,
    ) -> Option<Vec<(String, Vec<f32>)>> {
        let vocabulary = self.vocabulary?;
        let mut unknown = vocabulary
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .unknown_words(texts, self.lexical);
        unknown.retain(|w| !known.contains(w.as_str()));
        match self.embedder.embed(&unknown) {
            Ok(vectors) => Some(unknown.into_iter().zip(vectors).collect()),
            Err(e) => {
                warn!("the vocabulary did not take the new memories' words: {e}");
                None
            }
        }
    }

    /// Whether the lexical key of a memory with `role` reads other files (a turn's
    /// neighbours and facts), so that `refresh_keys` builds it.
    fn key_reads_context(&self, role: Role) -> bool {
        matches!(role, Role::User | Role::Assistant) && self.scheme.reads_context()
    }

    /// What document expansion adds to each memory's key: the model's words nearest its
    /// dense vector, that its dense key does not say already (none where no vector is
    /// given), separated by spaces.
    fn nearest_words(&self, memories: &[(&MemoryRecord, Option<&[f32]>)]) -> Vec<String> {
        let mut nearest = vec![String::new(); memories.len()];
        let Some(words) = self.model_words else {
            return nearest;
        };
        let kept = self.ahead.map(|a| &a.nearest);
        let owns: Vec<(usize, &[f32], SparseVector)> = memories
            .iter()
            .enumerate()
            .filter_map(|(at, (record, vector))| {
                let vector = (*vector)?;
                let key = keys::dense_key(record);
                if let Some(words) = kept.and_then(|k| k.get(&key)) {
                    nearest[at].clone_from(words);
                    return None;
                }
                Some((at, vector, self.lexical.query(&key)))
            })
            .collect();
        let queries: Vec<(&[f32], &SparseVector)> =
            owns.iter().map(|(_, vector, own)| (*vector, own)).collect();
        let found = words.nearest_each(&queries, self.scheme.document_words);
        for ((at, _, _), words) in owns.iter().zip(found) {
            nearest[*at] = words.join(" ");
        }
        nearest
    }

    /// The dense vectors of `records`, when document expansion needs them: as the embedder
    /// made them lately (the vectors their nearest words were found for ahead), else as
    /// the index holds them.
    fn dense_vectors(
        &self,
        records: &[&MemoryRecord],
    ) -> Result<HashMap<MemoryId, Vec<f32>>, EngineError> {
        if self.model_words.is_none() {
            return Ok(HashMap::new());
        }
        let mut vectors = HashMap::new();
        let mut stored = Vec::new();
        for record in records {
            match self.embedder.recently_embedded(&keys::dense_key(record)) {
                Some(vector) => drop(vectors.insert(record.id, vector)),
                None => stored.push(record.id),
            }
        }
        if !stored.is_empty() {
            let hits = self.index.retrieve(&stored, true)?;
            vectors.extend(
                hits.into_iter()
                    .filter_map(|hit| Some((hit.id, hit.vector?))),
            );
        }
        Ok(vectors)
    }

    /// Brings the index in step with the files. See the module docs.
    ///
    /// Files whose bytes hash to what the snapshot recorded are not even parsed, which keeps a
    /// sync with nothing to do fast.
    pub fn sync(
        &self,
        snapshot: &mut Snapshot,
        progress: &mut dyn FnMut(SyncProgress),
    ) -> Result<SyncReport, EngineError> {
        let (store, index) = (self.store, self.index);
        // The snapshot on disk may lag the index (it is written shortly after each change), or
        // the index may have lost points: what counts is what the index holds now.
        let indexed: HashSet<MemoryId> = index.ids()?.into_iter().collect();
        if snapshot.files().is_empty() {
            // Everything is about to be keyed with the current scheme.
            snapshot.key_scheme = self.scheme_description.clone();
        }
        let started = std::time::Instant::now();
        let mut report = SyncReport::default();
        let mut seen_ids: HashMap<MemoryId, PathBuf> = HashMap::new();
        let mut live_paths = HashSet::new();
        let mut to_embed = Vec::new();
        let mut sources = Vec::new();
        for path in store.memory_files() {
            let bytes = match read_file(store, &path) {
                FileRead::Bytes(bytes) => bytes,
                // Deleted between listing and reading: it is simply gone.
                FileRead::Gone => continue,
                FileRead::Refused(reason) => {
                    warn!("skipping {reason}");
                    report.skipped.push(reason);
                    continue;
                }
            };
            let key = store.relative(&path).into_owned();
            let sha256 = sha256_hex(&bytes);
            let known = snapshot
                .files()
                .get(&key)
                .filter(|e| e.sha256 == sha256 && indexed.contains(&e.id));
            let record_id = match known {
                Some(entry) if entry.role == Role::Memory && !snapshot.fact_sources => {
                    // A snapshot from before facts recorded their source turn: read it from
                    // the file, whose point stays as it is.
                    let id = entry.id;
                    sources.push((key.clone(), source_of(store, &path, &bytes)));
                    id
                }
                Some(entry) => entry.id,
                None => match store.parse(&path, &bytes) {
                    Ok(memory) => {
                        let id = memory.record.id;
                        if !seen_ids.contains_key(&id) {
                            to_embed.push((memory, sha256));
                        }
                        id
                    }
                    Err(err) => {
                        warn!("skipping {}: {err}", path.display());
                        report.skipped.push(err.to_string());
                        continue;
                    }
                },
            };
            if let Some(first) = seen_ids.get(&record_id) {
                let reason = mnemo_store::duplicate_id(&path, record_id, first);
                warn!("skipping {reason}");
                report.skipped.push(reason);
                continue;
            }
            seen_ids.insert(record_id, path);
            live_paths.insert(key);
            report.files += 1;
        }

        let gone: Vec<String> = snapshot
            .files()
            .keys()
            .filter(|k| !live_paths.contains(*k))
            .cloned()
            .collect();
        for key in &gone {
            snapshot.remove(key);
        }
        // Points of files that are gone, of ids edited away, or that the snapshot never saw.
        let stale_ids: Vec<MemoryId> = indexed
            .iter()
            .filter(|id| !seen_ids.contains_key(id))
            .copied()
            .collect();
        index.delete(&stale_ids)?;
        report.deleted = stale_ids.len();
        if !stale_ids.is_empty() {
            // The index changed: the next flush makes that durable.
            snapshot.mark_dirty();
        }
        for (key, source_id) in sources {
            snapshot.set_source(&key, source_id);
        }
        if !snapshot.fact_sources {
            snapshot.fact_sources = true;
            snapshot.mark_changed();
        }
        report.embedded = to_embed.len();
        self.index_memories(snapshot, &to_embed, progress)?;
        self.refresh_keys(snapshot, &Timeline::build(snapshot), |_| false)?;
        report.seconds = started.elapsed().as_secs_f64();
        if report.embedded > 0 || report.deleted > 0 {
            info!(
                embedded = report.embedded,
                deleted = report.deleted,
                files = report.files,
                "index synchronised with the files"
            );
        }
        Ok(report)
    }

    /// Brings the index in step with one file that may have been created, changed or
    /// removed, given what [`read_file`] found there (read before the snapshot lock was
    /// taken). Paths that are not memory files (tombstones, temporary files, other folders)
    /// are ignored.
    pub fn sync_path(
        &self,
        snapshot: &mut Snapshot,
        path: &Path,
        read: FileRead,
    ) -> Result<PathChange, EngineError> {
        let store = self.store;
        let Ok((location, _)) = store.locate(path) else {
            return Ok(PathChange::Ignored);
        };
        if location.tombstone {
            return Ok(PathChange::Ignored);
        }
        let key = store.relative(path).into_owned();
        let parsed = match read {
            FileRead::Bytes(bytes) => {
                let sha256 = sha256_hex(&bytes);
                if snapshot
                    .files()
                    .get(&key)
                    .is_some_and(|e| e.sha256 == sha256)
                {
                    return Ok(PathChange::Unchanged);
                }
                match store.parse(path, &bytes) {
                    Ok(memory) => Some((memory, sha256)),
                    Err(err) => {
                        warn!("skipping {err}");
                        None
                    }
                }
            }
            FileRead::Gone => None,
            FileRead::Refused(reason) => {
                warn!("skipping {reason}");
                None
            }
        };
        let old = snapshot.remove(&key);
        let new_id = parsed.as_ref().map(|(m, _)| m.record.id);
        if let Some(old) = &old {
            let still_used = snapshot.path_of(old.id).is_some();
            if Some(old.id) != new_id && !still_used {
                self.index.delete(&[old.id])?;
            }
        }
        match parsed {
            Some(memory) => {
                if let Some(other) = new_id.and_then(|id| snapshot.path_of(id)) {
                    let first = store.root().join(other);
                    let id = memory.0.record.id;
                    warn!("skipping {}", mnemo_store::duplicate_id(path, id, &first));
                    return Ok(PathChange::Ignored);
                }
                self.index_memories(snapshot, &[memory], &mut |_| {})?;
                Ok(PathChange::Indexed)
            }
            None => Ok(if old.is_some() {
                PathChange::Removed
            } else {
                PathChange::Ignored
            }),
        }
    }
}

impl Indexer<'_> {
    /// Rebuilds the lexical vectors whose key context is out of date: turns whose neighbours
    /// or facts changed (added, edited, removed), turns indexed from their file alone, and
    /// every memory when the key scheme changed. Looks only at the conversations changed
    /// since their keys were last checked ([`Snapshot::take_keys_pending`]), but those
    /// `later` holds (a pass whose writes leave the keys to its end). Returns how many were
    /// rebuilt. `timeline` must be built from `snapshot` as it is (this changes nothing it
    /// depends on).
    pub(crate) fn refresh_keys(
        &self,
        snapshot: &mut Snapshot,
        timeline: &Timeline,
        later: impl Fn(&ConversationId) -> bool,
    ) -> Result<usize, EngineError> {
        debug_assert_eq!(timeline.generation, snapshot.generation);
        let rebuild_all = snapshot.key_scheme != self.scheme_description;
        let pending = snapshot.take_keys_pending(later);
        let conversations = match rebuild_all {
            true => snapshot.conversations().cloned().collect(),
            false => pending,
        };
        let mut stale = Vec::new();
        for conversation in &conversations {
            self.stale_keys(snapshot, timeline, conversation, rebuild_all, &mut stale);
        }
        if let Err(e) = self.rebuild_keys(snapshot, &stale) {
            // Checked again at the next write: what was rebuilt is recorded, the rest is not.
            snapshot.keys_pending_again(conversations);
            return Err(e);
        }
        if rebuild_all {
            snapshot.key_scheme = self.scheme_description.clone();
            snapshot.mark_dirty();
        }
        Ok(stale.len())
    }

    /// Adds to `stale` the entries of `conversation` whose lexical key is out of date (all
    /// of them with `rebuild_all`), each with the context it is to be built from.
    fn stale_keys(
        &self,
        snapshot: &Snapshot,
        timeline: &Timeline,
        conversation: &ConversationId,
        rebuild_all: bool,
        stale: &mut Vec<StaleKey>,
    ) {
        // A key reads only turns and facts of its own conversation.
        let entries = || snapshot.entries_of(conversation.as_str());
        let file_of: HashMap<MemoryId, (&str, &str)> = entries()
            .map(|(path, e)| (e.id, (path.as_str(), e.sha256.as_str())))
            .collect();
        let file = |id: MemoryId| file_of.get(&id).copied();
        for (path, entry) in entries() {
            if !self.key_reads_context(entry.role) {
                if rebuild_all || entry.key_context.is_some() {
                    stale.push(StaleKey {
                        path: path.clone(),
                        expected: None,
                        files: ContextFiles::default(),
                        nearest_words: None,
                    });
                }
                continue;
            }
            let facts: &[MemoryId] = if self.scheme.facts {
                timeline.facts(entry.id)
            } else {
                &[]
            };
            // The (path, hash) of each file the key reads; ids with no indexed file are skipped.
            let files = || {
                let (before, after) = timeline.around(entry.id, self.scheme.neighbour_turns);
                (
                    before.filter_map(file),
                    after.filter_map(file),
                    facts.iter().copied().filter_map(file),
                )
            };
            let current = entry.key_context.as_ref().is_some_and(|c| {
                let (before, after, facts) = files();
                same_hashes(&c.before, before)
                    && same_hashes(&c.after, after)
                    && same_hashes(&c.facts, facts)
            });
            if rebuild_all || !current {
                let (before, after, facts) = files();
                let (before, after, facts): (Vec<_>, Vec<_>, Vec<_>) =
                    (before.collect(), after.collect(), facts.collect());
                let hashes = |files: &[(&str, &str)]| -> Vec<String> {
                    files.iter().map(|(_, sha)| (*sha).to_owned()).collect()
                };
                let paths = |files: &[(&str, &str)]| -> Vec<String> {
                    files.iter().map(|(path, _)| (*path).to_owned()).collect()
                };
                let expected = KeyContext {
                    before: hashes(&before),
                    after: hashes(&after),
                    facts: hashes(&facts),
                };
                let files = ContextFiles {
                    before: paths(&before),
                    after: paths(&after),
                    facts: paths(&facts),
                };
                stale.push(StaleKey {
                    path: path.clone(),
                    expected: Some(expected),
                    files,
                    nearest_words: self.kept_words(entry, rebuild_all).map(str::to_owned),
                });
            }
        }
    }

    /// Builds the lexical keys of `stale` again, and records what each was built from.
    fn rebuild_keys(&self, snapshot: &mut Snapshot, stale: &[StaleKey]) -> Result<(), EngineError> {
        let store = self.store;
        // Each turn is read once per pass, though it is its neighbours' neighbour too.
        let mut records: HashMap<String, Option<MemoryRecord>> = HashMap::new();
        let mut read = |path: &str| -> Option<MemoryRecord> {
            records
                .entry(path.to_owned())
                .or_insert_with(|| store.read(Path::new(path)).ok().map(|m| m.record))
                .clone()
        };
        for batch in stale.chunks(256) {
            // A file that vanished or broke since the snapshot was written: the next sync
            // deals with it; its key stays as it is.
            let records: Vec<(&StaleKey, MemoryRecord)> = batch
                .iter()
                .filter_map(|stale| Some((stale, read(&stale.path)?)))
                .collect();
            let nearest = self.nearest_words_of(&records)?;
            let mut updates = Vec::with_capacity(batch.len());
            for ((stale, record), nearest) in records.iter().zip(&nearest) {
                let mut contents = |paths: &[String]| -> Vec<String> {
                    paths
                        .iter()
                        .filter_map(|p| read(p))
                        .map(|r| r.content)
                        .collect()
                };
                let files = &stale.files;
                let (before, after) = (contents(&files.before), contents(&files.after));
                let facts = contents(&files.facts);
                let context = KeyContextTexts {
                    before: &before,
                    after: &after,
                    facts: &facts,
                    nearest_words: nearest,
                };
                let key = keys::lexical_key(record, context, self.scheme);
                updates.push((record.id, self.lexical.weighted_document(&key.weighted())));
            }
            self.index.set_lexical(updates)?;
            for ((stale, _), nearest) in records.iter().zip(nearest) {
                snapshot.set_key_built(&stale.path, stale.expected.clone(), nearest);
            }
        }
        Ok(())
    }

    /// Whether `words`, read from the snapshot, could be a memory's nearest model words
    /// under this scheme: no more of them than it takes, each a word the model has.
    fn could_be_nearest_words(&self, words: &str) -> bool {
        let Some(model_words) = self.model_words else {
            return words.is_empty();
        };
        let words: Vec<&str> = words.split_whitespace().collect();
        words.len() <= self.scheme.document_words && words.iter().all(|w| model_words.has(w))
    }

    /// The nearest model words of each stale key's memory: as its snapshot entry recorded
    /// them, else found from its dense vector. They depend on nothing but the memory's text
    /// (and the key scheme), while its key is built again whenever a neighbour changes: a
    /// conversation that evicts its oldest turns rebuilds the keys of the turns after them.
    fn nearest_words_of(
        &self,
        records: &[(&StaleKey, MemoryRecord)],
    ) -> Result<Vec<String>, EngineError> {
        let unknown: Vec<&MemoryRecord> = records
            .iter()
            .filter(|(stale, _)| stale.nearest_words.is_none())
            .map(|(_, record)| record)
            .collect();
        let vectors = self.dense_vectors(&unknown)?;
        let needing_words: Vec<(&MemoryRecord, Option<&[f32]>)> = unknown
            .iter()
            .map(|r| (*r, vectors.get(&r.id).map(Vec::as_slice)))
            .collect();
        let mut found = self.nearest_words(&needing_words).into_iter();
        Ok(records
            .iter()
            .map(|(stale, _)| match &stale.nearest_words {
                Some(words) => words.clone(),
                None => found.next().unwrap_or_default(),
            })
            .collect())
    }
}

/// A memory whose lexical key is to be built again.
struct StaleKey {
    /// Its file.
    path: String,
    /// What the key will have read (`None`: the file alone).
    expected: Option<KeyContext>,
    /// The files it reads.
    files: ContextFiles,
    /// Its nearest model words, when its snapshot entry has them for the current scheme.
    nearest_words: Option<String>,
}

/// Whether the hashes a key was built from are those of `files` (path, hash), in order.
fn same_hashes<'a>(recorded: &[String], files: impl Iterator<Item = (&'a str, &'a str)>) -> bool {
    recorded
        .iter()
        .map(String::as_str)
        .eq(files.map(|(_, sha)| sha))
}

/// The files a stale turn's key is rebuilt from, besides its own.
#[derive(Default)]
struct ContextFiles {
    /// The turns before, nearest first.
    before: Vec<String>,
    /// The turns after, nearest first.
    after: Vec<String>,
    facts: Vec<String>,
}

/// The `source_id` of the fact in the file at `path`, whose bytes are `bytes`; `None` when
/// it names none or no longer parses (the next change to the file re-indexes it).
fn source_of(store: &FileStore, path: &Path, bytes: &[u8]) -> Option<MemoryId> {
    store.parse(path, bytes).ok()?.record.source_id
}

/// A memory file's bytes as the index reads them, or why there are none.
#[derive(Debug)]
pub enum FileRead {
    /// The file's bytes (a regular file within the size limit).
    Bytes(Vec<u8>),
    /// No file there (deleted since it was listed or reported).
    Gone,
    /// Not read: a link, a special file, too large, unreadable; says which file and why.
    Refused(String),
}

/// Reads a memory file as untrusted input ([`FileStore::read_bytes`]): never blocks on a
/// FIFO, never follows a link, never reads more than a memory file may hold, so it is safe
/// to call anywhere, and callers do it before taking the snapshot lock.
pub fn read_file(store: &FileStore, path: &Path) -> FileRead {
    match store.read_bytes(path) {
        Ok(bytes) => FileRead::Bytes(bytes),
        Err(mnemo_store::StoreError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            FileRead::Gone
        }
        Err(e) => FileRead::Refused(e.to_string()),
    }
}

/// What happened to one path the watcher reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathChange {
    /// The file is new or changed and is now indexed as it reads.
    Indexed,
    /// The file is gone (or no longer reads as a memory), and its point left the index.
    Removed,
    /// The file's bytes are what the index already holds; nothing was done.
    Unchanged,
    /// Not a live memory file (a tombstone, a temporary file, another folder), or one whose id
    /// another file already has; the index was left alone.
    Ignored,
}
