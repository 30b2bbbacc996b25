//! Crash-safe file replacement: a reader sees the old file or the new one, never half a file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use mnemo_fs::faults::{self, Seam};

/// Prefix of the temporary files [`write_atomic`] creates; hidden, so scans and watchers skip them.
pub const TEMP_PREFIX: &str = ".mnemo-tmp-";

/// Writes `bytes` to `path` via a temporary file in the same directory: write, fsync, rename
/// over the target, fsync the directory. Creates missing parent directories.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no parent"))?;
    create_dirs_durably(dir)?;
    let (tmp_path, mut tmp) = create_temp(dir)?;
    let result = (|| {
        faults::check(path, Seam::Write)?;
        tmp.write_all(bytes)?;
        faults::check(path, Seam::Sync)?;
        tmp.sync_all()?;
        drop(tmp);
        faults::check(path, Seam::Rename)?;
        fs::rename(&tmp_path, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp_path);
    }
    result
}

/// Moves `from` to `to` (same file system) durably: rename, then fsync both directories.
pub fn rename_durably(from: &Path, to: &Path) -> io::Result<()> {
    let to_dir = to
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no parent"))?;
    create_dirs_durably(to_dir)?;
    faults::check(to, Seam::Rename)?;
    fs::rename(from, to)?;
    sync_dir(to_dir)?;
    if let Some(from_dir) = from.parent() {
        sync_dir(from_dir)?;
    }
    Ok(())
}

fn create_temp(dir: &Path) -> io::Result<(PathBuf, File)> {
    loop {
        let name = format!("{TEMP_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let path = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Creates `dir` and its missing parents, fsyncing the folder each new one was created in:
/// otherwise a crash could lose a new conversation's folder, and every file in it, although
/// each file was fsynced.
pub fn create_dirs_durably(dir: &Path) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs_durably(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => sync_dir(parent),
            None => Ok(()),
        },
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    faults::check(dir, Seam::Sync)?;
    File::open(dir)?.sync_all()
}

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
    fn replaces_content_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub/a.md");
        write_atomic(&target, b"one").unwrap();
        write_atomic(&target, b"two").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(target.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.md")]);
    }

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
