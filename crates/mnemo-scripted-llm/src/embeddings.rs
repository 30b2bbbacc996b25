//! `/v1/embeddings` as an OpenAI-compatible server answers it, with vectors anyone can
//! compute: each word of a text (lower-cased, letters and digits) adds one to the component
//! its hash picks, so texts sharing words are near and texts sharing none are orthogonal.
//! Enough for tests of the embedder's seam: batching, order, dimensions, failures.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use crate::reply::{error, json_response};

/// Components of a vector when the request does not ask for a number.
pub const DEFAULT_DIMENSIONS: usize = 64;
/// The most components a request may ask for.
const MAX_DIMENSIONS: usize = 4096;

/// The vector the server gives `text` with `dimensions` components (not normalised).
pub fn embedding_of(text: &str, dimensions: usize) -> Vec<f32> {
    let mut vector = vec![0.0; dimensions];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word = word.to_lowercase();
        // FNV-1a: stable across runs and platforms.
        let hash = word.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        vector[(hash % dimensions as u64) as usize] += 1.0;
    }
    vector
}

/// The answer to an embeddings request's `body`.
pub(crate) fn answer(body: Option<&Value>) -> Response {
    let Some(body) = body.filter(|b| b.is_object()) else {
        return error(400, "the request body is not a JSON object");
    };
    let texts: Vec<&str> = match &body["input"] {
        Value::String(text) => vec![text.as_str()],
        Value::Array(items) => match items.iter().map(Value::as_str).collect::<Option<_>>() {
            Some(texts) => texts,
            None => return error(400, "input must be a string or a list of strings"),
        },
        _ => return error(400, "input must be a string or a list of strings"),
    };
    let dimensions = match &body["dimensions"] {
        Value::Null => DEFAULT_DIMENSIONS,
        value => match value.as_u64().map(|d| d as usize) {
            Some(d) if (1..=MAX_DIMENSIONS).contains(&d) => d,
            _ => return error(400, "dimensions must be a number from 1 to 4096"),
        },
    };
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(index, text)| {
            json!({"object": "embedding", "index": index, "embedding": embedding_of(text, dimensions)})
        })
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_sharing_words_are_near_and_others_orthogonal() {
        let a = embedding_of("The user grows tomatoes", 64);
        let b = embedding_of("tomatoes grow on the balcony", 64);
        let dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!(dot > 0.0);
        assert_eq!(a, embedding_of("the USER grows tomatoes!", 64));
        assert_eq!(embedding_of("", 8), vec![0.0; 8]);
    }
}
