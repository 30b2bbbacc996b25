//! The order of chat turns within each conversation: which turns are *neighbours*.
//!
//! Two turns are neighbours when they are adjacent in their conversation (by `created_at`) and
//! less than [`SESSION_GAP`] apart, i.e. part of the same exchange. Lexical keys include the
//! neighbours' words, and the read path lets a turn borrow relevance from them. Built from the
//! snapshot, which records every indexed file's conversation, role and time.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use mnemo_core::{MemoryId, Role};

use crate::snapshot::Snapshot;

/// Turns further apart than this belong to different sessions and are not neighbours.
pub const SESSION_GAP: Duration = Duration::hours(6);

/// A turn's neighbours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Neighbours {
    /// The turn before, if it is of the same session.
    pub previous: Option<MemoryId>,
    /// The turn after, if it is of the same session.
    pub next: Option<MemoryId>,
}

/// Every conversation's turns in order, built from a snapshot.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    /// The snapshot generation this was built from.
    pub generation: u64,
    /// Turns of each conversation, oldest first.
    turns: Vec<Vec<(DateTime<Utc>, MemoryId)>>,
    /// Where each turn sits: (conversation slot, position).
    position: HashMap<MemoryId, (usize, usize)>,
}

impl Timeline {
    pub fn build(snapshot: &Snapshot) -> Self {
        let mut by_conversation: HashMap<&str, Vec<(DateTime<Utc>, MemoryId)>> = HashMap::new();
        for entry in snapshot.files.values() {
            if matches!(entry.role, Role::User | Role::Assistant) {
                by_conversation
                    .entry(entry.conversation_id.as_str())
                    .or_default()
                    .push((entry.created_at, entry.id));
            }
        }
        let mut timeline = Timeline {
            generation: snapshot.generation,
            ..Timeline::default()
        };
        for (_, mut turns) in by_conversation {
            // Ties (turns written in the same millisecond) keep a stable, id-based order.
            turns.sort();
            let slot = timeline.turns.len();
            for (i, (_, id)) in turns.iter().enumerate() {
                timeline.position.insert(*id, (slot, i));
            }
            timeline.turns.push(turns);
        }
        timeline
    }

    /// The turns right before and after `id` in the same session (none if `id` is not a turn).
    pub fn neighbours(&self, id: MemoryId) -> Neighbours {
        let Some(&(slot, i)) = self.position.get(&id) else {
            return Neighbours::default();
        };
        let turns = &self.turns[slot];
        let at = turns[i].0;
        let near = |j: Option<usize>| {
            let (t, id) = *turns.get(j?)?;
            ((t - at).abs() <= SESSION_GAP).then_some(id)
        };
        Neighbours {
            previous: near(i.checked_sub(1)),
            next: near(Some(i + 1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::SnapshotEntry;
    use mnemo_core::ConversationId;

    fn entry(conversation: &str, role: Role, minute: u32) -> SnapshotEntry {
        SnapshotEntry {
            sha256: String::new(),
            id: MemoryId::random(),
            conversation_id: ConversationId::new(conversation).unwrap(),
            role,
            created_at: DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
                .unwrap()
                .to_utc()
                + Duration::minutes(minute.into()),
            key_context: None,
        }
    }

    #[test]
    fn neighbours_are_adjacent_turns_of_the_same_conversation() {
        let mut snapshot = Snapshot::default();
        let entries = [
            entry("a", Role::User, 1),
            entry("a", Role::Assistant, 2),
            entry("a", Role::Memory, 3),
            entry("a", Role::User, 4),
            entry("b", Role::User, 2),
            entry("a", Role::User, 4 + 7 * 60),
        ];
        for (i, e) in entries.iter().enumerate() {
            snapshot.files.insert(format!("f{i}"), e.clone());
        }
        let timeline = Timeline::build(&snapshot);
        let ids: Vec<MemoryId> = entries.iter().map(|e| e.id).collect();
        let n = |previous, next| Neighbours { previous, next };
        assert_eq!(timeline.neighbours(ids[0]), n(None, Some(ids[1])));
        assert_eq!(
            timeline.neighbours(ids[1]),
            n(Some(ids[0]), Some(ids[3])),
            "facts are skipped"
        );
        assert_eq!(
            timeline.neighbours(ids[2]),
            n(None, None),
            "a fact has none"
        );
        assert_eq!(
            timeline.neighbours(ids[4]),
            n(None, None),
            "alone in its conversation"
        );
        assert_eq!(
            timeline.neighbours(ids[3]),
            n(Some(ids[1]), None),
            "seven hours later is another session"
        );
    }
}
