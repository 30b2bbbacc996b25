//! The write path: turning what the user said into durable facts.
//!
//! After a turn (in the background) or on [`MemoryClient::add`], for one conversation at a
//! time:
//! 1. **Extract** 0-3 standalone facts from the user's message (LLM, JSON schema). Questions
//!    and chit-chat give none. `add` skips this: its texts are facts already.
//! 2. **Ground** each fact in the user's words ([`crate::text::grounding`]): said by the
//!    user, of the same person, and not only denied or supposed.
//! 3. **Reconcile** the new facts with the nearest existing facts about the same people: the
//!    LLM answers ADD / UPDATE / DELETE / NONE per memory, existing memories numbered 0.. so
//!    it cannot invent ids ([`crate::write::prompts`]). UPDATE writes the new fact under a new id and
//!    tombstones the old file with `replaced_by`; DELETE tombstones. An answer is mended where
//!    it can be and asked for again where it cannot be read; only then are the facts added as
//!    they are.
//! 4. **Ask about a change**: when the message signals one ([`crate::text::changes`]), the
//!    LLM is asked whether each new fact replaces the nearest old one about the same person.
//! 5. **Mark conflicts**: each older live fact a new fact may contradict (the same
//!    person, near in meaning, each saying something the other does not) names the new one
//!    in `conflicts_with`: the later holds until a person resolves the pair ([`conflicts`]).
//!    Nothing is retired for it.
//! 6. **Summarise**: the rolling summary is rewritten from the previous one plus the changes,
//!    checked sentence by sentence ([`crate::text::summary_check`]), and not written at all
//!    when nothing changed.
//! 7. **Evict** the oldest facts and turns beyond `max_entries` (summaries are exempt).
//! 8. **Commit** to git, one commit per pass, naming the conversation and what changed. A
//!    failed commit is logged; the next commit stages everything, so it carries the changes.
//!
//! The steps run on a `WritePath`, borrowed from the engine for one pass (as a search
//! runs on the read path's `ReadPath`); `MemoryClient::add` and a chat turn's queued pass
//! ([`queue`]), which stores the assistant's turn on it first, are the two ways in.
//!
//! Nothing here can lose an acknowledged memory: turns are on disk before this runs, new
//! facts are written before old ones are tombstoned, and tombstones keep every word.

pub mod conflicts;
pub mod prompts;
pub mod queue;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemo_core::{
    stored_turn, Config, ConversationId, MemoryId, MemoryRecord, Metadata, Role, WriteRule,
    MAX_MEMORY_BYTES,
};
use mnemo_index::{Condition, Filter, PointPayload, Query, QueryVector};
use mnemo_llm::LlmClient;
use mnemo_store::{FileStore, StoredMemory};
use tracing::{debug, info, warn};

use crate::api_types::{AddResult, Memory, Updated};
use crate::blocking::blocking;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::text::changes;
use crate::text::subjects::subject_of;
use crate::text::{clauses, grounding, low_information, summary_check};
use prompts::{Earlier, Operation};

/// Existing facts closer than this (cosine) to a new fact are shown to the reconciler; less
/// related ones would only tempt a small model into odd deletions.
const RELATED: f32 = 0.4;
/// Existing facts at least this close (cosine) to a new fact are asked about when the
/// message signals a change: a new job and the old one are further apart than most
/// related facts.
const CHANGE_CANDIDATE: f32 = 0.3;
/// Pairs of a new and an old fact asked about, at most, per pass.
const CHANGE_QUESTIONS: usize = 2;
/// Existing facts considered per new fact, and in all.
const NEAREST_PER_FACT: usize = 5;
const NEAREST_IN_ALL: usize = 10;
/// Most texts one add takes: each is embedded and reconciled while the conversation's write
/// lock is held, so a larger batch would stall every other write to it.
pub const MAX_TEXTS_PER_ADD: usize = 100;
/// Turns looked at, going back from a user's message, for the exchange it replies to.
const EARLIER_TURNS: usize = 4;

/// An older fact a pass marked as contradicted by one of its new facts.
#[derive(Debug, Clone, PartialEq)]
pub struct Contested {
    /// The older fact.
    pub earlier: MemoryId,
    /// Its text.
    pub earlier_text: String,
    /// The new fact that holds over it.
    pub later: MemoryId,
    /// The cosine of their embeddings.
    pub similarity: f32,
}

/// What one pass of the write path did.
#[derive(Debug, Clone)]
pub struct WriteReport {
    /// The conversation the pass wrote to.
    pub conversation: ConversationId,
    /// Facts extracted from the message (before reconciliation).
    pub extracted: Vec<String>,
    /// Facts written (new ones, and the new versions of updated ones).
    pub added: Vec<StoredMemory>,
    /// (old id, new id) of updated facts.
    pub updated: Vec<(MemoryId, MemoryId)>,
    /// Facts tombstoned because the reconciler said they no longer hold.
    pub deleted: Vec<MemoryId>,
    /// The texts of the facts this pass updated or deleted: what the rolling summary must
    /// no longer say.
    pub retracted: Vec<String>,
    /// Older live facts this pass marked as contradicted by one of its new facts
    /// (`write::conflicts`). The summary no longer states them; the facts stay live until a
    /// person resolves the conflict.
    pub contested: Vec<Contested>,
    /// Sentences cut from the rewritten summary because they still stated a retracted fact,
    /// or gave someone else's trait to the user (`crate::text::summary_check`).
    pub summary_cuts: Vec<String>,
    /// Facts and turns tombstoned beyond `max_entries`.
    pub evicted: usize,
    /// Whether the rolling summary was rewritten.
    pub summary_updated: bool,
    /// New facts not written because the reconciler found them already known (NONE). A fact
    /// it answered with a deletion retracts what is in `deleted`; every other new fact is
    /// written.
    pub not_stored: Vec<String>,
    /// Extracted facts not stored because the user's message does not support them, each
    /// with the reason (`crate::text::grounding`).
    pub ungrounded: Vec<(String, String)>,
    /// Why the LLM's answer was not used (or not wholly), when it was not.
    pub fallback: Option<String>,
    /// Parts of the reconciler's answer that could not be used as they were, and what
    /// became of each (`prompts::Checked::repairs`), and whether it was asked again.
    pub repairs: Vec<String>,
    /// The git commit, when one was made.
    pub commit: Option<String>,
    /// Time spent waiting for the LLM.
    pub llm_time: Duration,
    /// Time spent in the engine itself (files, embedding, index, git), LLM calls excluded.
    pub engine_time: Duration,
}

impl AddResult {
    /// What `report` (an add's pass) changed, as mnemo shows it.
    pub fn of(report: WriteReport, store: &FileStore) -> Self {
        Self {
            added: report.added.iter().map(|m| Memory::of(m, store)).collect(),
            updated: report
                .updated
                .iter()
                .map(|&(old, new)| Updated { old, new })
                .collect(),
            conversation_id: report.conversation,
            deleted: report.deleted,
            not_stored: report.not_stored,
            commit: report.commit,
        }
    }
}

impl WriteReport {
    fn new(conversation: &ConversationId) -> Self {
        Self {
            conversation: conversation.clone(),
            extracted: Vec::new(),
            added: Vec::new(),
            updated: Vec::new(),
            deleted: Vec::new(),
            retracted: Vec::new(),
            contested: Vec::new(),
            summary_cuts: Vec::new(),
            evicted: 0,
            summary_updated: false,
            not_stored: Vec::new(),
            ungrounded: Vec::new(),
            fallback: None,
            repairs: Vec::new(),
            commit: None,
            llm_time: Duration::ZERO,
            engine_time: Duration::ZERO,
        }
    }

    fn changed_facts(&self) -> bool {
        !self.added.is_empty() || !self.updated.is_empty() || !self.deleted.is_empty()
    }

    /// "trip-japan: 2 turns, +1 fact, 1 updated, summary" — what a commit says.
    fn commit_message(&self, turns: usize) -> String {
        let mut parts = Vec::new();
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        if turns > 0 {
            parts.push(plural(turns, "turn", "turns"));
        }
        let new = self.added.len().saturating_sub(self.updated.len());
        if new > 0 {
            parts.push(format!("+{}", plural(new, "fact", "facts")));
        }
        if !self.updated.is_empty() {
            parts.push(format!("{} updated", self.updated.len()));
        }
        if !self.deleted.is_empty() {
            parts.push(format!("{} deleted", self.deleted.len()));
        }
        if !self.contested.is_empty() {
            parts.push(plural(self.contested.len(), "conflict", "conflicts"));
        }
        if self.evicted > 0 {
            parts.push(format!("{} evicted", self.evicted));
        }
        if self.summary_updated {
            parts.push("summary".into());
        }
        if parts.is_empty() {
            parts.push("no change".into());
        }
        format!("{}: {}", self.conversation, parts.join(", "))
    }
}

/// An existing fact shown to the reconciler.
#[derive(Debug, Clone)]
struct ExistingFact {
    id: MemoryId,
    path: std::path::PathBuf,
    content: String,
    /// Its best cosine to the texts it was found for.
    score: f32,
}

/// The metadata key, on a fact extracted from a turn, of the user's words it stands on.
pub const GROUNDED_ON: &str = "grounded_on";
/// Most words recorded under [`GROUNDED_ON`]: a fact is a sentence, and metadata is bounded.
const MAX_GROUNDED_WORDS: usize = 32;

/// Where a pass's new facts come from: the user's turn (its id and words) for facts
/// extracted from it, and metadata every fact gets.
#[derive(Debug, Clone)]
struct Origin {
    source: Option<(MemoryId, String)>,
    /// The user's message before the source turn, when the extractor was shown it: the
    /// user's words too, so it grounds facts as well.
    earlier: String,
    metadata: Metadata,
}

/// The write wing's handle on the engine ([`Engine::write`]).
#[derive(Clone)]
pub(crate) struct WriteWing {
    pub(crate) engine: Arc<Engine>,
}

impl Engine {
    /// Lends the write wing.
    pub(crate) fn write(self: &Arc<Self>) -> WriteWing {
        WriteWing {
            engine: self.clone(),
        }
    }
}

impl WriteWing {
    /// The write path, borrowed for one pass.
    pub(crate) fn write_path(&self) -> WritePath<'_> {
        WritePath {
            engine: &self.engine,
        }
    }

    pub(crate) async fn learn_from_turn(
        &self,
        conversation: &ConversationId,
        user_turn: Option<&StoredMemory>,
        turns_written: usize,
    ) -> Result<WriteReport, EngineError> {
        self.write_path()
            .learn_from_turn(conversation, user_turn, turns_written)
            .await
    }

    pub(crate) async fn extract_facts(
        &self,
        conversation: &ConversationId,
        message: &str,
    ) -> Result<(Vec<String>, WriteReport), EngineError> {
        self.write_path().extract_facts(conversation, message).await
    }

    pub(crate) async fn add(
        &self,
        texts: Vec<String>,
        conversation: &ConversationId,
    ) -> Result<WriteReport, EngineError> {
        self.add_with_metadata(texts, conversation, Metadata::new())
            .await
    }

    pub(crate) async fn add_with_metadata(
        &self,
        texts: Vec<String>,
        conversation: &ConversationId,
        metadata: Metadata,
    ) -> Result<WriteReport, EngineError> {
        self.write_path()
            .add_with_metadata(texts, conversation, metadata)
            .await
    }

    pub(crate) fn background_tasks(&self) -> usize {
        self.engine.background().len()
    }

    pub(crate) async fn wait_idle(&self) {
        self.wait_idle_for(Duration::MAX).await;
    }

    pub(crate) async fn wait_idle_for(&self, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now().checked_add(grace);
        let mut finished = true;
        // Chats first: a finishing chat queues its write-path pass.
        for tracker in [&self.engine.detached_chats(), &self.engine.background()] {
            tracker.close();
            let wait = tracker.wait();
            finished &= match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, wait).await.is_ok(),
                None => {
                    wait.await;
                    true
                }
            };
            tracker.reopen();
        }
        let snapshot = self.engine.snapshot().clone();
        if let Err(e) = blocking(move || snapshot.flush()).await {
            warn!("cannot write the index snapshot: {e}; trying again later");
        }
        finished
    }
}

/// The write path, borrowed from the engine for one pass: the assistant's turn stored,
/// extraction, grounding, reconciliation, the rules that retract and replace, the summary,
/// eviction and the commit. A chat turn's queued pass ([`queue`]) and
/// [`MemoryClient::add`] run it, as searches run [`crate::retrieval`]'s `ReadPath`.
pub(crate) struct WritePath<'a> {
    engine: &'a Arc<Engine>,
}

impl WritePath<'_> {
    /// Stores the assistant's answer as a turn of `conversation`: the first step of a chat
    /// turn's queued pass. Indexed in the background with the other turns chats wrote, as
    /// the user's turn is: nothing later in the pass reads it from the index.
    pub(crate) async fn store_assistant_turn(
        &self,
        conversation: &ConversationId,
        text: String,
        incomplete: bool,
    ) -> Result<(), EngineError> {
        let mut record =
            MemoryRecord::new(conversation.clone(), Role::Assistant, stored_turn(text));
        if incomplete {
            record.metadata.insert("incomplete".into(), true.into());
        }
        self.engine
            .memories()
            .write_then_index(record)
            .await
            .map(drop)
    }

    /// Writes one record and indexes it, off the async threads.
    async fn write_record(&self, record: MemoryRecord) -> Result<(), EngineError> {
        self.engine
            .blocking(move |engine| engine.write_records(vec![record]))
            .await
            .map(|_| ())
    }

    /// Runs the write path for a turn whose messages are already on disk: extraction from
    /// the user's message, then reconciliation, summary, eviction and a commit.
    pub(crate) async fn learn_from_turn(
        &self,
        conversation: &ConversationId,
        user_turn: Option<&StoredMemory>,
        turns_written: usize,
    ) -> Result<WriteReport, EngineError> {
        let _turn = self
            .engine
            .conversation_lock(conversation)
            .lock_owned()
            .await;
        // A slot for the LLM work, taken once this conversation's turn has come.
        let _slot = self.engine.queue().running.clone().acquire_owned().await;
        let mut report = WriteReport::new(conversation);
        let started = Instant::now();
        let message = user_turn.map_or("", |t| t.record.content.as_str());
        let earlier = match user_turn {
            Some(turn)
                if self.engine.llm().is_some()
                    && (!clauses::names_the_speaker(message) || changes::repairs(message)) =>
            {
                self.earlier_exchange(turn).await?
            }
            _ => Earlier::default(),
        };
        if let Some(llm) = &self.engine.llm() {
            let config = &self.engine.config();
            if let Err(e) = extract(llm, message, &earlier, config, &mut report).await {
                warn!(conversation = %conversation, "fact extraction failed: {e}");
            }
        }
        let earlier_words = earlier.user.unwrap_or_default();
        let facts = self.grounded(message, &earlier_words, &mut report);
        let origin = Origin {
            source: user_turn.map(|t| (t.record.id, t.record.content.clone())),
            earlier: earlier_words,
            metadata: Metadata::new(),
        };
        self.reconcile_and_apply(conversation, facts, &origin, &mut report)
            .await?;
        let config = &self.engine.config();
        if config.fact_grounding && config.applies(WriteRule::ChangeQuestion) {
            self.ask_what_the_change_replaces(conversation, message, &mut report)
                .await?;
        }
        self.finish_pass(conversation, turns_written, &mut report, started)
            .await?;
        Ok(report)
    }

    /// When the message signals a change ([`changes::signals_a_change`]: a repair, "now",
    /// "moved", a stop), asks the LLM, for each fact this pass added that replaced nothing,
    /// whether it replaces the live fact about the same person closest to it
    /// ([`prompts::replaces`], shown the message; at cosine [`CHANGE_CANDIDATE`] or more, the
    /// [`CHANGE_QUESTIONS`] closest pairs), and tombstones each it says is replaced, with
    /// `replaced_by` the new fact. "Things changed, the bike lives in my hallway now"
    /// replaces "The user keeps a bike in a garage." in words no rule can match. Without a
    /// signal the question is not asked: a small model answers it "yes" too readily for two
    /// facts that both hold, and a true fact is lost.
    async fn ask_what_the_change_replaces(
        &self,
        conversation: &ConversationId,
        message: &str,
        report: &mut WriteReport,
    ) -> Result<(), EngineError> {
        let Some(llm) = &self.engine.llm() else {
            return Ok(());
        };
        if !changes::signals_a_change(message) {
            return Ok(());
        }
        let this_pass: std::collections::HashSet<MemoryId> = report
            .added
            .iter()
            .map(|m| m.record.id)
            .chain(report.updated.iter().flat_map(|(old, new)| [*old, *new]))
            .chain(report.deleted.iter().copied())
            .collect();
        let replacing: std::collections::HashSet<MemoryId> =
            report.updated.iter().map(|(_, new)| *new).collect();
        let mut pairs: Vec<(ExistingFact, MemoryId, String)> = Vec::new();
        for new in report
            .added
            .iter()
            .filter(|m| !replacing.contains(&m.record.id))
        {
            let (conv, text) = (conversation.clone(), vec![new.record.content.clone()]);
            let near = self
                .engine
                .blocking(move |engine| engine.nearest_facts(&conv, &text, CHANGE_CANDIDATE))
                .await?;
            let person = subject_of(&new.record.content);
            let closest = near
                .into_iter()
                .filter(|old| !this_pass.contains(&old.id))
                .filter(|old| subject_of(&old.content).same_person(&person))
                .max_by(|a, b| a.score.total_cmp(&b.score));
            pairs.extend(closest.map(|old| (old, new.record.id, new.record.content.clone())));
        }
        pairs.sort_by(|a, b| b.0.score.total_cmp(&a.0.score));
        let mut asked = std::collections::HashSet::new();
        pairs.retain(|(old, _, _)| asked.insert(old.id));
        for (old, new_id, new_text) in pairs.into_iter().take(CHANGE_QUESTIONS) {
            let (messages, schema) = prompts::replaces(message, &old.content, &new_text);
            let call = Instant::now();
            let answer = llm
                .complete_json::<prompts::Replaces>(messages, &schema)
                .await;
            report.llm_time += call.elapsed();
            match answer {
                Ok(prompts::Replaces { replaces: true }) => {
                    info!(conversation = %conversation, old = %old.content, new = %new_text, "replaced: the user's change");
                    let tombstone = vec![(old.path.clone(), Some(new_id))];
                    self.engine
                        .blocking(move |engine| engine.tombstone(&tombstone))
                        .await?;
                    report.updated.push((old.id, new_id));
                    report.retracted.push(old.content);
                }
                Ok(_) => {
                    debug!(conversation = %conversation, old = %old.content, new = %new_text, "kept: the model says both hold")
                }
                Err(e) => {
                    warn!(conversation = %conversation, "could not ask whether a fact replaces another: {e}")
                }
            }
        }
        Ok(())
    }

    /// The facts a pass of the write path would draw from the user's `message` in
    /// `conversation` (extraction, then grounding), without writing anything: the facts, and
    /// a report with what was extracted and refused. What `mnemo eval locomo --observations
    /// extracted` measures the read path with.
    pub(crate) async fn extract_facts(
        &self,
        conversation: &ConversationId,
        message: &str,
    ) -> Result<(Vec<String>, WriteReport), EngineError> {
        let llm = self.engine.llm().as_ref().ok_or(EngineError::NoUpstream)?;
        let mut report = WriteReport::new(conversation);
        let config = &self.engine.config();
        extract(llm, message, &Earlier::default(), config, &mut report).await?;
        let facts = self.grounded(message, "", &mut report);
        Ok((facts, report))
    }

    /// The exchange before `turn` in its session (the assistant's answer `turn` replies to,
    /// and the user's message before that), for an extractor reading a message that leans on
    /// it ("It's green."). Turns written in the same millisecond as `turn` (its own answer,
    /// stored with it) are not before it.
    async fn earlier_exchange(&self, turn: &StoredMemory) -> Result<Earlier, EngineError> {
        let (id, at) = (turn.record.id, turn.record.created_at);
        self.engine
            .blocking(move |engine| {
                let timeline = engine.timeline();
                let mut before = Vec::new();
                let mut cursor = timeline.neighbours(id).previous;
                while let Some(previous) = cursor.filter(|_| before.len() < EARLIER_TURNS) {
                    before.push(previous);
                    cursor = timeline.neighbours(previous).previous;
                }
                let mut hits = engine.index().retrieve(&before, false)?;
                hits.sort_by_key(|h| before.iter().position(|id| *id == h.id));
                let mut earlier = Earlier::default();
                for hit in hits.into_iter().filter(|h| h.payload.created_at < at) {
                    match hit.payload.role {
                        Role::Assistant
                            if earlier.assistant.is_none() && earlier.user.is_none() =>
                        {
                            earlier.assistant = Some(hit.payload.content)
                        }
                        Role::User if earlier.user.is_none() => {
                            earlier.user = Some(hit.payload.content);
                            break;
                        }
                        _ => {}
                    }
                }
                Ok(earlier)
            })
            .await
    }

    /// The extracted facts the user's words support (all of them with `fact_grounding`
    /// off): `message`, and `earlier` (the user's message before it, when the extractor
    /// was shown it). The others are logged and listed in `report.ungrounded`.
    fn grounded(&self, message: &str, earlier: &str, report: &mut WriteReport) -> Vec<String> {
        let mut facts = Vec::new();
        for fact in report.extracted.clone() {
            if !self.engine.config().fact_grounding {
                facts.push(fact);
                continue;
            }
            let off = &self.engine.config().write_rules_off;
            match grounding::ground_in(&fact, message, earlier).verdict(off) {
                Ok(()) => facts.push(fact),
                Err(why) => {
                    info!(conversation = %report.conversation, fact = %fact, "not stored, not the user's words: {why}");
                    report.ungrounded.push((fact, why));
                }
            }
        }
        facts
    }

    /// [`MemoryClient::add`], with `metadata` on every fact the add writes (a new fact, or the
    /// new version of one it updates), so searches can filter on it.
    pub(crate) async fn add_with_metadata(
        &self,
        texts: Vec<String>,
        conversation: &ConversationId,
        metadata: Metadata,
    ) -> Result<WriteReport, EngineError> {
        let facts: Vec<String> = texts.iter().map(|t| t.trim().to_owned()).collect();
        self.check_new_facts(&facts)?;
        mnemo_core::check_metadata(&metadata).map_err(EngineError::InvalidInput)?;
        let _turn = self
            .engine
            .conversation_lock(conversation)
            .lock_owned()
            .await;
        let mut report = WriteReport {
            extracted: facts.clone(),
            ..WriteReport::new(conversation)
        };
        let started = Instant::now();
        let origin = Origin {
            source: None,
            earlier: String::new(),
            metadata,
        };
        self.reconcile_and_apply(conversation, facts, &origin, &mut report)
            .await?;
        self.finish_pass(conversation, 0, &mut report, started)
            .await?;
        Ok(report)
    }

    /// Refuses an add that could not be acknowledged honestly: empty or oversized texts, or
    /// more texts than one pass may write (or than the conversation may keep, when eviction
    /// would tombstone some of them before the answer).
    fn check_new_facts(&self, facts: &[String]) -> Result<(), EngineError> {
        let invalid = |message: String| Err(EngineError::InvalidInput(message));
        let most = MAX_TEXTS_PER_ADD.min(self.engine.config().max_entries);
        if facts.len() > most {
            return invalid(format!(
                "{} texts in one add; at most {most} are taken at a time (the limit is {MAX_TEXTS_PER_ADD}, or max_entries when lower): send them in several adds",
                facts.len()
            ));
        }
        for (i, fact) in facts.iter().enumerate() {
            if fact.is_empty() {
                return invalid(format!("text {i} is empty"));
            }
            if fact.len() > MAX_MEMORY_BYTES {
                return invalid(format!(
                    "text {i} is {} bytes long; a memory holds at most {MAX_MEMORY_BYTES}",
                    fact.len()
                ));
            }
        }
        Ok(())
    }

    async fn reconcile_and_apply(
        &self,
        conversation: &ConversationId,
        facts: Vec<String>,
        origin: &Origin,
        report: &mut WriteReport,
    ) -> Result<(), EngineError> {
        if facts.is_empty() {
            return Ok(());
        }
        let existing = {
            let (conversation, facts) = (conversation.clone(), facts.clone());
            self.engine
                .blocking(move |engine| engine.nearest_facts(&conversation, &facts, RELATED))
                .await?
        };
        let config = &self.engine.config();
        let rules = config.fact_grounding && config.applies(WriteRule::SamePerson);
        // Only facts about someone a new fact is about: a small model otherwise rewrites the
        // user's news into a fact about their brother, or a partner's into the user's.
        let existing: Vec<ExistingFact> = existing
            .into_iter()
            .filter(|old| {
                let person = subject_of(&old.content);
                !rules || facts.iter().any(|f| subject_of(f).same_person(&person))
            })
            .collect();
        let operations = match (&self.engine.llm(), existing.is_empty()) {
            (Some(llm), false) => {
                let operations = self
                    .ask_reconciler(llm, conversation, &existing, &facts, report)
                    .await;
                let operations = if rules {
                    same_person_changes(operations, &existing, &facts, report)
                } else {
                    operations
                };
                account_for_every_fact(&facts, operations, report)
            }
            _ => facts.iter().cloned().map(Operation::Add).collect(),
        };
        self.apply_operations(conversation, existing, operations, origin, report)
            .await
    }

    /// The reconciler's operations for `facts` against `existing`: its answer, mended where
    /// it can be ([`prompts::Reconciliation::validate`]); an answer that cannot be read is
    /// asked for once more, with the reason. When the LLM fails, or its second answer cannot
    /// be read either, every fact is added as it is (reported in `report.fallback`).
    async fn ask_reconciler(
        &self,
        llm: &LlmClient,
        conversation: &ConversationId,
        existing: &[ExistingFact],
        facts: &[String],
        report: &mut WriteReport,
    ) -> Vec<Operation> {
        let shown: Vec<&str> = existing.iter().map(|f| f.content.as_str()).collect();
        let (mut messages, schema) = prompts::reconciliation(&shown, facts);
        for attempt in 0..2 {
            let call = Instant::now();
            let answer = llm
                .complete_json::<prompts::Reconciliation>(messages.clone(), &schema)
                .await;
            report.llm_time += call.elapsed();
            let why = match answer {
                Ok(answer) => match answer.validate(existing.len()) {
                    Ok(checked) => {
                        for repair in &checked.repairs {
                            warn!(conversation = %conversation, "reconciliation answer mended: {repair}");
                        }
                        report.repairs.extend(checked.repairs);
                        return checked.operations;
                    }
                    Err(why) => why,
                },
                // A transport failure was already retried within the call's deadline.
                Err(e @ mnemo_llm::LlmError::InvalidOutput { .. }) => e.to_string(),
                Err(e) => {
                    report.fallback = Some(e.to_string());
                    break;
                }
            };
            if attempt == 0 {
                warn!(conversation = %conversation, "reconciliation unusable ({why}); asking again");
                report.repairs.push(format!("asked again: {why}"));
                messages.push(prompts::reconciliation_again(&why, existing.len()));
            } else {
                report.fallback = Some(why);
            }
        }
        let why = report.fallback.clone().unwrap_or_default();
        warn!(conversation = %conversation, "reconciliation unusable ({why}); adding the new facts as they are");
        facts.iter().cloned().map(Operation::Add).collect()
    }

    /// Applies `operations` (indices into `existing`) and adds what changed to `report`.
    async fn apply_operations(
        &self,
        conversation: &ConversationId,
        existing: Vec<ExistingFact>,
        operations: Vec<Operation>,
        origin: &Origin,
        report: &mut WriteReport,
    ) -> Result<(), EngineError> {
        if operations.is_empty() {
            return Ok(());
        }
        let conversation = conversation.clone();
        let origin = origin.clone();
        let applied = self
            .engine
            .blocking(move |engine| engine.apply(&conversation, &existing, operations, &origin))
            .await?;
        report.added.extend(applied.added);
        report.updated.extend(applied.updated);
        report.deleted.extend(applied.deleted);
        report.retracted.extend(applied.retracted);
        Ok(())
    }

    /// Summary, eviction and commit: the end of every pass.
    async fn finish_pass(
        &self,
        conversation: &ConversationId,
        turns_written: usize,
        report: &mut WriteReport,
        started: Instant,
    ) -> Result<(), EngineError> {
        self.mark_conflicts(conversation, report).await?;
        if report.changed_facts() && self.engine.config().enable_summarization {
            self.update_summary(conversation, report).await?;
        }
        let conv = conversation.clone();
        // What this pass just acknowledged is never what it evicts.
        let keep: std::collections::HashSet<MemoryId> =
            report.added.iter().map(|m| m.record.id).collect();
        report.evicted = self
            .engine
            .blocking(move |engine| engine.evict(&conv, &keep))
            .await?;
        let message = report.commit_message(turns_written);
        report.commit = self
            .engine
            .blocking(move |engine| Ok(engine.commit(&message)))
            .await?;
        report.engine_time = started.elapsed().saturating_sub(report.llm_time);
        info!(
            conversation = %conversation,
            added = report.added.len(),
            updated = report.updated.len(),
            deleted = report.deleted.len(),
            evicted = report.evicted,
            llm_ms = report.llm_time.as_millis() as u64,
            engine_ms = report.engine_time.as_millis() as u64,
            "memory updated"
        );
        Ok(())
    }

    async fn update_summary(
        &self,
        conversation: &ConversationId,
        report: &mut WriteReport,
    ) -> Result<(), EngineError> {
        let Some(llm) = &self.engine.llm() else {
            return Ok(());
        };
        let previous = {
            let conv = conversation.clone();
            self.engine
                .blocking(move |engine| Ok(engine.summary(&conv)))
                .await?
        };
        let added: Vec<String> = report
            .added
            .iter()
            .map(|m| m.record.content.clone())
            .collect();
        // What a later fact contradicts is, for the summary, as good as retracted.
        let retracted: Vec<String> = report
            .retracted
            .iter()
            .chain(report.contested.iter().map(|c| &c.earlier_text))
            .cloned()
            .collect();
        let (messages, schema) = prompts::summary(previous.as_deref(), &added, &retracted);
        let call = Instant::now();
        let answer = llm
            .complete_json::<prompts::Summary>(messages, &schema)
            .await;
        report.llm_time += call.elapsed();
        let text = match answer {
            // The LLM's text is bounded by its answer only: cut to what a memory holds.
            Ok(s) => mnemo_core::stored_turn(s.summary.trim().to_owned()),
            Err(e) => {
                warn!(conversation = %conversation, "summary not updated: {e}");
                return Ok(());
            }
        };
        let config = &self.engine.config();
        let (text, stale) = if config.applies(WriteRule::SummaryStale) {
            summary_check::without_stale_sentences(&text, &retracted, &added)
        } else {
            (text, Vec::new())
        };
        let text = if stale.is_empty() {
            text
        } else {
            info!(conversation = %conversation, cuts = ?stale, "cut from the summary: they state facts this turn retracted");
            summary_check::with_new_facts(&text, &added)
        };
        report.summary_cuts = stale;
        if text.is_empty() && !report.summary_cuts.is_empty() && previous.is_some() {
            // All it would say was retracted: no summary beats a false one (the old one is
            // kept as a tombstone, and the next pass with news writes a new one).
            let path = self.engine.store().summary_path(conversation);
            self.engine
                .blocking(move |engine| engine.tombstone(&[(path, None)]))
                .await?;
            report.summary_updated = true;
            return Ok(());
        }
        if text.is_empty() || previous.as_deref().map(str::trim) == Some(text.as_str()) {
            return Ok(());
        }
        let mut record = MemoryRecord::new(conversation.clone(), Role::Summary, text);
        record.summary_kind = Some("rolling".into());
        self.write_record(record).await?;
        report.summary_updated = true;
        Ok(())
    }
}

/// Makes the reconciler's answer account for every new fact. A fact it added or updated
/// with the same text is written. The others are explained by its remaining answers, one
/// each, in order: an ADD or UPDATE in other words, a NONE (already known, reported in
/// `report.not_stored`), a DELETE (the fact retracts one). Facts beyond those answers are
/// added as they are, and said so in `report.fallback`: a duplicate can be cleaned up later,
/// a fact dropped behind an acknowledgement cannot (`{"operations": []}` adds every fact).
fn account_for_every_fact(
    facts: &[String],
    mut operations: Vec<Operation>,
    report: &mut WriteReport,
) -> Vec<Operation> {
    let normal = |t: &str| {
        t.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .trim_end_matches(['.', '!'])
            .to_lowercase()
    };
    // More writes than new facts are the model's inventions (and would be spared by this
    // pass's eviction): only as many as there are facts are kept, in order.
    let mut writes = 0;
    operations.retain(|op| match op {
        Operation::Add(_) | Operation::Update(..) => {
            writes += 1;
            writes <= facts.len()
        }
        _ => true,
    });
    if writes > facts.len() {
        warn!(
            answered = writes,
            facts = facts.len(),
            "the reconciler wrote more facts than it was given; the extra ones are dropped"
        );
    }
    let facts_said: std::collections::HashSet<String> = facts.iter().map(|f| normal(f)).collect();
    let mut written = std::collections::HashSet::new();
    let mut others = Vec::new();
    for op in &operations {
        match op {
            Operation::Add(text) | Operation::Update(_, text)
                if facts_said.contains(&normal(text)) =>
            {
                written.insert(normal(text));
            }
            other => others.push(other),
        }
    }
    let mut others = others.into_iter();
    let mut missing = Vec::new();
    for fact in facts.iter().filter(|f| !written.contains(&normal(f))) {
        match others.next() {
            Some(Operation::Keep) => report.not_stored.push(fact.clone()),
            Some(_) => {}
            None => missing.push(fact.clone()),
        }
    }
    if !missing.is_empty() {
        warn!(
            count = missing.len(),
            "the reconciler did not account for every new fact; adding those as they are"
        );
        report.fallback = Some(format!(
            "{} new facts were not accounted for by the reconciler and were added as they are",
            missing.len()
        ));
        operations.extend(missing.into_iter().map(Operation::Add));
    }
    operations
}

/// `operations` with every change kept to the person it is about: an UPDATE whose new text
/// is about someone other than the memory it replaces adds its text instead, and a DELETE of
/// a memory about someone no new fact is about is left out ("I moved to Quito" says nothing
/// of the brother who lives in Lima). Each such mend is reported.
fn same_person_changes(
    operations: Vec<Operation>,
    existing: &[ExistingFact],
    facts: &[String],
    report: &mut WriteReport,
) -> Vec<Operation> {
    let mut kept = Vec::with_capacity(operations.len());
    for op in operations {
        match op {
            Operation::Update(i, text)
                if !subject_of(&text).same_person(&subject_of(&existing[i].content)) =>
            {
                report.repairs.push(format!(
                    "an UPDATE moved \"{}\" to another person: its text is added",
                    existing[i].content
                ));
                kept.push(Operation::Add(text));
            }
            Operation::Delete(i)
                if !facts
                    .iter()
                    .any(|f| subject_of(f).same_person(&subject_of(&existing[i].content))) =>
            {
                report.repairs.push(format!(
                    "a DELETE of \"{}\", about someone no new fact is about, was left out",
                    existing[i].content
                ));
            }
            op => kept.push(op),
        }
    }
    kept
}

/// Asks `llm` for the facts in the user's `message` (into `report.extracted`), with the
/// `earlier` exchange as context when there is one. A message that says nothing of its own
/// ("Thanks!", "Cheers, see you later!") is not sent: it has no facts to give, and a small model
/// asked for some makes them up.
async fn extract(
    llm: &LlmClient,
    message: &str,
    earlier: &Earlier,
    config: &Config,
    report: &mut WriteReport,
) -> Result<(), EngineError> {
    if config.applies(WriteRule::LowInformation) && !low_information::says_something(message, None)
    {
        return Ok(());
    }
    let (messages, schema) = prompts::extraction(message, earlier);
    let call = Instant::now();
    let extracted = llm
        .complete_json::<prompts::Extraction>(messages, &schema)
        .await;
    report.llm_time += call.elapsed();
    report.extracted = extracted?.clean();
    Ok(())
}

/// What applying the operations changed.
struct Applied {
    added: Vec<StoredMemory>,
    updated: Vec<(MemoryId, MemoryId)>,
    deleted: Vec<MemoryId>,
    /// The texts of the updated and deleted facts.
    retracted: Vec<String>,
}

impl Engine {
    /// The conversation's facts nearest to any of `facts` (at least `min_cosine`), best
    /// first, without duplicates.
    fn nearest_facts(
        &self,
        conversation: &ConversationId,
        facts: &[String],
        min_cosine: f32,
    ) -> Result<Vec<ExistingFact>, EngineError> {
        if facts.is_empty() {
            return Ok(Vec::new());
        }
        let filter = Filter::all()
            .must(Condition::equals(
                PointPayload::FIELD_CONVERSATION,
                conversation.as_str(),
            ))
            .must(Condition::equals(
                PointPayload::FIELD_ROLE,
                Role::Memory.as_str(),
            ));
        let vectors = self.embedder().embed(facts)?;
        let mut found: HashMap<MemoryId, (f32, ExistingFact)> = HashMap::new();
        for vector in vectors {
            let hits = self.index().query(&Query {
                vector: QueryVector::Dense(vector),
                filter: filter.clone(),
                limit: NEAREST_PER_FACT,
                with_vectors: false,
            })?;
            for hit in hits.into_iter().filter(|h| h.score >= min_cosine) {
                let fact = ExistingFact {
                    id: hit.id,
                    path: self.store().root().join(&hit.payload.path),
                    content: hit.payload.content,
                    score: hit.score,
                };
                let best = found.entry(hit.id).or_insert((hit.score, fact));
                best.0 = best.0.max(hit.score);
                best.1.score = best.0;
            }
        }
        let mut facts: Vec<(f32, ExistingFact)> = found.into_values().collect();
        facts.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
        facts.truncate(NEAREST_IN_ALL);
        Ok(facts.into_iter().map(|(_, f)| f).collect())
    }

    fn apply(
        &self,
        conversation: &ConversationId,
        existing: &[ExistingFact],
        operations: Vec<Operation>,
        origin: &Origin,
    ) -> Result<Applied, EngineError> {
        let new_fact = |text: &str| {
            // A text the reconciler wrote is bounded by its answer only.
            let text = mnemo_core::stored_turn(text.to_owned());
            let mut record = MemoryRecord::new(conversation.clone(), Role::Memory, text);
            record.metadata = origin.metadata.clone();
            if let Some((id, message)) = &origin.source {
                record.source_id = Some(*id);
                // What in the user's words the fact stands on, for whoever reads the file.
                let grounding = grounding::ground_in(&record.content, message, &origin.earlier);
                let mut matched = grounding.matched;
                matched.truncate(MAX_GROUNDED_WORDS);
                record
                    .metadata
                    .insert(GROUNDED_ON.into(), serde_json::json!(matched));
            }
            record
        };
        let mut records = Vec::new();
        let mut replaced = Vec::new();
        let mut deleted = Vec::new();
        for op in &operations {
            match op {
                Operation::Add(text) => records.push(new_fact(text)),
                Operation::Update(i, text) => {
                    let record = new_fact(text);
                    replaced.push((existing[*i].clone(), record.id));
                    records.push(record);
                }
                Operation::Delete(i) => deleted.push(existing[*i].clone()),
                Operation::Keep => {}
            }
        }
        // New facts first: a crash in between leaves a duplicate, never a loss.
        let added = self.write_records(records)?;
        let mut tombstones: Vec<(std::path::PathBuf, Option<MemoryId>)> = Vec::new();
        tombstones.extend(
            replaced
                .iter()
                .map(|(old, new)| (old.path.clone(), Some(*new))),
        );
        tombstones.extend(deleted.iter().map(|old| (old.path.clone(), None)));
        self.tombstone(&tombstones)?;
        Ok(Applied {
            added,
            updated: replaced.iter().map(|(old, new)| (old.id, *new)).collect(),
            deleted: deleted.iter().map(|f| f.id).collect(),
            retracted: replaced
                .iter()
                .map(|(old, _)| old)
                .chain(&deleted)
                .map(|f| f.content.clone())
                .collect(),
        })
    }

    /// Tombstones the oldest facts and turns beyond `max_entries`, never one of `keep`.
    /// Returns how many.
    fn evict(
        &self,
        conversation: &ConversationId,
        keep: &std::collections::HashSet<MemoryId>,
    ) -> Result<usize, EngineError> {
        let (total, mut entries) = {
            let snapshot = self.snapshot().lock();
            let all: Vec<_> = snapshot
                .entries_of(conversation.as_str())
                .filter(|(_, e)| e.role != Role::Summary)
                .collect();
            let candidates: Vec<(chrono::DateTime<chrono::Utc>, String)> = all
                .iter()
                .filter(|(_, e)| !keep.contains(&e.id))
                .map(|(path, e)| (e.created_at, (*path).clone()))
                .collect();
            (all.len(), candidates)
        };
        let excess = total
            .saturating_sub(self.config().max_entries)
            .min(entries.len());
        if excess == 0 {
            return Ok(0);
        }
        entries.sort();
        let oldest: Vec<_> = entries
            .into_iter()
            .take(excess)
            .map(|(_, path)| (self.store().root().join(path), None))
            .collect();
        self.tombstone(&oldest)?;
        info!(conversation = %conversation, evicted = excess, "evicted the oldest memories");
        Ok(excess)
    }
}
