//! The resources: what a host may read into its context without a tool call.
//!
//! - `mnemo://conversations/{conversation}/summary`: a conversation's rolling summary, as
//!   the write path keeps it;
//! - `mnemo://agents/{agent}/MEMORY.md`: an agent's own notes.
//!
//! Both are Markdown, read from disk on every request (a hand edit shows at once). A listing
//! holds the ones that exist and that the caller may read; the templates let a host ask for
//! any other by name.

use mnemo_engine::{EngineError, ScopedClient};
use rmcp::model::{
    AnnotateAble, RawResource, RawResourceTemplate, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate,
};
use rmcp::ErrorData;

use crate::tools::conversation_id;

const SCHEME: &str = "mnemo://";
const MARKDOWN: &str = "text/markdown";

/// The URI of `conversation`'s rolling summary.
pub fn summary_uri(conversation: &str) -> String {
    format!("{SCHEME}conversations/{conversation}/summary")
}

/// The URI of `agent`'s notes.
pub fn agent_notes_uri(agent: &str) -> String {
    format!("{SCHEME}agents/{agent}/MEMORY.md")
}

/// What a resource URI names.
#[derive(Debug, PartialEq, Eq)]
enum Named<'a> {
    Summary(&'a str),
    AgentNotes(&'a str),
}

fn parse(uri: &str) -> Option<Named<'_>> {
    let rest = uri.strip_prefix(SCHEME)?;
    if let Some(conversation) = rest
        .strip_prefix("conversations/")
        .and_then(|r| r.strip_suffix("/summary"))
    {
        return Some(Named::Summary(conversation));
    }
    rest.strip_prefix("agents/")
        .and_then(|r| r.strip_suffix("/MEMORY.md"))
        .map(Named::AgentNotes)
}

/// The summaries and notes that exist and that `caller` may read.
pub(crate) fn list(caller: &ScopedClient) -> Vec<Resource> {
    let summaries = caller
        .summarised_conversations()
        .into_iter()
        .map(|conversation| {
            RawResource::new(
                summary_uri(conversation.as_str()),
                format!("{conversation} summary"),
            )
            .with_description(format!(
                "The rolling summary of conversation {conversation:?}: what mnemo knows about it, in a few paragraphs."
            ))
            .with_mime_type(MARKDOWN)
            .no_annotation()
        });
    let notes = caller.agents_with_notes().into_iter().map(|agent| {
        RawResource::new(agent_notes_uri(&agent), format!("{agent} notes"))
            .with_description(format!("Agent {agent:?}'s own notes (MEMORY.md)."))
            .with_mime_type(MARKDOWN)
            .no_annotation()
    });
    summaries.chain(notes).collect()
}

/// The two URI templates.
pub(crate) fn templates() -> Vec<ResourceTemplate> {
    vec![
        RawResourceTemplate::new(summary_uri("{conversation}"), "conversation summary")
            .with_description("A conversation's rolling summary.")
            .with_mime_type(MARKDOWN)
            .no_annotation(),
        RawResourceTemplate::new(agent_notes_uri("{agent}"), "agent notes")
            .with_description("An agent's own notes (MEMORY.md).")
            .with_mime_type(MARKDOWN)
            .no_annotation(),
    ]
}

/// The resource `uri` names, when `caller` may read it.
pub(crate) async fn read(
    caller: &ScopedClient,
    uri: &str,
) -> Result<ReadResourceResult, ErrorData> {
    let text = match parse(uri) {
        Some(Named::Summary(conversation)) => {
            let conversation =
                conversation_id(conversation).map_err(|e| ErrorData::invalid_params(e, None))?;
            caller.summary(&conversation).await
        }
        Some(Named::AgentNotes(agent)) => {
            caller.agent_memory(agent).await.map(|notes| notes.content)
        }
        None => {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown resource {uri:?}: mnemo serves {} and {}",
                    summary_uri("<conversation>"),
                    agent_notes_uri("<agent>")
                ),
                None,
            ))
        }
    }
    .map_err(resource_error)?;
    Ok(ReadResourceResult::new(vec![
        ResourceContents::TextResourceContents {
            uri: uri.to_owned(),
            mime_type: Some(MARKDOWN.to_owned()),
            text,
            meta: None,
        },
    ]))
}

fn resource_error(error: EngineError) -> ErrorData {
    if error.is_not_found() {
        ErrorData::resource_not_found(error.to_string(), None)
    } else if error.is_invalid_input() {
        ErrorData::invalid_params(error.to_string(), None)
    } else if error.is_forbidden() {
        ErrorData::invalid_request(error.to_string(), None)
    } else {
        tracing::warn!("MCP resource read failed: {error}");
        ErrorData::internal_error(error.to_string(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_and_nothing_else_parses() {
        assert_eq!(parse(&summary_uri("trip")), Some(Named::Summary("trip")));
        assert_eq!(
            parse(&agent_notes_uri("coder")),
            Some(Named::AgentNotes("coder"))
        );
        for other in [
            "mnemo://conversations/trip",
            "file:///etc/passwd",
            "mnemo://agents/coder/notes.md",
            "mnemo://other/x/summary",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
        // A hostile name parses, and is refused by the id rules when read.
        assert_eq!(
            parse("mnemo://conversations/../x/summary"),
            Some(Named::Summary("../x"))
        );
        assert!(conversation_id("../x").is_err());
    }
}
