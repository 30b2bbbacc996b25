//! What the upstream calls of a conversation and of a session added up to: tokens read and
//! written, and their cost where `genai-prices` knows the model.
//!
//! Each answer's `usage` is taken as the upstream reports it; an upstream that reports none
//! (a stream the client did not ask usage of, a server that never does) is counted by mnemo:
//! the prompt as governance counted it, the answer by the model's counter; such requests are
//! counted apart (`estimated_requests`). Totals are kept in `usage.json` beside the
//! conversation's strategy and in the session's folder, rewritten whole on each answer, and
//! for the whole process in memory (for `/metrics`).

use std::path::Path;
use std::sync::Mutex;

use mnemo_context::StoreDir;
use mnemo_store::layout::USAGE_FILE;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::warn;

/// The largest `usage.json` read back; a bigger one is not ours.
const MAX_USAGE_FILE_BYTES: u64 = 64 * 1024;

/// Tokens and cost summed over upstream calls.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
#[serde(default)]
pub struct UsageTotals {
    /// Answers counted.
    pub requests: u64,
    /// Tokens the upstream read (the prompt as sent, memories and summaries included).
    pub prompt_tokens: u64,
    /// Tokens the upstream wrote.
    pub completion_tokens: u64,
    /// Answers whose usage the upstream did not report: their tokens are mnemo's count.
    pub estimated_requests: u64,
    /// US dollars, over the answers whose model `genai-prices` prices.
    pub cost_usd: f64,
    /// Answers whose model has no price (a local model, an unknown name): not in `cost_usd`.
    pub unpriced_requests: u64,
}

impl UsageTotals {
    fn add(&mut self, turn: &TurnUsage) {
        self.requests += 1;
        self.prompt_tokens = self.prompt_tokens.saturating_add(turn.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(turn.completion_tokens);
        self.estimated_requests += u64::from(turn.estimated);
        match turn.cost_usd {
            Some(cost) => self.cost_usd += cost,
            None => self.unpriced_requests += 1,
        }
    }
}

/// What one answer used.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TurnUsage {
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
    pub(crate) estimated: bool,
    pub(crate) cost_usd: Option<f64>,
}

impl TurnUsage {
    /// An answer of `model`: its `reported` usage (OpenAI's `usage` object) when it has
    /// whole-number token counts, else `estimate()`; priced by `genai-prices`.
    pub(crate) fn new(
        model: &str,
        reported: Option<&Value>,
        estimate: impl FnOnce() -> (u64, u64),
    ) -> Self {
        let counted = reported.and_then(|usage| {
            Some((
                usage["prompt_tokens"].as_u64()?,
                usage["completion_tokens"].as_u64()?,
            ))
        });
        let estimated = counted.is_none();
        let (prompt_tokens, completion_tokens) = counted.unwrap_or_else(estimate);
        Self {
            prompt_tokens,
            completion_tokens,
            estimated,
            cost_usd: mnemo_context::cost::price_usd(model, prompt_tokens, completion_tokens),
        }
    }
}

/// The totals since the process started, and the one lock the files are changed under.
#[derive(Default)]
pub(crate) struct UsageLedger {
    overall: Mutex<UsageTotals>,
    files: Mutex<()>,
}

impl UsageLedger {
    /// Adds `turn` to the process's totals and to the `usage.json` of each folder. A file
    /// that cannot be read as totals starts again from zero, with a warning; one that cannot
    /// be written is left as it was, with a warning: the answer has gone already.
    pub(crate) fn record(&self, folders: &[StoreDir], turn: &TurnUsage) {
        self.overall
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(turn);
        let _held = self.files.lock().unwrap_or_else(|p| p.into_inner());
        for folder in folders {
            let mut totals = read_totals(folder);
            totals.add(turn);
            if let Err(e) = write_totals(folder, &totals) {
                warn!(folder = %folder.relative(), "cannot keep the usage totals: {e}");
            }
        }
    }

    /// The totals since the process started.
    pub(crate) fn overall(&self) -> UsageTotals {
        self.overall
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The totals kept in `folder` (zero when there are none yet).
pub(crate) fn read_totals(folder: &StoreDir) -> UsageTotals {
    match folder.read(USAGE_FILE, MAX_USAGE_FILE_BYTES) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            warn!(folder = %folder.relative(), "{USAGE_FILE} is not usage totals ({e}); counting from zero");
            UsageTotals::default()
        }),
        Err(e) if e.is_not_found() => UsageTotals::default(),
        Err(e) => {
            warn!(folder = %folder.relative(), "cannot read {USAGE_FILE} ({e}); counting from zero");
            UsageTotals::default()
        }
    }
}

fn write_totals(folder: &StoreDir, totals: &UsageTotals) -> Result<(), String> {
    folder.create().map_err(|e| e.to_string())?;
    let text = serde_json::to_vec_pretty(totals).map_err(|e| e.to_string())?;
    let path = folder.file(USAGE_FILE);
    mnemo_store::atomic::write_atomic(Path::new(&path), &text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reported_usage_is_taken_and_missing_usage_is_estimated() {
        let reported =
            json!({"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050});
        let turn = TurnUsage::new("gpt-4o", Some(&reported), || unreachable!());
        assert_eq!((turn.prompt_tokens, turn.completion_tokens), (1000, 50));
        assert!(!turn.estimated);
        assert!(turn.cost_usd.is_some_and(|c| c > 0.0));

        let broken = json!({"prompt_tokens": "many"});
        let turn = TurnUsage::new("local", Some(&broken), || (7, 3));
        assert_eq!(
            (turn.prompt_tokens, turn.completion_tokens, turn.estimated),
            (7, 3, true)
        );
        assert_eq!(turn.cost_usd, None);
    }

    #[test]
    fn totals_add_up_in_the_folder_and_a_bad_file_starts_again() {
        let dir = tempfile::tempdir().unwrap();
        let folder = StoreDir::new(dir.path(), dir.path().join("conversations/c1"));
        let ledger = UsageLedger::default();
        let priced = TurnUsage::new(
            "gpt-4o",
            Some(&json!({"prompt_tokens": 100, "completion_tokens": 10})),
            || (0, 0),
        );
        let local = TurnUsage::new("local", None, || (40, 4));
        ledger.record(std::slice::from_ref(&folder), &priced);
        ledger.record(std::slice::from_ref(&folder), &local);
        let totals = read_totals(&folder);
        assert_eq!(totals.requests, 2);
        assert_eq!((totals.prompt_tokens, totals.completion_tokens), (140, 14));
        assert_eq!(
            (totals.estimated_requests, totals.unpriced_requests),
            (1, 1)
        );
        assert_eq!(totals.cost_usd, priced.cost_usd.unwrap());
        assert_eq!(ledger.overall(), totals);

        std::fs::write(folder.file(USAGE_FILE), "not json").unwrap();
        ledger.record(std::slice::from_ref(&folder), &local);
        assert_eq!(read_totals(&folder).requests, 1, "counted again from zero");
        assert_eq!(ledger.overall().requests, 3);
    }
}
