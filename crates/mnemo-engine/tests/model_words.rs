//! The model's words for document expansion, with the real embedding model: embedded once
//! and kept beside the model, and the kept file treated as untrusted input. Each test uses a
//! folder of its own holding a small `tokenizer.json`, so that embedding its words is quick.

use std::path::Path;

use mnemo_core::Config;
use mnemo_embed::{Embedder, EmbedderConfig};
use mnemo_engine::VocabularyFile;
use mnemo_engine::{ModelWords, MODEL_WORDS_FILE};
use mnemo_index::{LexicalEncoder, LexicalOptions, SparseVector};

const MODEL: &str = "all-MiniLM-L6-v2 (384 dimensions)";

fn embedder() -> Embedder {
    let config = Config {
        models_dir: mnemo_test_support::models_dir(),
        ..Config::default()
    };
    let paths = config.model_paths();
    Embedder::load(&EmbedderConfig::new(
        &paths.onnxruntime_library,
        &paths.embedding_model_dir,
    ))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn lexical() -> LexicalEncoder {
    LexicalEncoder::new(LexicalOptions::default()).unwrap()
}

/// A model folder whose tokenizer knows `words` (and a word piece and a stop word).
fn model_dir(words: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut vocab: serde_json::Map<String, serde_json::Value> = words
        .iter()
        .enumerate()
        .map(|(i, w)| ((*w).to_owned(), i.into()))
        .collect();
    vocab.insert("##ing".into(), 900.into());
    vocab.insert("the".into(), 901.into());
    let tokenizer = serde_json::json!({"model": {"type": "WordPiece", "vocab": vocab}});
    std::fs::write(dir.path().join("tokenizer.json"), tokenizer.to_string()).unwrap();
    dir
}

/// Writes a damaged words file at the path given.
type Damage<'a> = &'a dyn Fn(&Path);

const WORDS: [&str; 4] = ["books", "cello", "garden", "novel"];

fn kept_words(dir: &Path) -> usize {
    VocabularyFile::new(dir.join(MODEL_WORDS_FILE), MODEL, 384)
        .read()
        .unwrap()
        .len()
}

#[test]
fn the_words_are_embedded_once_and_kept_beside_the_model() {
    let (embedder, lexical) = (embedder(), lexical());
    let dir = model_dir(&WORDS);
    let words = ModelWords::open(dir.path(), MODEL, &embedder, &lexical).unwrap();
    assert_eq!(
        words.len(),
        4,
        "the word piece and the stop word are no words"
    );
    assert_eq!(kept_words(dir.path()), 4);
    let reading = embedder.embed(&["I'm reading a long story"]).unwrap();
    let own = lexical.query("I'm reading a long story");
    assert_eq!(words.nearest(&reading[0], &own, 2), ["novel", "books"]);

    // Another store opened in this process shares them.
    let again = ModelWords::open(dir.path(), MODEL, &embedder, &lexical).unwrap();
    assert!(std::sync::Arc::ptr_eq(&words, &again));
    // The same words in another folder: read from its file, the same vectors.
    let copy = model_dir(&WORDS);
    std::fs::copy(
        dir.path().join(MODEL_WORDS_FILE),
        copy.path().join(MODEL_WORDS_FILE),
    )
    .unwrap();
    let modified = std::fs::metadata(copy.path().join(MODEL_WORDS_FILE))
        .unwrap()
        .modified()
        .unwrap();
    let read = ModelWords::open(copy.path(), MODEL, &embedder, &lexical).unwrap();
    assert_eq!(read.fingerprint(), words.fingerprint());
    let unchanged = std::fs::metadata(copy.path().join(MODEL_WORDS_FILE)).unwrap();
    assert_eq!(unchanged.modified().unwrap(), modified, "not written again");
}

#[test]
fn a_damaged_or_foreign_words_file_is_embedded_again_and_replaced() {
    let (embedder, lexical) = (embedder(), lexical());
    let reference = {
        let dir = model_dir(&WORDS);
        ModelWords::open(dir.path(), MODEL, &embedder, &lexical)
            .unwrap()
            .fingerprint()
            .to_owned()
    };
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("secret");
    std::fs::write(&target, b"not mnemo's").unwrap();
    let other_words = model_dir(&["books", "cello"]);
    ModelWords::open(other_words.path(), MODEL, &embedder, &lexical).unwrap();
    let damages: [(&str, Damage); 4] = [
        ("garbage", &|p| {
            std::fs::write(p, b"MNEMOVOC garbage").unwrap()
        }),
        ("a link", &|p| {
            std::os::unix::fs::symlink(&target, p).unwrap()
        }),
        ("other words (another tokenizer)", &|p| {
            std::fs::copy(other_words.path().join(MODEL_WORDS_FILE), p).unwrap();
        }),
        ("cut short", &|p| {
            let dir = model_dir(&WORDS);
            ModelWords::open(dir.path(), MODEL, &embedder, &lexical).unwrap();
            let bytes = std::fs::read(dir.path().join(MODEL_WORDS_FILE)).unwrap();
            std::fs::write(p, &bytes[..bytes.len() - 7]).unwrap();
        }),
    ];
    for (damage, make) in damages {
        let dir = model_dir(&WORDS);
        let file = dir.path().join(MODEL_WORDS_FILE);
        make(&file);
        let words = ModelWords::open(dir.path(), MODEL, &embedder, &lexical)
            .unwrap_or_else(|e| panic!("{damage}: {e}"));
        assert_eq!(words.len(), 4, "{damage}");
        assert_eq!(words.fingerprint(), reference, "{damage}");
        assert!(
            !file.is_symlink(),
            "{damage}: replaced by a file of mnemo's"
        );
        assert_eq!(kept_words(dir.path()), 4, "{damage}");
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"not mnemo's");
}

#[test]
fn a_tokenizer_without_whole_words_leaves_document_expansion_off_with_the_reason() {
    let (embedder, lexical) = (embedder(), lexical());
    let dir = tempfile::tempdir().unwrap();
    let err = ModelWords::open(dir.path(), MODEL, &embedder, &lexical).unwrap_err();
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    std::fs::write(dir.path().join("tokenizer.json"), b"{\"model\": {}}").unwrap();
    let err = ModelWords::open(dir.path(), MODEL, &embedder, &lexical).unwrap_err();
    assert!(err.to_string().contains("no word list"), "{err}");
    let nothing = SparseVector::default();
    let dir = model_dir(&WORDS);
    let words = ModelWords::open(dir.path(), MODEL, &embedder, &lexical).unwrap();
    assert!(
        words.nearest(&[1.0, 0.0], &nothing, 3).is_empty(),
        "another model's vector"
    );
}
