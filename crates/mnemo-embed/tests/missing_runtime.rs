//! Runs in its own process: ONNX Runtime can be loaded only once per process, so the
//! "library missing" case must come before any successful load.

use mnemo_embed::{EmbedError, Embedder, EmbedderConfig};

#[test]
fn a_missing_runtime_library_names_the_path_and_the_setup_command() {
    let models = mnemo_test_support::models_dir();
    let cfg = EmbedderConfig::new(
        "/nonexistent/libonnxruntime.so",
        models.join("all-MiniLM-L6-v2"),
    );
    let err = Embedder::load(&cfg).unwrap_err();
    assert!(matches!(err, EmbedError::Missing { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("/nonexistent/libonnxruntime.so"), "{msg}");
    assert!(msg.contains("scripts/setup"), "{msg}");
}
