//! What several benchmarks share: the memories they fill a store with, where the models are.

// Each bench is its own crate and uses part of this module.
#![allow(dead_code)]

/// The `i`th memory of a synthetic store: 125 distinct sentences (a subject, a verb, an
/// object), each numbered, so searches have near-duplicates to rank and MMR to thin out.
pub fn memory_text(i: usize) -> String {
    let subjects = [
        "My sister",
        "The landlord",
        "Our team lead",
        "Grandpa",
        "The dog",
    ];
    let verbs = [
        "moved to",
        "talks about",
        "bought tickets to",
        "is allergic to",
        "loves",
    ];
    let objects = [
        "Lisbon",
        "sourdough",
        "the jazz festival",
        "peanuts",
        "the bike lane",
    ];
    format!(
        "{} {} {} (note {i}).",
        subjects[i % 5],
        verbs[(i / 5) % 5],
        objects[(i / 25) % 5]
    )
}

/// The models set-up installs, under the repository.
pub fn models_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models")
}
