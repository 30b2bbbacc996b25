//! Reading the store's YAML (front matter, session settings, context strategies), which is
//! untrusted input: a 459-byte alias bomb or a 50,000-deep sequence must be a clear error,
//! not an abort. Files themselves are read through [`mnemo_fs`] (links, FIFOs, size), which
//! this module re-exports for the store's users.

pub use mnemo_fs::{
    check_real_folders, is_real_folder, open_regular, read_regular, Refusal, StoreDir,
};

/// The largest memory file mnemo reads (1 MiB): a memory is a fact or a turn, and a turn is
/// capped far below this when mnemo writes it.
pub const MAX_MEMORY_FILE_BYTES: u64 = 1 << 20;

/// The deepest YAML nesting read (mappings and sequences): a memory's front matter is one
/// mapping holding `metadata`, itself at most [`mnemo_core::MAX_METADATA_DEPTH`] deep.
pub const MAX_YAML_DEPTH: usize = mnemo_core::MAX_METADATA_DEPTH + 4;

/// Alias uses allowed in one YAML text, and events they may replay in all: enough for a
/// hand-written anchor or two, far too few for an expansion bomb.
pub const MAX_YAML_ALIASES: usize = 64;
/// See [`MAX_YAML_ALIASES`].
pub const MAX_YAML_REPLAYED_EVENTS: usize = 4096;

/// The options every YAML text from the store is read with: small budgets for nesting,
/// aliases and size (see the module docs).
pub fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: MAX_YAML_DEPTH,
            max_aliases: MAX_YAML_ALIASES,
            max_anchors: MAX_YAML_ALIASES,
            max_documents: 1,
            max_nodes: 20_000,
            max_events: 50_000,
            max_total_scalar_bytes: MAX_MEMORY_FILE_BYTES as usize,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_YAML_REPLAYED_EVENTS,
            max_replay_stack_depth: 8,
        },
    }
}

/// Parses untrusted YAML with [`yaml_options`].
pub fn from_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, yaml_options())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_bombs_and_deep_nesting_are_refused() {
        // Each level doubles: 9 levels of 9 would be 387 million nodes.
        let mut bomb = String::from(
            "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
        {
            let refs = vec![format!("*{prev}"); 9].join(",");
            bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        assert!(bomb.len() < 500);
        assert!(from_yaml::<serde_json::Value>(&bomb).is_err());

        let deep = format!("{}1{}", "[".repeat(50_000), "]".repeat(50_000));
        assert!(from_yaml::<serde_json::Value>(&deep).is_err());
        let block: String = (0..50_000)
            .map(|i| format!("{}-\n", " ".repeat(i % 200)))
            .collect();
        assert!(from_yaml::<serde_json::Value>(&block).is_err());

        let fine = "x: &x {k: v}\ny: *x\nlist: [1, [2, [3]]]\n";
        let value: serde_json::Value = from_yaml(fine).unwrap();
        assert_eq!(value["y"]["k"], "v");
    }
}
