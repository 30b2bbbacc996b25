//! History archive search: everything ever said in a session's log (abandoned branches and
//! compacted messages included), found again by its words.
//!
//! Each message becomes transcript lines labelled `User:`, `Assistant:`, `Tool:` or
//! `System:` (every line carries its label, so an excerpt is readable wherever it starts).
//! A line matches when it holds the query (case-insensitively) or any of its words; an
//! excerpt is a match with [`CONTEXT_LINES`] lines either side, overlapping excerpts merged.
//! Excerpts are ranked by how well they match (the whole phrase first, then the share of the
//! query's words they hold), newest first among equals.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::history::message_text;
use crate::log::Record;

/// Lines of context either side of a match.
pub const CONTEXT_LINES: usize = 5;
/// Excerpts returned at most.
pub const MAX_EXCERPTS: usize = 10;
/// Lines one excerpt holds at most: overlapping matches merge until it is this long, then a
/// new excerpt starts (a query that matches everything must not return everything).
pub const MAX_EXCERPT_LINES: usize = 4 * CONTEXT_LINES + 1;
/// Characters of one transcript line an excerpt shows at most.
pub const MAX_LINE_CHARS: usize = 500;

/// One excerpt of a log.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema, schemars::JsonSchema)]
pub struct Excerpt {
    /// The session it comes from.
    pub session: String,
    /// How well it matches (higher is better).
    pub score: f32,
    /// When the best-matching message was logged.
    pub at: DateTime<Utc>,
    /// The first line's number in the session's transcript (1-based).
    pub line: usize,
    /// The lines, labelled, joined by newlines.
    pub text: String,
}

/// One transcript line.
#[derive(Debug, Clone)]
struct Line {
    text: String,
    lower: String,
    at: DateTime<Utc>,
}

/// The transcript of a log's messages: one labelled line per line of text.
fn transcript(records: &[Record]) -> Vec<Line> {
    let mut lines = Vec::new();
    for record in records {
        let (at, messages): (_, Vec<&Value>) = match record {
            Record::Message { at, message, .. } => (*at, vec![message]),
            Record::Instructions { at, messages } => (*at, messages.iter().collect()),
            _ => continue,
        };
        for message in messages {
            let (label, text) = render(message);
            for piece in text.lines().filter(|l| !l.trim().is_empty()) {
                let text = format!("{label}: {piece}");
                lines.push(Line {
                    lower: text.to_lowercase(),
                    text,
                    at,
                });
            }
        }
    }
    lines
}

/// A message's label and text (tool calls written out, so they can be found too).
fn render(message: &Value) -> (&'static str, String) {
    let label = match message["role"].as_str().unwrap_or("") {
        "user" => "User",
        "assistant" => "Assistant",
        "tool" | "function" => "Tool",
        _ => "System",
    };
    let text = message_text(message);
    (label, text)
}

/// The query, read once: the phrase and its distinct words, lowercased.
struct Query {
    phrase: String,
    words: Vec<String>,
}

impl Query {
    fn new(query: &str) -> Self {
        let phrase = query
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        let mut words: Vec<String> = phrase
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect();
        words.sort();
        words.dedup();
        Self { phrase, words }
    }

    /// 0 for no match; else 2 for the phrase plus the share of the words present.
    fn score(&self, lower: &str) -> f32 {
        let phrase = if lower.contains(&self.phrase) {
            2.0
        } else {
            0.0
        };
        let found = self
            .words
            .iter()
            .filter(|w| lower.contains(w.as_str()))
            .count();
        if phrase == 0.0 && found == 0 {
            return 0.0;
        }
        phrase + found as f32 / self.words.len().max(1) as f32
    }
}

/// Searches the logs (`(session, records)`) for `query`; at most `limit` excerpts, best
/// first. An empty query finds nothing.
pub fn search<'a>(
    logs: impl IntoIterator<Item = (&'a str, &'a [Record])>,
    query: &str,
    limit: usize,
) -> Vec<Excerpt> {
    let query = Query::new(query);
    let limit = limit.min(MAX_EXCERPTS);
    if query.phrase.is_empty() || limit == 0 {
        return Vec::new();
    }
    let mut excerpts = Vec::new();
    for (session, records) in logs {
        let lines = transcript(records);
        // Only the best of each log are written out; memory stays bounded by the limit.
        let mut spans = spans_of(&lines, &query);
        spans.sort_by(|a, b| best_first(a.score, b.score, a.at, b.at).then(a.start.cmp(&b.start)));
        spans.truncate(limit);
        excerpts.extend(spans.into_iter().map(|span| span.excerpt(session, &lines)));
    }
    best(excerpts, limit)
}

/// The best `limit` (at most [`MAX_EXCERPTS`]) of `excerpts`, best first: what [`search`]
/// returns, for excerpts gathered a log at a time.
pub fn best(mut excerpts: Vec<Excerpt>, limit: usize) -> Vec<Excerpt> {
    excerpts.sort_by(|a, b| {
        best_first(a.score, b.score, a.at, b.at)
            .then(a.session.cmp(&b.session))
            .then(a.line.cmp(&b.line))
    });
    excerpts.truncate(limit.min(MAX_EXCERPTS));
    excerpts
}

fn best_first(
    a_score: f32,
    b_score: f32,
    a_at: DateTime<Utc>,
    b_at: DateTime<Utc>,
) -> std::cmp::Ordering {
    b_score.total_cmp(&a_score).then(b_at.cmp(&a_at))
}

/// Lines `start..end` of a transcript around one or more matches.
struct Span {
    start: usize,
    end: usize,
    best: f32,
    at: DateTime<Utc>,
    matches: usize,
    score: f32,
}

impl Span {
    fn excerpt(&self, session: &str, lines: &[Line]) -> Excerpt {
        Excerpt {
            session: session.to_owned(),
            score: self.score,
            at: self.at,
            line: self.start + 1,
            text: lines[self.start..self.end]
                .iter()
                .map(|l| match l.text.char_indices().nth(MAX_LINE_CHARS) {
                    Some((cut, _)) => format!("{}…", &l.text[..cut]),
                    None => l.text.clone(),
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// The excerpts of one transcript: each match with its context, overlaps merged up to
/// [`MAX_EXCERPT_LINES`]; an excerpt's score is its best line's, with a little for every
/// further matching line.
fn spans_of(lines: &[Line], query: &Query) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    let mut current: Option<Span> = None;
    for (i, line) in lines.iter().enumerate() {
        let score = query.score(&line.lower);
        if score == 0.0 {
            continue;
        }
        let start = i.saturating_sub(CONTEXT_LINES);
        let end = (i + CONTEXT_LINES + 1).min(lines.len());
        match &mut current {
            Some(span) if start <= span.end && end - span.start <= MAX_EXCERPT_LINES => {
                if score > span.best {
                    span.best = score;
                    span.at = line.at;
                }
                span.end = end.max(span.end);
                span.matches += 1;
            }
            _ => {
                let start = current.as_ref().map_or(start, |s| start.max(s.end));
                out.extend(current.take());
                current = Some(Span {
                    start,
                    end,
                    best: score,
                    at: line.at,
                    matches: 1,
                    score: 0.0,
                });
            }
        }
    }
    out.extend(current);
    for span in &mut out {
        span.score = span.best + 0.05 * (span.matches - 1) as f32;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn log(texts: &[(&str, &str)]) -> Vec<Record> {
        texts
            .iter()
            .map(|(role, text)| Record::message(json!({"role": role, "content": text})))
            .collect()
    }

    #[test]
    fn finds_labelled_excerpts_with_context() {
        let mut turns: Vec<(&str, &str)> = vec![("user", "filler"); 30];
        turns[10] = ("user", "The Parser crashes on empty input");
        turns[11] = ("assistant", "Try checking for an empty slice first.");
        turns[29] = ("tool", "parser: ok");
        let records = log(&turns);
        let hits = search([("s1", records.as_slice())], "parser CRASHES", 10);
        assert_eq!(hits.len(), 2);
        let best = &hits[0];
        assert!(
            best.text.contains("User: The Parser crashes"),
            "{}",
            best.text
        );
        assert_eq!(best.line, 6, "five lines of context before");
        assert_eq!(best.text.lines().count(), 11);
        assert!(best.text.contains("Assistant: Try checking"));
        assert!(hits[1].text.contains("Tool: parser: ok"));
        assert!(hits[0].score > hits[1].score);
    }

    #[test]
    fn at_most_ten_and_nothing_for_an_empty_query() {
        let turns: Vec<(&str, &str)> = vec![("user", "needle"); 400];
        let records = log(&turns);
        assert_eq!(search([("s", records.as_slice())], "", 10).len(), 0);
        // Every line matches: excerpts merge, but none grows past its cap.
        let hits = search([("s", records.as_slice())], "NEEDLE", 10);
        assert_eq!(hits.len(), 10);
        assert!(hits
            .iter()
            .all(|h| h.text.lines().count() <= MAX_EXCERPT_LINES));
        let many: Vec<Vec<Record>> = (0..30).map(|_| log(&[("user", "needle")])).collect();
        let names: Vec<String> = (0..30).map(|i| format!("s{i}")).collect();
        let hits = search(
            names
                .iter()
                .map(String::as_str)
                .zip(many.iter().map(Vec::as_slice)),
            "needle",
            50,
        );
        assert_eq!(hits.len(), MAX_EXCERPTS);
    }

    #[test]
    fn tool_calls_are_searchable() {
        let records = vec![Record::message(
            json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": "c", "type": "function",
                "function": {"name": "grep_repo", "arguments": "{\"q\":\"TODO\"}"}}]}),
        )];
        let hits = search([("s", records.as_slice())], "grep_repo", 10);
        assert_eq!(hits.len(), 1);
        assert!(hits[0].text.starts_with("Assistant: [calls grep_repo("));
    }
}
