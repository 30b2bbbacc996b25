//! The order of chat turns within each conversation: which turns are *neighbours*, and which
//! facts were drawn from each turn.
//!
//! Two turns are neighbours when they are adjacent in their conversation (by `created_at`) and
//! less than [`SESSION_GAP`] apart, i.e. part of the same exchange. Lexical keys include the
//! neighbours' words and the turn's facts, and the read path lets a turn borrow relevance from
//! its neighbours. Built from the snapshot, which records every indexed file's conversation,
//! role, time and (for a fact) source turn.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use mnemo_core::{MemoryId, Role};

use crate::index::snapshot::Snapshot;

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

/// Where a turn sorts in its conversation: by time, then a message before its answer.
type TurnOrder = (DateTime<Utc>, bool, MemoryId);

/// Every conversation's turns in order, built from a snapshot.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    /// The snapshot generation this was built from.
    pub generation: u64,
    /// Turns of each conversation, oldest first.
    turns: Vec<Vec<(DateTime<Utc>, MemoryId)>>,
    /// Where each turn sits: (conversation slot, position).
    position: HashMap<MemoryId, (usize, usize)>,
    /// The facts drawn from each turn (of the same conversation), oldest first.
    facts: HashMap<MemoryId, Vec<MemoryId>>,
}

impl Timeline {
    pub fn build(snapshot: &Snapshot) -> Self {
        let mut by_conversation: HashMap<&str, Vec<TurnOrder>> = HashMap::new();
        let mut conversation_of: HashMap<MemoryId, &str> = HashMap::new();
        for entry in snapshot.files.values().filter(|e| e.is_turn()) {
            let conversation = entry.conversation_id.as_str();
            // A message and its answer written in the same millisecond: the answer follows.
            let answer = entry.role == Role::Assistant;
            by_conversation.entry(conversation).or_default().push((
                entry.created_at,
                answer,
                entry.id,
            ));
            conversation_of.insert(entry.id, conversation);
        }
        let mut facts: HashMap<MemoryId, Vec<(DateTime<Utc>, MemoryId)>> = HashMap::new();
        for entry in snapshot.files.values().filter(|e| e.role == Role::Memory) {
            // A hand-edited `source_id` naming another conversation's turn must not put this
            // conversation's words into that turn's key.
            let Some(turn) = entry
                .source_id
                .filter(|turn| conversation_of.get(turn) == Some(&entry.conversation_id.as_str()))
            else {
                continue;
            };
            facts
                .entry(turn)
                .or_default()
                .push((entry.created_at, entry.id));
        }
        let mut timeline = Timeline {
            generation: snapshot.generation,
            ..Timeline::default()
        };
        for (turn, mut drawn) in facts {
            drawn.sort();
            let ids = drawn.into_iter().map(|(_, id)| id).collect();
            timeline.facts.insert(turn, ids);
        }
        for (_, mut turns) in by_conversation {
            // Other ties (turns written in the same millisecond) keep a stable, id-based order.
            turns.sort();
            let slot = timeline.turns.len();
            for (i, (_, _, id)) in turns.iter().enumerate() {
                timeline.position.insert(*id, (slot, i));
            }
            timeline
                .turns
                .push(turns.into_iter().map(|(at, _, id)| (at, id)).collect());
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

    /// Up to `n` turns on each side of `id` in the same session, nearest first: its
    /// neighbours, their neighbours on the same side, and so on. Lazy: the index's key check
    /// runs it for every turn after every write.
    pub fn around(
        &self,
        id: MemoryId,
        n: usize,
    ) -> (
        impl Iterator<Item = MemoryId> + '_,
        impl Iterator<Item = MemoryId> + '_,
    ) {
        let walk = move |step: fn(Neighbours) -> Option<MemoryId>| {
            std::iter::successors(step(self.neighbours(id)), move |&turn| {
                step(self.neighbours(turn))
            })
            .take(n)
        };
        (walk(|n| n.previous), walk(|n| n.next))
    }

    /// The live facts drawn from the turn `id`, oldest first.
    pub fn facts(&self, id: MemoryId) -> &[MemoryId] {
        self.facts.get(&id).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::snapshot::SnapshotEntry;
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
            source_id: None,
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
        let around = |id, n| {
            let (before, after) = timeline.around(id, n);
            (before.collect::<Vec<_>>(), after.collect::<Vec<_>>())
        };
        assert_eq!(around(ids[3], 5), (vec![ids[1], ids[0]], vec![]));
        assert_eq!(around(ids[0], 1), (vec![], vec![ids[1]]));
        assert_eq!(around(ids[1], 0), (vec![], vec![]));
    }

    #[test]
    fn a_turn_s_facts_are_those_of_its_conversation_that_name_it() {
        let mut snapshot = Snapshot::default();
        let turn = entry("a", Role::User, 1);
        let drawn = |conversation, minute, source: &SnapshotEntry| SnapshotEntry {
            source_id: Some(source.id),
            ..entry(conversation, Role::Memory, minute)
        };
        let later = drawn("a", 3, &turn);
        let first = drawn("a", 2, &turn);
        let elsewhere = drawn("b", 2, &turn);
        let summary = SnapshotEntry {
            source_id: Some(turn.id),
            ..entry("a", Role::Summary, 2)
        };
        for (i, e) in [&turn, &later, &first, &elsewhere, &summary]
            .into_iter()
            .enumerate()
        {
            snapshot.files.insert(format!("f{i}"), e.clone());
        }
        let timeline = Timeline::build(&snapshot);
        assert_eq!(timeline.facts(turn.id), [first.id, later.id]);
        assert!(timeline.facts(first.id).is_empty(), "a fact has none");
    }

    #[test]
    fn an_answer_written_in_the_same_millisecond_follows_its_message() {
        // Random ids would order about half of these pairs the other way round.
        let mut snapshot = Snapshot::default();
        let pairs: Vec<(SnapshotEntry, SnapshotEntry)> = (0..16)
            .map(|i| {
                let conversation = format!("c{i}");
                (
                    entry(&conversation, Role::User, 1),
                    entry(&conversation, Role::Assistant, 1),
                )
            })
            .collect();
        for (i, (message, answer)) in pairs.iter().enumerate() {
            snapshot.files.insert(format!("m{i}"), message.clone());
            snapshot.files.insert(format!("a{i}"), answer.clone());
        }
        let timeline = Timeline::build(&snapshot);
        for (message, answer) in &pairs {
            assert_eq!(timeline.neighbours(answer.id).previous, Some(message.id));
        }
    }
}
