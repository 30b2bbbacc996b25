//! Query expansion by the LLM (`[retrieval] query_expansion`): words an answer to the query
//! would use, asked of the upstream and added to the search's words. Not to be confused
//! with the store's words nearest a query ([`crate::index::vocabulary`]) or the model's words
//! added to a memory's key ([`crate::index::model_words`]): those need no LLM.

use std::time::Duration;

use mnemo_llm::{ChatMessage, LlmClient};
use tracing::warn;

const QUERY_EXPANSION_PROMPT: &str = "List 8 to 12 words or short phrases, comma-separated, that messages answering this question would likely contain: synonyms, related activities, kinds of things. Do not answer the question. No commentary.";

/// Longest expansion kept: a few dozen words; a rambling reply is cut here.
const MAX_EXPANSION_CHARS: usize = 300;

/// The messages asking for words an answer to `query` would use: the optional query
/// expansion of the read path (`[retrieval] query_expansion`). The reply is plain text, not
/// JSON: it is only ever added to a search's words.
fn messages(query: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system(QUERY_EXPANSION_PROMPT),
        ChatMessage::user(query),
    ]
}

/// The words of an expansion reply, on one line and cut to a bounded length; `None` when
/// nothing is left.
fn words_of(reply: &str) -> Option<String> {
    let words: String = reply
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(MAX_EXPANSION_CHARS)
        .collect();
    (!words.is_empty()).then_some(words)
}

/// Words an answer to `query` would use, from `llm`. A search never fails for want of them:
/// an error or a late answer (past `wait`) gives none.
pub(crate) async fn ask(llm: &LlmClient, query: &str, wait: Duration) -> Option<String> {
    let body = serde_json::json!({
        "messages": messages(query),
        "temperature": 0,
        "max_tokens": 60,
    });
    let reply = match tokio::time::timeout(wait, llm.chat(&body)).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => {
            warn!("query expansion failed, searching without it: {e}");
            return None;
        }
        Err(_) => {
            warn!("query expansion took longer than {wait:?}, searching without it");
            return None;
        }
    };
    words_of(reply["choices"][0]["message"]["content"].as_str()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expansion_reply_is_one_bounded_line() {
        assert_eq!(
            words_of("books, novel,\n  author ").as_deref(),
            Some("books, novel, author")
        );
        assert_eq!(words_of(" \n "), None);
        let long = "word ".repeat(200);
        assert_eq!(
            words_of(&long).map(|w| w.chars().count()),
            Some(MAX_EXPANSION_CHARS)
        );
    }
}
