//! Crash-safe file replacement ([`mnemo_fs::atomic`], where every crate writing the store
//! finds it), and the names of temporary files, which the store's scans skip.

pub use mnemo_fs::atomic::{create_dirs_durably, rename_durably, write_atomic, TEMP_PREFIX};

/// True for names that editors and mnemo use for temporary or hidden files.
pub fn is_temporary_name(name: &str) -> bool {
    name.starts_with('.')
        || name.ends_with('~')
        || name.starts_with('#')
        || [".tmp", ".swp", ".swx", ".part", ".bak"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_temporary_names() {
        for name in [
            ".a.md.swp",
            "a.md~",
            "#a.md#",
            ".mnemo-tmp-123",
            "a.md.tmp",
            "4913.part",
        ] {
            assert!(is_temporary_name(name), "{name}");
        }
        assert!(!is_temporary_name("20260101T000000000Z__x.md"));
    }
}
