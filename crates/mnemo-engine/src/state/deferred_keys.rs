//! The conversations whose lexical-key upkeep waits for the end of their write-path pass.
//!
//! After every write the index rebuilds the lexical keys of the turns whose context
//! changed: a turn's key reads its neighbouring turns and the facts drawn from it. A pass
//! writes several times in a row (the answer, the facts, the marks on facts they may
//! contradict, the summary, the evictions), and each write made the same turns stale again,
//! so their keys were rebuilt four or five times a pass. While a conversation's pass runs,
//! its writes leave the keys to the pass's end, which rebuilds each stale key once. Another
//! writer's upkeep in between rebuilds them too, as it rebuilds whatever is stale.

use std::collections::HashMap;
use std::sync::Mutex;

use mnemo_core::ConversationId;

/// Conversations with a pass running, each with how many (one, but counted to be safe).
#[derive(Default)]
pub(crate) struct DeferredKeys(Mutex<HashMap<ConversationId, usize>>);

impl DeferredKeys {
    pub(crate) fn begin(&self, conversation: &ConversationId) {
        *self.lock().entry(conversation.clone()).or_default() += 1;
    }

    pub(crate) fn end(&self, conversation: &ConversationId) {
        let mut deferred = self.lock();
        if let Some(count) = deferred.get_mut(conversation) {
            *count -= 1;
            if *count == 0 {
                deferred.remove(conversation);
            }
        }
    }

    /// Whether every one of `conversations` leaves its keys to the end of a pass (false
    /// for none).
    pub(crate) fn all_deferred<'c>(
        &self,
        conversations: impl IntoIterator<Item = &'c ConversationId>,
    ) -> bool {
        let deferred = self.lock();
        let mut any = false;
        for conversation in conversations {
            if !deferred.contains_key(conversation) {
                return false;
            }
            any = true;
        }
        any
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ConversationId, usize>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defers_only_while_every_conversation_written_has_a_pass() {
        let keys = DeferredKeys::default();
        let (a, b) = (
            ConversationId::new("a").unwrap(),
            ConversationId::new("b").unwrap(),
        );
        assert!(!keys.all_deferred([&a]));
        keys.begin(&a);
        assert!(keys.all_deferred([&a]));
        assert!(!keys.all_deferred([&a, &b]), "b has no pass running");
        assert!(
            !keys.all_deferred(std::iter::empty()),
            "nothing written defers nothing"
        );
        keys.end(&a);
        assert!(!keys.all_deferred([&a]));
        keys.end(&a);
        assert!(!keys.all_deferred([&a]), "an extra end does no harm");
    }
}
