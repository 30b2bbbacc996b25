//! What `mnemo add` accepts: a JSON list (of strings, or of `{content, conversation_id}`
//! objects), or plain lines where list markers (`-`, `*`, `+`, `1.`, `1)`) are stripped.

use serde::Deserialize;

/// One memory to add; `conversation_id` overrides the command's `-c`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMemory {
    pub content: String,
    pub conversation_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JsonItem {
    Text(String),
    Object {
        content: String,
        #[serde(default)]
        conversation_id: Option<String>,
    },
}

/// Parses `add` input. JSON is recognised by a leading `[`; a JSON error is reported, not
/// silently read as lines.
pub fn parse(input: &str) -> Result<Vec<NewMemory>, String> {
    let trimmed = input.trim_start_matches('\u{feff}').trim();
    let items: Vec<NewMemory> = if trimmed.starts_with('[') {
        let items: Vec<JsonItem> = serde_json::from_str(trimmed).map_err(|e| {
            format!("input looks like JSON but is not a list of strings or {{\"content\": ...}} objects: {e}")
        })?;
        items
            .into_iter()
            .map(|item| match item {
                JsonItem::Text(content) => NewMemory {
                    content,
                    conversation_id: None,
                },
                JsonItem::Object {
                    content,
                    conversation_id,
                } => NewMemory {
                    content,
                    conversation_id,
                },
            })
            .collect()
    } else {
        trimmed
            .lines()
            .map(strip_list_marker)
            .filter(|line| !line.is_empty())
            .map(|line| NewMemory {
                content: line.to_owned(),
                conversation_id: None,
            })
            .collect()
    };
    let items: Vec<NewMemory> = items
        .into_iter()
        .map(|m| NewMemory {
            content: m.content.trim().to_owned(),
            ..m
        })
        .collect();
    if items.iter().any(|m| m.content.is_empty()) {
        return Err("a memory in the input is empty".into());
    }
    Ok(items)
}

fn strip_list_marker(line: &str) -> &str {
    let line = line.trim();
    for marker in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(marker) {
            return rest.trim();
        }
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        let rest = &line[digits..];
        if let Some(rest) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return rest.trim();
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(input: &str) -> Vec<String> {
        parse(input)
            .unwrap()
            .into_iter()
            .map(|m| m.content)
            .collect()
    }

    #[test]
    fn lines_lose_their_list_markers() {
        let input = "- I like tea\n* My cat is Tom\n\n+ plus item\n1. first\n12) twelfth\n2024 was a good year\n-5 degrees is cold\n";
        assert_eq!(
            contents(input),
            [
                "I like tea",
                "My cat is Tom",
                "plus item",
                "first",
                "twelfth",
                "2024 was a good year",
                "-5 degrees is cold"
            ]
        );
    }

    #[test]
    fn json_lists_of_strings_and_objects() {
        assert_eq!(contents(r#"["a", " b "]"#), ["a", "b"]);
        let items =
            parse(r#"[{"content": "x", "conversation_id": "work"}, {"content": "y"}]"#).unwrap();
        assert_eq!(items[0].conversation_id.as_deref(), Some("work"));
        assert_eq!(items[1].conversation_id, None);
    }

    #[test]
    fn broken_json_and_empty_items_are_errors() {
        assert!(parse(r#"["a", "#).unwrap_err().contains("JSON"));
        assert!(parse(r#"[{"text": "a"}]"#).is_err());
        assert!(parse(r#"["a", "  "]"#).unwrap_err().contains("empty"));
        assert!(parse("").unwrap().is_empty());
    }
}
