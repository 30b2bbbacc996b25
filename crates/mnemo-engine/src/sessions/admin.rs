//! Sessions as the API shows and changes them: listed, read a page at a time, forked,
//! exported, imported, deleted; how full their context is; their offloaded tool outputs and
//! archive search over their logs.

use mnemo_context::tokens::messages_tokens;
use mnemo_context::{DirOutputStore, OutputStore};
use mnemo_core::ConversationId;
use mnemo_session::{Excerpt, SessionError, SessionExport, SessionId, SessionMeta};
use serde_json::{json, Value};

use crate::blocking::blocking;
use crate::error::EngineError;
use crate::sessions::{
    loaded, stored_conversation, HistoryScope, LoggedMessage, MessagePage, SessionContext,
    SessionInfo, SessionWing, ToolOutputSlice, MAX_OUTPUT_READ,
};

impl SessionWing {
    pub(crate) async fn list_sessions(
        &self,
        include_deleted: bool,
    ) -> Result<Vec<(SessionId, SessionMeta)>, EngineError> {
        let store = self.log_store().clone();
        blocking(move || Ok(store.list(include_deleted)?)).await
    }

    pub(crate) async fn session(&self, id: &SessionId) -> Result<SessionInfo, EngineError> {
        let (_slot, guard) = self.lock_session(id).await?;
        let loaded = loaded(&guard, id)?;
        Ok(SessionInfo {
            id: id.clone(),
            meta: loaded.meta.clone(),
            branch_messages: loaded.history.messages.len(),
            log_bytes: loaded.log_bytes,
            skipped_lines: loaded.skipped.clone(),
        })
    }

    pub(crate) async fn session_messages(
        &self,
        id: &SessionId,
        offset: usize,
        limit: usize,
        all: bool,
    ) -> Result<MessagePage, EngineError> {
        // The log on disk: the cache holds the branch only, not every record.
        let store = self.log_store().clone();
        let sid = id.clone();
        let records = blocking(move || {
            store.existing_meta(&sid)?;
            Ok(store.read_log(&sid)?.records)
        })
        .await?;
        let messages = mnemo_session::history::timed_messages(&records, all);
        let total = messages.len();
        let page = messages
            .into_iter()
            .enumerate()
            .skip(offset)
            .take(limit.min(mnemo_core::MAX_PAGE))
            .map(|(index, (at, message))| LoggedMessage {
                index,
                at,
                message: message.clone(),
            })
            .collect();
        Ok(MessagePage {
            total,
            offset,
            messages: page,
        })
    }

    pub(crate) async fn fork_session(
        &self,
        id: &SessionId,
        new_id: Option<SessionId>,
    ) -> Result<(SessionId, SessionMeta), EngineError> {
        let new_id = new_id.unwrap_or_else(SessionId::generate);
        if new_id == *id {
            return Err(SessionError::Exists(new_id.to_string()).into());
        }
        // Only the new session's lock: the source's log is read in whole lines, so an
        // append running meanwhile is copied whole or not at all, and two forks in opposite
        // directions cannot wait on each other. Its folder is claimed atomically.
        let (_slot, mut guard) = self.lock_session(&new_id).await?;
        let store = self.log_store().clone();
        let (from, to) = (id.clone(), new_id.clone());
        let meta = blocking(move || Ok(store.fork(&from, &to)?)).await?;
        *guard = None;
        Ok((new_id, meta))
    }

    pub(crate) async fn export_session(
        &self,
        id: &SessionId,
    ) -> Result<SessionExport, EngineError> {
        let store = self.log_store().clone();
        let id = id.clone();
        blocking(move || Ok(store.export(&id)?)).await
    }

    pub(crate) async fn import_session(
        &self,
        export: SessionExport,
        as_id: Option<SessionId>,
    ) -> Result<(SessionId, SessionMeta), EngineError> {
        let invalid = |field: &str, e: mnemo_core::IdError, what: &str| {
            EngineError::InvalidInput(format!("the export's {field}: {}", e.describe(what)))
        };
        ConversationId::new(&export.meta.conversation)
            .map_err(|e| invalid("conversation", e, "conversation id"))?;
        if let Some(agent) = &export.meta.agent {
            ConversationId::new(agent).map_err(|e| invalid("agent", e, "agent name"))?;
        }
        let target = match &as_id {
            Some(id) => id.clone(),
            None => SessionId::new(&export.id)
                .map_err(|e| EngineError::InvalidInput(format!("the export's id: {e}")))?,
        };
        let (_slot, mut guard) = self.lock_session(&target).await?;
        let store = self.log_store().clone();
        let imported = blocking(move || Ok(store.import(export, Some(target))?)).await?;
        *guard = None;
        Ok(imported)
    }

    pub(crate) async fn delete_session(&self, id: &SessionId) -> Result<SessionMeta, EngineError> {
        let (_slot, mut guard) = self.lock_session(id).await?;
        let store = self.log_store().clone();
        let id = id.clone();
        let meta = blocking(move || Ok(store.delete(&id)?)).await?;
        *guard = None;
        Ok(meta)
    }

    pub(crate) async fn session_context(
        &self,
        id: &SessionId,
    ) -> Result<SessionContext, EngineError> {
        let (_slot, guard) = self.lock_session(id).await?;
        let loaded = loaded(&guard, id)?;
        let (strategy, model) = self.session_strategy(id, &loaded.meta).await?;
        let counter = self.engine.context().counter(&model);
        let window = match loaded.meta.window {
            Some(tokens) if strategy.context_window_tokens.is_none() => tokens,
            _ => {
                self.engine
                    .context()
                    .window(&model, strategy.context_window_tokens)
                    .tokens
            }
        };
        let mut body = json!({"messages": loaded.history.instructions.clone()});
        if let Some(agent) = &loaded.meta.agent {
            if let Some(notes) = self.agent_notes_head(agent).await? {
                crate::inject::agent_notes(&mut body, &notes);
            }
        }
        let mut upstream = match body["messages"].take() {
            Value::Array(messages) => messages,
            _ => Vec::new(),
        };
        upstream.extend(loaded.history.upstream_messages());
        let folder = self.log_store().dir(id);
        let log = self.log_store().relative(&self.log_store().log_path(id));
        let usage = blocking(move || Ok(crate::state::usage::read_totals(&folder))).await?;
        Ok(SessionContext {
            log,
            id: id.clone(),
            tokens: messages_tokens(counter.as_ref(), &upstream),
            window,
            threshold: (strategy.compress_threshold * window as f64) as u64,
            messages: loaded.history.messages.len(),
            logged_messages: loaded.history.logged_messages,
            compressions: loaded.meta.compressions.max(loaded.history.compressions),
            compacted_messages: loaded.history.compaction().map_or(0, |c| c.covers),
            summary: loaded.history.compaction().map(|c| c.summary.clone()),
            governed_summary: loaded.meta.summary.clone(),
            sent_tokens: loaded.meta.tokens,
            mode: strategy.mode.as_str().to_owned(),
            log_bytes: loaded.log_bytes,
            counter: counter.name(),
            model,
            usage,
        })
    }

    pub(crate) async fn session_tool_output(
        &self,
        id: &SessionId,
        call_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<ToolOutputSlice, EngineError> {
        self.log_store().existing_meta(id)?;
        let outputs = DirOutputStore::new(self.log_store().tool_outputs_dir(id));
        read_output(
            outputs,
            call_id,
            offset,
            limit,
            format!("session {:?}", id.as_str()),
        )
        .await
    }

    pub(crate) async fn offloaded_calls(
        &self,
        id: &SessionId,
        call_ids: Vec<String>,
    ) -> Result<std::collections::HashSet<String>, EngineError> {
        self.log_store().existing_meta(id)?;
        let outputs = DirOutputStore::new(self.log_store().tool_outputs_dir(id));
        blocking(move || {
            Ok(call_ids
                .into_iter()
                .filter(|call| outputs.has(call))
                .collect())
        })
        .await
    }

    pub(crate) async fn conversation_tool_output(
        &self,
        conversation: &ConversationId,
        call_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<ToolOutputSlice, EngineError> {
        let outputs = DirOutputStore::new(
            self.engine
                .settings()
                .settings_dir(conversation)
                .child(mnemo_store::layout::TOOL_OUTPUTS_DIR),
        );
        read_output(
            outputs,
            call_id,
            offset,
            limit,
            format!("conversation {conversation:?}"),
        )
        .await
    }

    pub(crate) async fn search_history(
        &self,
        scope: HistoryScope,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Excerpt>, EngineError> {
        if query.trim().is_empty() {
            return Err(EngineError::InvalidInput("the query is empty".into()));
        }
        if query.len() > mnemo_core::MAX_QUERY_BYTES {
            return Err(EngineError::InvalidInput(format!(
                "query is {} bytes; a query holds at most {}",
                query.len(),
                mnemo_core::MAX_QUERY_BYTES
            )));
        }
        let store = self.log_store().clone();
        let query = query.to_owned();
        blocking(move || {
            let ids: Vec<SessionId> = match scope {
                HistoryScope::Session(id) => {
                    store.existing_meta(&id)?;
                    vec![id]
                }
                HistoryScope::Conversation(conversation) => store
                    .list(false)?
                    .into_iter()
                    .filter(|(_, meta)| meta.conversation == conversation.as_str())
                    .map(|(id, _)| id)
                    .collect(),
            };
            // One log in memory at a time: each is searched as it is read, and only its
            // best excerpts are kept.
            let mut excerpts = Vec::new();
            for id in ids {
                let records = store.read_log(&id)?.records;
                excerpts.extend(mnemo_session::search::search(
                    [(id.as_str(), records.as_slice())],
                    &query,
                    limit,
                ));
            }
            Ok(mnemo_session::search::best(excerpts, limit))
        })
        .await
    }

    /// The strategy and model a session's requests are governed with.
    pub(super) async fn session_strategy(
        &self,
        id: &SessionId,
        meta: &SessionMeta,
    ) -> Result<(mnemo_context::strategy::ResolvedStrategy, String), EngineError> {
        let conversation = stored_conversation(id, meta)?;
        let stored = self
            .engine
            .settings()
            .conversation_strategy(&conversation)
            .await?;
        let agent = self
            .engine
            .config()
            .context
            .agent_strategy(meta.agent.as_deref());
        let model = meta
            .model
            .clone()
            .unwrap_or_else(|| self.engine.config().llm_model.clone());
        let strategy = crate::conversation_settings::owned_history_default(stored.over(&agent));
        Ok((strategy.resolve(), model))
    }
}

/// Reads a slice of an offloaded output kept in `dir`; `owner` names where, for the 404.
async fn read_output(
    outputs: DirOutputStore,
    call_id: &str,
    offset: usize,
    limit: usize,
    owner: String,
) -> Result<ToolOutputSlice, EngineError> {
    let call = call_id.to_owned();
    let limit = limit.min(MAX_OUTPUT_READ);
    let read = blocking(move || {
        let path = outputs.path_of(&call);
        outputs
            .read(&call, offset, limit)
            .map_err(|source| EngineError::Io {
                action: "cannot read an offloaded output in",
                path: path.parent().map(Into::into).unwrap_or(path),
                source,
            })
    })
    .await?;
    let (text, total_chars) = read.ok_or_else(|| {
        EngineError::NotFound(format!(
            "{owner} has no offloaded output of tool call {call_id:?}"
        ))
    })?;
    Ok(ToolOutputSlice {
        call_id: call_id.to_owned(),
        offset,
        total_chars,
        text,
    })
}
