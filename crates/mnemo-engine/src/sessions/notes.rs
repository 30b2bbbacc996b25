//! Agents' notes (`agents/<agent>/MEMORY.md`): read for every request that names the
//! agent (hand edits are seen at once), changed through the API under one lock and
//! committed.

use mnemo_session::agent::INJECTED_LINES;
use mnemo_session::{AgentNotes, SessionError};

use crate::blocking::blocking;
use crate::error::EngineError;
use crate::sessions::SessionWing;

impl SessionWing {
    pub(crate) async fn agent_memory(&self, agent: &str) -> Result<String, EngineError> {
        let notes = AgentNotes::new(self.engine.store().root(), agent)?;
        blocking(move || Ok(notes.read()?)).await
    }

    pub(crate) async fn append_agent_memory(
        &self,
        agent: &str,
        text: &str,
    ) -> Result<String, EngineError> {
        let text = text.to_owned();
        self.change_agent_memory(agent, "append to", move |notes| notes.append(&text))
            .await
    }

    pub(crate) async fn update_agent_memory(
        &self,
        agent: &str,
        old: &str,
        new: &str,
    ) -> Result<String, EngineError> {
        let (old, new) = (old.to_owned(), new.to_owned());
        self.change_agent_memory(agent, "update", move |notes| notes.update(&old, &new))
            .await
    }

    async fn change_agent_memory(
        &self,
        agent: &str,
        verb: &'static str,
        change: impl FnOnce(&AgentNotes) -> Result<String, SessionError> + Send + 'static,
    ) -> Result<String, EngineError> {
        let notes = AgentNotes::new(self.engine.store().root(), agent)?;
        let lock = self.engine.agent_lock().clone();
        let _held = lock.lock().await;
        let agent = agent.to_owned();
        self.engine
            .blocking(move |engine| {
                let text = change(&notes)?;
                if let Some(git) = &engine.git() {
                    git.note_changed([notes.path()]);
                }
                engine.commit(&format!("{verb} the notes of agent {agent}"));
                Ok(text)
            })
            .await
    }

    /// The first lines of `agent`'s notes, which go into the system prompt of every request
    /// that names the agent ([`crate::inject::agent_notes`]); `None` when it has none.
    pub(crate) async fn agent_notes_head(
        &self,
        agent: &str,
    ) -> Result<Option<String>, EngineError> {
        let notes = AgentNotes::new(self.engine.store().root(), agent)?;
        blocking(move || Ok(notes.head(INJECTED_LINES)?)).await
    }
}
