//! The real all-MiniLM-L6-v2 model on the real ONNX Runtime library, as `scripts/setup`
//! installs them under `models/`.

use mnemo_embed::{cosine, EmbedError, Embedder, EmbedderConfig};
use mnemo_test_support::models_dir;

fn config() -> EmbedderConfig {
    let models = models_dir();
    EmbedderConfig::new(
        models.join("onnxruntime/libonnxruntime.so.1.31.1"),
        models.join("all-MiniLM-L6-v2"),
    )
}

fn embedder() -> Embedder {
    Embedder::load(&config())
        .unwrap_or_else(|e| panic!("{e} (models are installed by scripts/setup)"))
}

#[test]
fn vectors_have_384_unit_length_dimensions() {
    let e = embedder();
    assert_eq!(e.dimension(), 384);
    let v = e.embed(&["Anne is my wife.", "I dislike pizza."]).unwrap();
    assert_eq!(v.len(), 2);
    for vector in &v {
        assert_eq!(vector.len(), 384);
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
    assert!(e.embed::<&str>(&[]).unwrap().is_empty());
}

#[test]
fn embedding_is_deterministic_and_independent_of_the_batch() {
    let e = embedder();
    let alone = e.embed_one("My daughter plays the violin.").unwrap();
    let again = e.embed_one("My daughter plays the violin.").unwrap();
    assert_eq!(alone, again);
    let in_batch = e
        .embed(&[
            "A much longer sentence that forces padding of the shorter ones in the same batch, so attention masks matter.",
            "My daughter plays the violin.",
        ])
        .unwrap();
    let sim = cosine(&alone, &in_batch[1]);
    assert!(sim > 0.9999, "batching changed the vector: cosine {sim}");
}

#[test]
fn busy_time_counts_model_runs_and_not_texts_embedded_lately() {
    let e = embedder();
    let loaded = e.busy();
    e.embed_one("The kettle whistles at dawn.").unwrap();
    let ran = e.busy();
    assert!(ran > loaded, "a run adds its time: {loaded:?} -> {ran:?}");
    e.embed(&["The kettle whistles at dawn."]).unwrap();
    assert_eq!(
        e.busy(),
        ran,
        "a text embedded lately does not run the model"
    );
}

#[test]
fn related_text_is_closer_than_unrelated_text() {
    let e = embedder();
    let v = e
        .embed(&[
            "What is my wife's name?",
            "Anne is my wife.",
            "The stock market fell sharply on Tuesday.",
        ])
        .unwrap();
    let related = cosine(&v[0], &v[1]);
    let unrelated = cosine(&v[0], &v[2]);
    assert!(
        related > unrelated + 0.2,
        "related {related}, unrelated {unrelated}"
    );
}

#[test]
fn a_missing_model_names_the_path_and_the_setup_command() {
    let mut cfg = config();
    cfg.model_dir = std::path::PathBuf::from("/nonexistent/model-dir");
    let err = Embedder::load(&cfg).unwrap_err();
    assert!(matches!(err, EmbedError::Missing { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("/nonexistent/model-dir/model.onnx"), "{msg}");
    assert!(msg.contains("scripts/setup"), "{msg}");
}

#[test]
fn a_text_longer_than_the_window_is_the_mean_of_its_pieces() {
    // Twice one passage of about 90 tokens: cut into two even windows, each is the passage.
    let passage = "We drove from Lisbon to Porto on the second day, stopping in Coimbra for lunch \
                   at a small place near the old university, and reached the hotel by the river \
                   just before the rain started; the next morning we took the tram up the hill \
                   and bought tiles for the kitchen, blue and white ones with birds on them, \
                   which the shop wrapped in newspaper for the flight home on Sunday evening.";
    let twice = format!("{passage} {passage}");
    let windowed = embedder();
    let whole = Embedder::load(&EmbedderConfig {
        window_tokens: 256,
        ..config()
    })
    .unwrap();
    let alone = windowed.embed_one(passage).unwrap();
    assert_eq!(
        alone,
        whole.embed_one(passage).unwrap(),
        "a short text is read whole"
    );
    let in_windows = cosine(&windowed.embed(&[&twice]).unwrap()[0], &alone);
    let read_whole = cosine(&whole.embed(&[&twice]).unwrap()[0], &alone);
    assert!(in_windows > 0.9999, "windows {in_windows}");
    assert!(read_whole < 0.999, "whole {read_whole}");
}

/// Set-up rewrites the published graph (`source.onnx`) with ONNX Runtime's fused operators
/// (`scripts/minilm_fused.py`); the rewrite must compute the same vectors, padding and windows
/// included.
#[test]
fn the_fused_graph_gives_the_published_graphs_vectors() {
    let installed = models_dir().join("all-MiniLM-L6-v2");
    let published = tempfile::tempdir().unwrap();
    for file in [
        "tokenizer.json",
        "config.json",
        "special_tokens_map.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(installed.join(file), published.path().join(file)).unwrap();
    }
    std::fs::copy(
        installed.join("source.onnx"),
        published.path().join("model.onnx"),
    )
    .unwrap_or_else(|e| panic!("{e}: source.onnx (installed by scripts/setup core)"));
    let source = Embedder::load(&EmbedderConfig {
        model_dir: published.path().to_owned(),
        ..config()
    })
    .unwrap();
    let fused = embedder();
    let long = "We drove up the coast on Saturday, stopped twice for coffee, and reached the \
                lighthouse just before the storm came in from the west. "
        .repeat(12);
    let texts = [
        "Anne is my wife.",
        "A longer sentence in the same batch, so that the shorter ones are padded to it.",
        long.as_str(),
    ];
    let expected = source.embed(&texts).unwrap();
    let got = fused.embed(&texts).unwrap();
    for ((e, g), text) in expected.iter().zip(&got).zip(texts) {
        let largest = e
            .iter()
            .zip(g)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(largest < 1e-5, "{largest} apart for {text:.40}");
    }
}
