//! Governing an agent's history with `mnemo-context`, offline:
//!
//! ```sh
//! cargo run -p mnemo-context --example govern
//! ```
//!
//! Builds a tool-heavy history of 60 turns, governs it for a model with a 16k-token window
//! (`mode: auto`: large outputs offloaded to files, old outputs compacted, the middle
//! summarised), and prints what went upstream and what was done. The summariser here is a
//! closure that writes a one-line digest; an agent would ask its LLM, with the messages of
//! `mnemo_context::summarize::prompt(&request)`.

use mnemo_context::compressor::FnSummariser;
use mnemo_context::summarize::SummaryRequest;
use mnemo_context::{
    counter_for_model, ContextWindows, DirOutputStore, DirSummaryStore, Governor, InflationGuard,
    StoreDir, Strategy,
};
use serde_json::{json, Value};

fn history() -> Vec<Value> {
    let mut messages =
        vec![json!({"role": "system", "content": "You are a careful coding agent."})];
    for turn in 0..60 {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "user", "content": format!("Step {turn}: run the tests and fix what fails.")}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "run_tests", "arguments": "{\"suite\": \"all\"}"}}]}));
        let lines = if turn % 10 == 0 { 3000 } else { 60 };
        let output: String = (0..lines)
            .map(|i| format!("test case_{turn}_{i} ... ok\n"))
            .collect();
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        messages
            .push(json!({"role": "assistant", "content": format!("Step {turn}: all tests pass.")}));
    }
    messages
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let model = "gpt-4o-mini";
    let counter = counter_for_model(model);
    let mut windows = ContextWindows::default();
    windows.set(model, 16_000);
    let summariser = FnSummariser(|request: SummaryRequest| async move {
        let carried = request
            .previous
            .map(|p| format!("{p} "))
            .unwrap_or_default();
        Ok(format!(
            "{carried}Ran the test suite {} messages' worth; every step passed.",
            request.messages.len()
        ))
    });
    let summaries = DirSummaryStore::new(StoreDir::new(dir.path(), dir.path().join("summaries")));
    let outputs = DirOutputStore::new(StoreDir::new(dir.path(), dir.path().join("tool_outputs")));
    let guard = InflationGuard::default();
    let governor = Governor {
        counter: counter.as_ref(),
        window: windows.window(model, None),
        model,
        summariser: Some(&summariser),
        summaries: Some(&summaries),
        outputs: Some(&outputs),
        guard: Some(&guard),
        callbacks: None,
        summary_chunk_tokens: 8_000,
        reserve_output: 1_000,
        margin: 64,
    };
    let strategy =
        Strategy::from_json(json!({"mode": "auto", "focus": "test failures"}))?.resolve();
    let governed = governor.govern(history(), &strategy).await?;
    let report = &governed.report;
    println!(
        "{} messages, {} tokens -> {} messages, {} tokens (window {}, counted with {})",
        history().len(),
        report.tokens_before,
        governed.messages.len(),
        report.tokens_after,
        report.window,
        report.counter
    );
    println!("stages: {}", report.stages.join(", "));
    println!(
        "offloaded {} outputs, compacted {}, summarised {} messages ({:?})",
        report.offloaded.len(),
        report.compacted,
        report.summarised_messages,
        report.summary
    );
    println!(
        "second message upstream:\n{}",
        governed.messages[1]["content"]
    );
    Ok(())
}
