//! Conflicts: two live facts about the same thing of the same person that say different
//! things, and what people do about them.
//!
//! A small model's yes or no is not trusted to retire a value: asked whether a thing can
//! have only one value at a time it says yes for pets and hobbies as readily as for a home
//! city. So nothing is retired here. Candidates are found by structure and nearness — the
//! same person, the same words but for one short part where each says something of its
//! own, or where the later only denies ([`crate::text::subjects::may_conflict`]), and
//! embeddings at least `conflict_similarity` close (cosine; configuration) — and time and
//! people decide:
//!
//! - **Marked.** When the write path stores a fact, each older live fact of the
//!   conversation that may be its rival gets `conflicts_with: <the new id>` in its front
//!   matter, so the files say which one holds, unless a person said before that the two
//!   both hold (`compatible_with`). The rolling summary is rewritten without the older
//!   value in the same pass.
//! - **Read.** The chat path shows such a pair together, the earlier first and marked, under
//!   a line saying that the later one holds ([`crate::inject`]), and cuts the summary's
//!   sentences that still state the earlier value.
//! - **Resolved.** A person keeps the later fact (the earlier is tombstoned with
//!   `replaced_by` and a `reason`), keeps the earlier one (the later is), or says both hold
//!   (the mark goes and `compatible_with` remembers it). Each resolution is committed to git
//!   like any edit.

use std::collections::{HashMap, HashSet};

use mnemo_core::{ConversationId, MemoryId, Role};
use mnemo_store::StoredMemory;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tracing::info;
use utoipa::ToSchema;

use super::{Contested, WritePath, WriteReport};
use crate::api_types::Memory;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::text::subjects::may_conflict;
use crate::write::WriteWing;

/// Two live facts of one conversation, the earlier naming the later in `conflicts_with`:
/// until a person resolves them, the later holds.
#[derive(Debug, Clone, Serialize, ToSchema, JsonSchema)]
pub struct Conflict {
    /// The earlier fact.
    pub earlier: Memory,
    /// The later fact, which holds until the conflict is resolved.
    pub later: Memory,
    /// The turn the earlier fact was drawn from, when it is known and still there.
    pub earlier_source: Option<Memory>,
    /// The turn the later fact was drawn from, when it is known and still there.
    pub later_source: Option<Memory>,
}

/// A conversation's open conflicts.
#[derive(Debug, Clone, Serialize, ToSchema, JsonSchema)]
pub struct Conflicts {
    /// The conversation.
    #[schema(value_type = String)]
    #[schemars(with = "String")]
    pub conversation_id: ConversationId,
    /// Each pair of live facts about the same thing that say different things, earliest
    /// first: until a person resolves it, the later holds.
    pub conflicts: Vec<Conflict>,
}

/// What a person decided about a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// The later fact holds: the earlier is retired.
    KeepLater,
    /// The earlier fact holds: the later is retired.
    KeepEarlier,
    /// Both hold: neither is retired, and the pair is not a conflict again.
    BothHold,
}

impl Resolution {
    fn reason(self) -> &'static str {
        match self {
            Self::KeepLater => "conflict resolved by a person: the later fact holds",
            Self::KeepEarlier => "conflict resolved by a person: the earlier fact holds",
            Self::BothHold => "conflict resolved by a person: both facts hold",
        }
    }
}

impl std::str::FromStr for Resolution {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "later" | "keep_later" => Ok(Self::KeepLater),
            "earlier" | "keep_earlier" => Ok(Self::KeepEarlier),
            "both" | "both_hold" => Ok(Self::BothHold),
            other => Err(format!(
                "{other:?} is no resolution: keep \"later\", \"earlier\" or \"both\""
            )),
        }
    }
}

/// The answer to a resolution.
#[derive(Debug, Clone, Serialize, ToSchema, JsonSchema)]
pub struct Resolved {
    /// What was decided.
    pub resolution: Resolution,
    /// The facts that stay live, as they are now.
    pub kept: Vec<Memory>,
    /// The tombstone of the fact retired, if one was.
    pub retired: Option<Memory>,
    /// The git commit, when git versioning is on.
    pub commit: Option<String>,
}

impl WritePath<'_> {
    /// Marks each older live fact that a fact of this pass may contradict (see the module
    /// doc); what was marked goes into `report.contested`.
    pub(super) async fn mark_conflicts(
        &self,
        conversation: &ConversationId,
        report: &mut WriteReport,
    ) -> Result<(), EngineError> {
        if !self.engine.config().conflict_marking {
            return Ok(());
        }
        let new: Vec<(MemoryId, String)> = report
            .added
            .iter()
            .filter(|m| m.record.role == Role::Memory)
            .map(|m| (m.record.id, m.record.content.clone()))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let conv = conversation.clone();
        let marked = self
            .engine
            .blocking(move |engine| engine.mark_conflicts(&conv, &new))
            .await?;
        for contested in marked {
            info!(conversation = %conversation, earlier = %contested.earlier_text, later = %contested.later, similarity = contested.similarity, "marked: a later fact may say otherwise");
            report.contested.push(contested);
        }
        Ok(())
    }
}

impl Engine {
    fn mark_conflicts(
        &self,
        conversation: &ConversationId,
        new: &[(MemoryId, String)],
    ) -> Result<Vec<Contested>, EngineError> {
        let this_pass: HashSet<MemoryId> = new.iter().map(|(id, _)| *id).collect();
        let near_enough = self.config().conflict_similarity;
        let mut marked: Vec<Contested> = Vec::new();
        let mut marks = Vec::new();
        for (later, text) in new {
            let near = self.nearest_facts(conversation, std::slice::from_ref(text), near_enough)?;
            for old in near {
                let seen = marked.iter().any(|m| m.earlier == old.id);
                if seen || this_pass.contains(&old.id) || !may_conflict(&old.content, text) {
                    continue;
                }
                let stored = self.store().read(&old.path)?;
                if stored.record.compatible_with.contains(later) {
                    continue;
                }
                let mut record = stored.record;
                record.conflicts_with = Some(*later);
                marks.push((stored.path, record));
                marked.push(Contested {
                    earlier: old.id,
                    earlier_text: old.content,
                    later: *later,
                    similarity: old.score,
                });
            }
        }
        // Written together: the index's upkeep runs once, not once per fact marked.
        self.rewrite_records(marks)?;
        Ok(marked)
    }

    /// The conversation's conflicts, earliest first.
    fn conflicts(&self, conversation: &ConversationId) -> Vec<Conflict> {
        let scan = self.store().scan_conversation(conversation);
        let by_id: HashMap<MemoryId, &StoredMemory> =
            scan.memories.iter().map(|m| (m.record.id, m)).collect();
        let shown = |m: &StoredMemory| Memory::of(m, self.store());
        let source = |m: &StoredMemory| {
            m.record
                .source_id
                .and_then(|id| by_id.get(&id))
                .map(|turn| shown(turn))
        };
        let mut conflicts: Vec<Conflict> = scan
            .memories
            .iter()
            .filter(|m| m.record.role == Role::Memory)
            .filter_map(|earlier| {
                let later_id = earlier.record.conflicts_with?;
                let later = by_id.get(&later_id).filter(|l| {
                    l.record.role == Role::Memory
                        && !earlier.record.compatible_with.contains(&later_id)
                })?;
                Some(Conflict {
                    earlier: shown(earlier),
                    later: shown(later),
                    earlier_source: source(earlier),
                    later_source: source(later),
                })
            })
            .collect();
        conflicts.sort_by_key(|c| (c.earlier.created_at, c.earlier.id));
        conflicts
    }
}

impl WriteWing {
    /// The conflicts of `conversation` (see the module doc), earliest first.
    pub(crate) async fn conflicts(
        &self,
        conversation: &ConversationId,
    ) -> Result<Conflicts, EngineError> {
        let conversation_id = conversation.clone();
        self.engine
            .blocking(move |engine| {
                Ok(Conflicts {
                    conflicts: engine.conflicts(&conversation_id),
                    conversation_id,
                })
            })
            .await
    }

    /// Resolves the conflict between `earlier` and `later` in `conversation` as a person
    /// decided, and commits. A pair that is not a live conflict of that conversation is
    /// [`EngineError::NotFound`].
    pub(crate) async fn resolve_conflict(
        &self,
        conversation: &ConversationId,
        earlier: MemoryId,
        later: MemoryId,
        resolution: Resolution,
    ) -> Result<Resolved, EngineError> {
        let _turn = self
            .engine
            .conversation_lock(conversation)
            .lock_owned()
            .await;
        let (first, second) = (
            self.engine.memories().get(earlier).await?,
            self.engine.memories().get(later).await?,
        );
        let no_such = || {
            EngineError::NotFound(format!(
                "no conflict between {earlier} and {later} in conversation {conversation:?}: \
                 list its conflicts to see the pairs that are open"
            ))
        };
        let (Some(first), Some(second)) = (first, second) else {
            return Err(no_such());
        };
        let open = [&first, &second]
            .iter()
            .all(|m| m.record.conversation_id == *conversation && m.record.role == Role::Memory)
            && first.record.conflicts_with == Some(later)
            && !first.record.compatible_with.contains(&later);
        if !open {
            return Err(no_such());
        }
        let conversation = conversation.clone();
        self.engine
            .blocking(move |engine| engine.resolve(&conversation, first, second, resolution))
            .await
    }
}

impl Engine {
    fn resolve(
        &self,
        conversation: &ConversationId,
        earlier: StoredMemory,
        later: StoredMemory,
        resolution: Resolution,
    ) -> Result<Resolved, EngineError> {
        let reason = Some(resolution.reason().to_owned());
        let retire = |loser: &StoredMemory, winner: MemoryId| -> Result<Memory, EngineError> {
            let tombstones = self.retire(&[(loser.path.clone(), Some(winner), reason.clone())])?;
            let tombstone = tombstones.first().ok_or_else(|| {
                EngineError::NotFound(format!(
                    "{} went while it was resolved",
                    loser.path.display()
                ))
            })?;
            Ok(Memory::of(&self.store().read(tombstone)?, self.store()))
        };
        let (kept, retired) = match resolution {
            Resolution::KeepLater => {
                let retired = retire(&earlier, later.record.id)?;
                (vec![Memory::of(&later, self.store())], Some(retired))
            }
            Resolution::KeepEarlier => {
                let retired = retire(&later, earlier.record.id)?;
                let mut record = earlier.record.clone();
                record.conflicts_with = None;
                let kept = self.rewrite_record(&earlier.path, record)?;
                (vec![Memory::of(&kept, self.store())], Some(retired))
            }
            Resolution::BothHold => {
                let mut record = earlier.record.clone();
                record.conflicts_with = None;
                record.compatible_with.push(later.record.id);
                let kept = self.rewrite_record(&earlier.path, record)?;
                (
                    vec![
                        Memory::of(&kept, self.store()),
                        Memory::of(&later, self.store()),
                    ],
                    None,
                )
            }
        };
        let commit = self.commit(&format!("{conversation}: {}", resolution.reason()));
        Ok(Resolved {
            resolution,
            kept,
            retired,
            commit,
        })
    }
}
