//! The order of chat turns within each conversation: which turns are *neighbours*, and which
//! facts were drawn from each turn.
//!
//! Two turns are neighbours when they are adjacent in their conversation (by `created_at`) and
//! less than [`SESSION_GAP`] apart, i.e. part of the same exchange. Lexical keys include the
//! neighbours' words and the turn's facts, and the read path lets a turn borrow relevance from
//! its neighbours. Built from the snapshot, which records every indexed file's conversation,
//! role, time and (for a fact) source turn: after a write, only the conversations written
//! are built again ([`Timeline::refresh`]), the others shared with the timeline before.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use mnemo_core::{ConversationId, MemoryId, Role};

use crate::index::snapshot::{Changed, Snapshot, SnapshotEntry};

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
#[derive(Debug, Default, Clone)]
pub(crate) struct Timeline {
    /// The snapshot generation this was built from.
    pub generation: u64,
    /// Each conversation's turns and facts.
    conversations: Vec<Arc<ConversationTimeline>>,
    /// Where each conversation is in `conversations`.
    slot_of_conversation: HashMap<ConversationId, usize>,
    /// Which conversation each turn is of.
    slot_of_turn: HashMap<MemoryId, usize>,
}

/// One conversation's turns in order, and the facts drawn from each.
#[derive(Debug, Default)]
struct ConversationTimeline {
    /// Turns, oldest first.
    turns: Vec<(DateTime<Utc>, MemoryId)>,
    /// Where each turn is in `turns`.
    position: HashMap<MemoryId, usize>,
    /// The facts drawn from each turn, oldest first.
    facts: HashMap<MemoryId, Vec<MemoryId>>,
}

impl ConversationTimeline {
    /// Built from the entries of one conversation.
    fn of<'e>(entries: impl Iterator<Item = &'e SnapshotEntry> + Clone) -> Self {
        let mut turns: Vec<TurnOrder> = entries
            .clone()
            .filter(|e| e.is_turn())
            // A message and its answer written in the same millisecond: the answer follows.
            .map(|e| (e.created_at, e.role == Role::Assistant, e.id))
            .collect();
        // Other ties (turns written in the same millisecond) keep a stable, id-based order.
        turns.sort();
        let position: HashMap<MemoryId, usize> = turns
            .iter()
            .enumerate()
            .map(|(i, (_, _, id))| (*id, i))
            .collect();
        let mut drawn: HashMap<MemoryId, Vec<(DateTime<Utc>, MemoryId)>> = HashMap::new();
        for entry in entries.filter(|e| e.role == Role::Memory) {
            // A hand-edited `source_id` naming another conversation's turn must not put this
            // conversation's words into that turn's key.
            if let Some(turn) = entry.source_id.filter(|t| position.contains_key(t)) {
                drawn
                    .entry(turn)
                    .or_default()
                    .push((entry.created_at, entry.id));
            }
        }
        let facts = drawn
            .into_iter()
            .map(|(turn, mut facts)| {
                facts.sort();
                (turn, facts.into_iter().map(|(_, id)| id).collect())
            })
            .collect();
        Self {
            turns: turns.into_iter().map(|(at, _, id)| (at, id)).collect(),
            position,
            facts,
        }
    }
}

impl Timeline {
    /// Every conversation's timeline, built from `snapshot`.
    pub fn build(snapshot: &Snapshot) -> Self {
        let mut timeline = Timeline::default();
        for conversation in snapshot.conversations() {
            timeline.rebuild(snapshot, conversation);
        }
        timeline.generation = snapshot.generation;
        timeline
    }

    /// The timeline of `snapshot`, built again only for the conversations that changed
    /// since this one was built.
    pub fn refresh(&self, snapshot: &Snapshot) -> Self {
        let Changed::Conversations(changed) = snapshot.changed_since(self.generation) else {
            return Timeline::build(snapshot);
        };
        let mut timeline = self.clone();
        for conversation in &changed {
            timeline.rebuild(snapshot, conversation);
        }
        timeline.generation = snapshot.generation;
        timeline
    }

    /// Builds `conversation`'s part again from `snapshot`.
    fn rebuild(&mut self, snapshot: &Snapshot, conversation: &ConversationId) {
        let entries = snapshot.entries_of(conversation.as_str()).map(|(_, e)| e);
        let built = Arc::new(ConversationTimeline::of(entries));
        let slot = match self.slot_of_conversation.get(conversation) {
            Some(&slot) => {
                for (_, turn) in &self.conversations[slot].turns {
                    // A turn moved to another conversation (a file moved by hand) may be
                    // that one's already, if it was rebuilt first.
                    if self.slot_of_turn.get(turn) == Some(&slot) {
                        self.slot_of_turn.remove(turn);
                    }
                }
                slot
            }
            None => {
                self.conversations.push(Arc::default());
                let slot = self.conversations.len() - 1;
                self.slot_of_conversation.insert(conversation.clone(), slot);
                slot
            }
        };
        for (_, turn) in &built.turns {
            self.slot_of_turn.insert(*turn, slot);
        }
        self.conversations[slot] = built;
    }

    /// The turns right before and after `id` in the same session (none if `id` is not a turn).
    pub fn neighbours(&self, id: MemoryId) -> Neighbours {
        let Some(conversation) = self.conversation_of(id) else {
            return Neighbours::default();
        };
        let Some(&i) = conversation.position.get(&id) else {
            return Neighbours::default();
        };
        let turns = &conversation.turns;
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
    /// runs it for every turn of a conversation written.
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
        self.conversation_of(id)
            .and_then(|c| c.facts.get(&id))
            .map_or(&[], Vec::as_slice)
    }

    fn conversation_of(&self, turn: MemoryId) -> Option<&ConversationTimeline> {
        let slot = *self.slot_of_turn.get(&turn)?;
        Some(&self.conversations[slot])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            nearest_words: None,
        }
    }

    /// Records `entry` in `snapshot` as the file `name` of its conversation.
    fn put(snapshot: &mut Snapshot, name: &str, entry: &SnapshotEntry) {
        let path = format!("entries/{}/{name}.md", entry.conversation_id);
        snapshot.insert(path, entry.clone());
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
            put(&mut snapshot, &format!("f{i}"), e);
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
            put(&mut snapshot, &format!("f{i}"), e);
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
            put(&mut snapshot, &format!("m{i}"), message);
            put(&mut snapshot, &format!("a{i}"), answer);
        }
        let timeline = Timeline::build(&snapshot);
        for (message, answer) in &pairs {
            assert_eq!(timeline.neighbours(answer.id).previous, Some(message.id));
        }
    }

    /// What a refresh after each change answers is what a whole build answers.
    #[test]
    fn a_refreshed_timeline_is_the_timeline_built_whole() {
        let mut snapshot = Snapshot::default();
        let mut timeline = Timeline::build(&snapshot);
        let mut entries: Vec<(String, SnapshotEntry)> = Vec::new();
        let answers = |t: &Timeline, entries: &[(String, SnapshotEntry)]| {
            let ids = entries.iter().map(|(_, e)| e.id);
            ids.map(|id| (t.neighbours(id), t.facts(id).to_vec()))
                .collect::<Vec<_>>()
        };
        for step in 0..40u32 {
            let conversation = ["a", "b", "c"][step as usize % 3];
            let mut added = entry(
                conversation,
                [Role::User, Role::Assistant][step as usize % 2],
                step,
            );
            if step % 5 == 4 {
                added.role = Role::Memory;
                let mut turns = entries.iter().map(|(_, e)| e).filter(|e| e.is_turn());
                let same = turns.rfind(|e| e.conversation_id.as_str() == conversation);
                added.source_id = same.map(|e| e.id);
            }
            let name = format!("e{step}");
            put(&mut snapshot, &name, &added);
            entries.push((format!("entries/{conversation}/{name}.md"), added));
            if step % 7 == 6 {
                let (path, _) = entries.remove(step as usize / 3);
                snapshot.remove(&path);
            }
            if step % 11 == 10 {
                // A turn moved by hand to another conversation, keeping its id.
                let at = entries.iter().position(|(_, e)| e.is_turn()).unwrap();
                let (path, mut moved) = entries.remove(at);
                snapshot.remove(&path);
                moved.conversation_id = ConversationId::new("d").unwrap();
                let name = format!("moved{step}");
                put(&mut snapshot, &name, &moved);
                entries.push((format!("entries/d/{name}.md"), moved));
            }
            timeline = timeline.refresh(&snapshot);
            assert_eq!(timeline.generation, snapshot.generation);
            let whole = Timeline::build(&snapshot);
            assert_eq!(
                answers(&timeline, &entries),
                answers(&whole, &entries),
                "step {step}"
            );
        }
        assert!(
            entries
                .iter()
                .any(|(_, e)| !timeline.facts(e.id).is_empty())
                && entries
                    .iter()
                    .any(|(_, e)| timeline.neighbours(e.id).next.is_some()),
            "the steps made neighbours and facts"
        );
    }
}
