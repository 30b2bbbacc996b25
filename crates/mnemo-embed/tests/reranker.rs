//! The cross-encoder stage on ONNX Runtime, with the tiny cross-encoder that
//! `scripts/make_tiny_cross_encoder.py` generates (installed by `scripts/setup test`): the
//! document's tokens score apple 3, banana 2, cherry 1, rotten -4, anything else 0, and the
//! query's tokens never count.

use mnemo_embed::{EmbedError, Reranker, RerankerConfig};
use mnemo_test_support::models_dir as models;

fn config() -> RerankerConfig {
    let dir = models().join("tiny-cross-encoder");
    assert!(
        dir.join("model.onnx").is_file(),
        "{} is missing: run `scripts/setup test` to generate the tiny cross-encoder",
        dir.display()
    );
    RerankerConfig::new(models().join("onnxruntime/libonnxruntime.so.1.31.1"), dir)
}

#[test]
fn scores_documents_in_input_order_from_the_document_side_only() {
    let reranker = Reranker::load(&config()).unwrap();
    let docs = [
        "a cherry",
        "an apple and a banana",
        "nothing here",
        "a rotten apple",
        "Banana!",
    ];
    // The query mentions apples: a model that read the query side would lift every score.
    let scores = reranker.score("apple apple apple", &docs).unwrap();
    let expected = [1.0, 5.0, 0.0, -1.0, 2.0];
    for ((doc, got), want) in docs.iter().zip(&scores).zip(expected) {
        assert!((got - want).abs() < 1e-5, "{doc:?}: {got} != {want}");
    }
}

#[test]
fn batches_give_the_same_scores_as_one_call() {
    let mut cfg = config();
    cfg.batch_size = 2;
    let small_batches = Reranker::load(&cfg).unwrap();
    cfg.batch_size = 64;
    let one_batch = Reranker::load(&cfg).unwrap();
    let docs: Vec<String> = (0..7).map(|i| "apple ".repeat(i)).collect();
    assert_eq!(
        small_batches.score("q", &docs).unwrap(),
        one_batch.score("q", &docs).unwrap()
    );
}

#[test]
fn long_pairs_are_truncated_at_max_length() {
    let reranker = Reranker::load(&config()).unwrap();
    let filler = "word ".repeat(600);
    let late_apple = format!("{filler} apple");
    let early_apple = format!("apple {filler}");
    let scores = reranker.score("query", &[late_apple, early_apple]).unwrap();
    assert_eq!(scores, [0.0, 3.0], "the tail beyond 512 tokens is cut");
}

#[test]
fn a_missing_model_names_the_path_and_the_setup_command() {
    let mut cfg = config();
    cfg.model_dir = std::path::PathBuf::from("/nonexistent/cross-encoder");
    let err = Reranker::load(&cfg).unwrap_err();
    assert!(matches!(err, EmbedError::Missing { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("/nonexistent/cross-encoder/model.onnx"),
        "{msg}"
    );
    assert!(msg.contains("scripts/setup"), "{msg}");
}

#[test]
fn a_model_that_is_not_a_cross_encoder_is_refused() {
    // The embedding model has the right inputs but no `logits` output.
    let mut cfg = config();
    cfg.model_dir = models().join("all-MiniLM-L6-v2");
    let err = Reranker::load(&cfg).unwrap_err().to_string();
    assert!(err.contains("logits"), "{err}");
}
