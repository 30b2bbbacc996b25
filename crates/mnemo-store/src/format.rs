//! The on-disk format of one memory: YAML front matter, then the content as the body.
//!
//! Reading is deliberately forgiving, because people edit these files by hand: a byte-order
//! mark, CRLF line ends, odd whitespace, missing optional fields, unknown fields (kept, under
//! `metadata`) and a file with no front matter at all are all still memories. What is missing
//! is derived from where the file lives ([`Location`]). Only a file whose front matter cannot
//! be parsed, or which has no content, is refused, with a message saying why.

use std::path::Path;

use chrono::{DateTime, NaiveDate, NaiveDateTime, SecondsFormat, Utc};
use mnemo_core::{MemoryId, MemoryRecord, Metadata, Role};
use serde::Serialize;
use serde_json::Value;

use crate::layout::{Location, MemoryKind};

/// Why a file could not be read as a memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// A first line `---` opens front matter, but no later `---` line closes it.
    #[error("front matter opened with '---' on the first line is never closed")]
    UnclosedFrontMatter,
    /// The front matter is not YAML; holds the parser's message, on one line.
    #[error("front matter is not valid YAML: {0}")]
    BadYaml(String),
    /// The front matter is YAML but not `key: value` fields; says what it is instead.
    #[error("front matter must be a mapping of fields, found {0}")]
    NotAMapping(&'static str),
    /// The body is empty or only whitespace: there is no memory to keep.
    #[error("the file holds no content")]
    Empty,
    /// The metadata is deeper or larger than a memory may carry (see
    /// [`mnemo_core::check_metadata`]); the file is left as it is.
    #[error("{0}")]
    Metadata(String),
}

/// What is known about a file besides its text.
#[derive(Debug, Clone)]
pub struct FileContext<'a> {
    /// Where the file lives, which decides its conversation and role.
    pub location: &'a Location,
    /// Path relative to the store root; names derived ids, so they stay stable.
    pub relative_path: &'a Path,
    /// The file's modification time: its creation time when neither the front matter nor the
    /// file name gives one.
    pub modified: Option<DateTime<Utc>>,
}

/// A parsed record, plus notes on what had to be derived or ignored.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The memory, with whatever the file lacked filled in.
    pub record: MemoryRecord,
    /// One line per value that was ignored or derived instead (an id that is no UUID, a role
    /// that contradicts the folder, ...); empty for a file mnemo wrote.
    pub warnings: Vec<String>,
}

/// Renders a record as the file mnemo writes.
pub fn render(record: &MemoryRecord) -> String {
    #[derive(Serialize)]
    struct FrontMatter<'a> {
        id: String,
        conversation_id: &'a str,
        role: Role,
        created_at: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        summary_kind: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        replaced_by: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        source_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        deleted_at: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        conflicts_with: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        compatible_with: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'a str>,
        #[serde(skip_serializing_if = "Metadata::is_empty")]
        metadata: &'a Metadata,
    }
    let ts = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
    let front = FrontMatter {
        id: record.id.to_string(),
        conversation_id: record.conversation_id.as_str(),
        role: record.role,
        created_at: ts(&record.created_at),
        summary_kind: record.summary_kind.as_deref(),
        replaced_by: record.replaced_by.map(|id| id.to_string()),
        source_id: record.source_id.map(|id| id.to_string()),
        deleted_at: record.deleted_at.as_ref().map(ts),
        conflicts_with: record.conflicts_with.map(|id| id.to_string()),
        compatible_with: record
            .compatible_with
            .iter()
            .map(|id| id.to_string())
            .collect(),
        reason: record.reason.as_deref(),
        metadata: &record.metadata,
    };
    // Strings, ids and JSON values (string keys only) always have a YAML form.
    let yaml = serde_saphyr::to_string(&front).expect("front matter serialises");
    let yaml = if yaml.ends_with('\n') {
        yaml
    } else {
        format!("{yaml}\n")
    };
    format!("---\n{yaml}---\n{}\n", record.content.trim())
}

/// Parses a file's text; see the module docs for what is tolerated.
pub fn parse(text: &str, ctx: &FileContext<'_>) -> Result<Parsed, FormatError> {
    let text = normalise(text);
    let (fields, body) = split_front_matter(&text)?;
    let content = body.trim().to_owned();
    if content.is_empty() {
        return Err(FormatError::Empty);
    }
    let mut warnings = Vec::new();
    let record = build_record(fields, content, ctx, &mut warnings);
    mnemo_core::check_metadata(&record.metadata).map_err(FormatError::Metadata)?;
    Ok(Parsed { record, warnings })
}

fn normalise(text: &str) -> String {
    text.strip_prefix('\u{feff}')
        .unwrap_or(text)
        .replace("\r\n", "\n")
}

/// Splits a file into its front matter's fields and its body. Front matter is what lies
/// between a first line `---` and the next line `---`; a file not opening with one has none.
fn split_front_matter(text: &str) -> Result<(serde_json::Map<String, Value>, String), FormatError> {
    let Some((first, rest)) = text.split_once('\n') else {
        return Ok((serde_json::Map::new(), text.to_owned()));
    };
    if first.trim_end() != "---" {
        return Ok((serde_json::Map::new(), text.to_owned()));
    }
    let mut yaml_len = 0;
    let mut body = None;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            body = Some(&rest[yaml_len + line.len()..]);
            break;
        }
        yaml_len += line.len();
    }
    let body = body.ok_or(FormatError::UnclosedFrontMatter)?;
    let yaml = &rest[..yaml_len];
    let data: Option<Value> = if yaml.trim().is_empty() {
        None
    } else {
        crate::untrusted::from_yaml(yaml)
            .map_err(|e| FormatError::BadYaml(one_line(&e.to_string())))?
    };
    let fields = match data {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(map)) => map,
        Some(Value::Array(_)) => return Err(FormatError::NotAMapping("a list")),
        Some(_) => return Err(FormatError::NotAMapping("a single value")),
    };
    Ok((fields, body.to_owned()))
}

/// A parser's message on one line: it goes into a log line and a `skipped` list.
fn one_line(message: &str) -> String {
    let line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

fn build_record(
    mut fields: serde_json::Map<String, Value>,
    content: String,
    ctx: &FileContext<'_>,
    warnings: &mut Vec<String>,
) -> MemoryRecord {
    let location = ctx.location;
    let (name_id, name_time) = location.name_parts();
    let mut take_str = |key: &str| take_string(&mut fields, key);

    let id = match take_str("id").map(|raw| (raw.parse::<MemoryId>(), raw)) {
        Some((Ok(id), _)) => id,
        Some((Err(_), raw)) => {
            warnings.push(format!("id {raw:?} is not a UUID; derived one instead"));
            derive_id(location, name_id, ctx.relative_path)
        }
        None => derive_id(location, name_id, ctx.relative_path),
    };

    if let Some(conv) = take_str("conversation_id") {
        if conv != location.conversation.as_str() {
            warnings.push(format!(
                "conversation_id {conv:?} differs from its folder; the folder {:?} wins",
                location.conversation.as_str()
            ));
        }
    }
    let role = location.kind.role();
    if let Some(raw) = take_str("role") {
        if raw.parse::<Role>().ok() != Some(role) {
            warnings.push(format!(
                "role {raw:?} does not match its folder; the folder's role {role} wins"
            ));
        }
    }

    // A time in the future would make a memory the newest for ever: first in recency, last
    // to be evicted. A day of slack covers clocks and time zones typed by hand.
    let latest = Utc::now() + chrono::Duration::days(1);
    let created_at = take_str("created_at")
        .and_then(|raw| {
            let parsed = parse_time(&raw);
            match parsed {
                None => warnings.push(format!(
                    "created_at {raw:?} is not a date; derived one instead"
                )),
                Some(t) if t > latest => warnings.push(format!(
                    "created_at {raw:?} is in the future; derived one instead"
                )),
                Some(_) => {}
            }
            parsed.filter(|t| *t <= latest)
        })
        .or(name_time.filter(|t| *t <= latest))
        .or(ctx.modified.filter(|t| *t <= latest))
        .unwrap_or_else(Utc::now);

    let mut id_field = |key: &str, warnings: &mut Vec<String>| {
        take_string(&mut fields, key).and_then(|raw| {
            let id = raw.parse::<MemoryId>().ok();
            if id.is_none() {
                warnings.push(format!("{key} {raw:?} is not a UUID; ignored"));
            }
            id
        })
    };
    let replaced_by = id_field("replaced_by", warnings);
    let source_id = id_field("source_id", warnings);
    let conflicts_with = id_field("conflicts_with", warnings);
    let summary_kind = take_string(&mut fields, "summary_kind");
    let deleted_at = take_string(&mut fields, "deleted_at").and_then(|raw| parse_time(&raw));
    let compatible_with = id_list(fields.remove("compatible_with"), warnings);
    let reason = take_string(&mut fields, "reason");

    let mut metadata = match fields.remove("metadata") {
        Some(Value::Object(map)) => map,
        None | Some(Value::Null) => Metadata::new(),
        Some(other) => {
            warnings.push("metadata is not a mapping; kept under metadata.value".into());
            Metadata::from_iter([("value".to_owned(), other)])
        }
    };
    // Unknown top-level fields are the user's: keep them rather than drop them.
    for (key, value) in fields {
        metadata.entry(key).or_insert(value);
    }

    MemoryRecord {
        id,
        conversation_id: location.conversation.clone(),
        role,
        created_at,
        content,
        summary_kind,
        replaced_by,
        source_id,
        deleted_at,
        conflicts_with,
        compatible_with,
        reason,
        metadata,
    }
}

/// Most ids a `compatible_with` list keeps: a person resolves conflicts one pair at a time,
/// and a hand-written list of thousands would only slow every read of the file.
pub const MAX_COMPATIBLE: usize = 64;

/// The ids of a front matter list (`compatible_with`); what is not a UUID, or past
/// [`MAX_COMPATIBLE`], is left out with a warning.
fn id_list(value: Option<Value>, warnings: &mut Vec<String>) -> Vec<MemoryId> {
    let items = match value {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(items)) => items,
        Some(one) => vec![one],
    };
    if items.len() > MAX_COMPATIBLE {
        warnings.push(format!(
            "compatible_with holds {} entries; only the first {MAX_COMPATIBLE} are read",
            items.len()
        ));
    }
    let mut ids = Vec::new();
    for item in items.iter().take(MAX_COMPATIBLE) {
        match item.as_str().and_then(|s| s.parse::<MemoryId>().ok()) {
            Some(id) => ids.push(id),
            None => warnings.push(format!(
                "compatible_with entry {item} is not a UUID; ignored"
            )),
        }
    }
    ids
}

fn take_string(fields: &mut serde_json::Map<String, Value>, key: &str) -> Option<String> {
    match fields.remove(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    }
}

fn derive_id(location: &Location, from_name: Option<MemoryId>, relative: &Path) -> MemoryId {
    if location.kind == MemoryKind::Summary && !location.tombstone {
        return MemoryId::summary_of(&location.conversation);
    }
    from_name.unwrap_or_else(|| MemoryId::derived_from(&relative.to_string_lossy()))
}

/// RFC 3339, or the looser `YYYY-MM-DD[ HH:MM[:SS]]` people type (taken as UTC).
fn parse_time(raw: &str) -> Option<DateTime<Utc>> {
    let raw = raw.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(raw) {
        return Some(t.to_utc());
    }
    for fmt in ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(raw, fmt) {
            return Some(t.and_utc());
        }
    }
    NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use mnemo_core::ConversationId;

    fn ctx_for(rel: &str) -> (Location, PathBuf) {
        let rel = PathBuf::from(rel);
        (Location::parse(&rel).unwrap(), rel)
    }

    fn parse_at(rel: &str, text: &str) -> Result<Parsed, FormatError> {
        let (location, rel) = ctx_for(rel);
        parse(
            text,
            &FileContext {
                location: &location,
                relative_path: &rel,
                modified: None,
            },
        )
    }

    fn sample() -> MemoryRecord {
        let mut r = MemoryRecord::new(
            ConversationId::new("c1").unwrap(),
            Role::Memory,
            "Anne is my wife.\n\nShe likes: colons, --- and \"quotes\".",
        );
        r.source_id = Some(MemoryId::random());
        r.metadata.insert("topic".into(), Value::from("family"));
        r.metadata.insert("weight".into(), Value::from(3));
        r
    }

    #[test]
    fn round_trips_every_field() {
        let mut record = sample();
        record.created_at = parse_time("2026-03-04T05:06:07.089Z").unwrap();
        record.replaced_by = Some(MemoryId::random());
        record.deleted_at = parse_time("2026-03-05T00:00:00Z");
        record.summary_kind = Some("rolling".into());
        record.conflicts_with = Some(MemoryId::random());
        record.compatible_with = vec![MemoryId::random(), MemoryId::random()];
        record.reason = Some("a person kept the later fact: \"yes\" # not a comment".into());
        let name = crate::layout::file_name(MemoryKind::Fact, record.id, record.created_at);
        let back = parse_at(&format!("entries/c1/facts/{name}"), &render(&record)).unwrap();
        assert_eq!(back.record, record);
        assert!(back.warnings.is_empty(), "{:?}", back.warnings);
    }

    #[test]
    fn a_compatible_with_list_is_read_up_to_its_bound_and_bad_ids_are_named() {
        let good = MemoryId::random();
        let mut many = format!("---\ncompatible_with:\n  - {good}\n  - not-an-id\n");
        for _ in 0..MAX_COMPATIBLE + 10 {
            many.push_str(&format!("  - {}\n", MemoryId::random()));
        }
        many.push_str("---\nThe user keeps bees.\n");
        let parsed = parse_at("entries/c1/facts/x.md", &many).unwrap();
        assert_eq!(parsed.record.compatible_with.len(), MAX_COMPATIBLE - 1);
        assert_eq!(parsed.record.compatible_with[0], good);
        let warnings = parsed.warnings.join("\n");
        assert!(
            warnings.contains("\"not-an-id\" is not a UUID"),
            "{warnings}"
        );
        assert!(
            warnings.contains("only the first 64 are read"),
            "{warnings}"
        );
        // One id alone is a list of one; a mapping is no id at all.
        let one = parse_at(
            "entries/c1/facts/y.md",
            &format!("---\ncompatible_with: {good}\n---\nx\n"),
        )
        .unwrap();
        assert_eq!(one.record.compatible_with, [good]);
    }

    #[test]
    fn strings_that_look_like_other_yaml_round_trip() {
        let tricky = [
            "yes",
            "no",
            "null",
            "~",
            "123",
            "1e3",
            "0x1f",
            "- a",
            ": x",
            "#c",
            "'",
            "\"",
            "a\nb",
            "@at",
            "`x`",
            "%x",
            "---",
            "...",
            "  padded  ",
            "ü ∑ 😀",
            "[1, 2]",
            "{a: 1}",
            "*alias",
            "&anchor",
            "!tag",
            "key: value",
            "2026-01-01",
            "true",
            "",
        ];
        let mut record = sample();
        for (i, text) in tricky.iter().enumerate() {
            record.metadata.insert(format!("k{i}"), Value::from(*text));
            record.metadata.insert((*text).to_owned(), Value::from(i));
        }
        record.metadata.insert(
            "nested".into(),
            serde_json::json!({"list": [1, "two", null, 2.5], "deep": {"x": true}}),
        );
        let name = crate::layout::file_name(MemoryKind::Fact, record.id, record.created_at);
        let back = parse_at(&format!("entries/c1/facts/{name}"), &render(&record)).unwrap();
        assert_eq!(back.record, record);
    }

    #[test]
    fn a_created_at_in_the_future_is_not_believed() {
        let text = "---\ncreated_at: 9999-01-01T00:00:00Z\n---\nFrom the far future.\n";
        let parsed = parse_at("entries/c1/facts/x.md", text).unwrap();
        assert!(parsed.record.created_at <= Utc::now());
        assert!(
            parsed.warnings[0].contains("is in the future"),
            "{:?}",
            parsed.warnings
        );
    }

    #[test]
    fn deep_or_large_metadata_refuses_the_file() {
        let mut nested = String::from("leaf");
        for _ in 0..=mnemo_core::MAX_METADATA_DEPTH {
            nested = format!("{{k: {nested}}}");
        }
        let text = format!("---\nmetadata: {nested}\n---\nbody\n");
        let err = parse_at("entries/c1/facts/x.md", &text).unwrap_err();
        assert!(matches!(err, FormatError::Metadata(_)), "{err}");
        let text = format!(
            "---\nnote: {}\n---\nbody\n",
            "x".repeat(mnemo_core::MAX_METADATA_BYTES)
        );
        assert!(matches!(
            parse_at("entries/c1/facts/x.md", &text).unwrap_err(),
            FormatError::Metadata(_)
        ));
    }

    #[test]
    fn metadata_is_bounded_by_what_its_aliases_expand_to_not_by_its_text() {
        // 250 bytes of header whose aliases would expand to 10^5 metadata leaves.
        let header = "---\nmetadata:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n  e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n---\n";
        assert!(header.len() <= 250, "{}", header.len());
        let err = parse_at("entries/c1/facts/x.md", &format!("{header}body\n")).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("alias") || message.contains("replay"),
            "{message}"
        );
        // Two levels of the same expand to 100 leaves: a hand-written anchor still reads.
        let small = "---\nmetadata:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n  b: [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n---\nbody\n";
        let parsed = parse_at("entries/c1/facts/x.md", small).unwrap();
        assert_eq!(parsed.record.metadata["b"][9][9], "x");
    }

    #[test]
    fn a_file_without_front_matter_is_a_memory() {
        let id = MemoryId::random();
        let rel = format!("entries/c1/facts/20260102T030405000Z__{id}.md");
        let parsed = parse_at(&rel, "  I prefer tea over coffee.\n\n").unwrap();
        assert_eq!(parsed.record.id, id);
        assert_eq!(parsed.record.content, "I prefer tea over coffee.");
        assert_eq!(parsed.record.role, Role::Memory);
        assert_eq!(
            parsed.record.created_at,
            parse_time("2026-01-02T03:04:05Z").unwrap()
        );
    }

    #[test]
    fn a_hand_named_file_gets_a_stable_derived_id() {
        let a = parse_at("entries/c1/facts/my-note.md", "hello").unwrap();
        let b = parse_at("entries/c1/facts/my-note.md", "hello again").unwrap();
        let c = parse_at("entries/c1/facts/other.md", "hello").unwrap();
        assert_eq!(a.record.id, b.record.id);
        assert_ne!(a.record.id, c.record.id);
    }

    #[test]
    fn crlf_bom_and_odd_whitespace_are_tolerated() {
        let record = sample();
        let text = format!("\u{feff}{}", render(&record).replace('\n', "\r\n"));
        let back = parse_at("entries/c1/facts/x.md", &text).unwrap();
        assert_eq!(back.record.id, record.id);
        assert_eq!(back.record.content, record.content);

        let text = "---   \nid: 3f1b7c2e-8d4a-4f6b-9c1d-2e3f4a5b6c7d\nrole:   memory\n---\n\n\n   padded body   \n\n";
        let back = parse_at("entries/c1/facts/x.md", text).unwrap();
        assert_eq!(back.record.content, "padded body");
    }

    #[test]
    fn extra_fields_are_kept_in_metadata() {
        let text =
            "---\nrole: memory\ntags: [a, b]\nmood: happy\nmetadata:\n  mood: sad\n---\nbody\n";
        let back = parse_at("entries/c1/facts/x.md", text).unwrap();
        let meta = &back.record.metadata;
        assert_eq!(meta["tags"], serde_json::json!(["a", "b"]));
        assert_eq!(
            meta["mood"], "sad",
            "explicit metadata wins over a stray field"
        );
    }

    #[test]
    fn bad_optional_fields_are_derived_with_a_warning() {
        let text = "---\nid: not-a-uuid\ncreated_at: yesterday\nrole: user\nconversation_id: other\n---\nbody\n";
        let back = parse_at("entries/c1/facts/x.md", text).unwrap();
        assert_eq!(back.record.role, Role::Memory);
        assert_eq!(back.record.conversation_id.as_str(), "c1");
        assert_eq!(back.warnings.len(), 4, "{:?}", back.warnings);
    }

    #[test]
    fn loose_dates_are_understood() {
        let text = "---\ncreated_at: 2023-05-08\n---\nbody\n";
        let back = parse_at("entries/c1/facts/x.md", text).unwrap();
        assert_eq!(
            back.record.created_at,
            parse_time("2023-05-08T00:00:00Z").unwrap()
        );
    }

    #[test]
    fn unparseable_files_say_why() {
        let cases = [
            ("---\nid: [unclosed\n---\nbody", "not valid YAML"),
            ("---\nid: x\nbody without end", "never closed"),
            ("---\n- a\n- b\n---\nbody", "a list"),
            (
                "---\nid: 3f1b7c2e-8d4a-4f6b-9c1d-2e3f4a5b6c7d\n---\n  \n",
                "no content",
            ),
            ("", "no content"),
        ];
        for (text, why) in cases {
            let err = parse_at("entries/c1/facts/x.md", text)
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }

    #[test]
    fn summaries_without_an_id_get_the_conversation_s_id() {
        let back = parse_at("entries/c1/summaries/summary.md", "All about c1.").unwrap();
        assert_eq!(
            back.record.id,
            MemoryId::summary_of(&ConversationId::new("c1").unwrap())
        );
        assert_eq!(back.record.role, Role::Summary);
    }
}
