//! Crash-safe file replacement: a reader sees the old file or the new one, never half a file.
//! Every crate that writes a whole file into the store writes it through here (memory files,
//! the index's records, session metadata, context state, the store's `.gitignore`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::faults::{self, Seam};

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

/// Temporary files this process has named.
static TEMPS_MADE: AtomicU64 = AtomicU64::new(0);

/// The `n`-th temporary file name of this process.
fn temp_name(n: u64) -> String {
    format!("{TEMP_PREFIX}{}-{n}", std::process::id())
}

/// Made new (`create_new`), so never opened through whatever a person or an attacker left
/// at that name (a link); a name taken already is skipped.
fn create_temp(dir: &Path) -> io::Result<(PathBuf, File)> {
    loop {
        let name = temp_name(TEMPS_MADE.fetch_add(1, Ordering::Relaxed));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the entries of `dir`.
    fn names_in(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn replaces_content_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub/a.md");
        write_atomic(&target, b"one").unwrap();
        write_atomic(&target, b"two").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        assert_eq!(names_in(target.parent().unwrap()), ["a.md"]);
    }

    /// A disk that fails a write at any of its steps: an error
    /// carrying EIO, the file as it was, no temporary file left, and the next write works.
    #[test]
    fn a_failed_write_leaves_the_file_as_it_was() {
        for failing in [Seam::Write, Seam::Sync, Seam::Rename] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("state.json");
            write_atomic(&path, b"old").unwrap();
            let plan = faults::inject(dir.path(), move |_, seam, _| {
                (seam == failing).then(faults::io_error)
            });
            let err = write_atomic(&path, b"new").unwrap_err();
            drop(plan);
            let eio = faults::io_error().raw_os_error();
            assert_eq!(err.raw_os_error(), eio, "{failing:?}: {err}");
            assert_eq!(std::fs::read(&path).unwrap(), b"old", "{failing:?}");
            assert_eq!(names_in(dir.path()), ["state.json"], "{failing:?}");
            write_atomic(&path, b"new").unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), b"new", "{failing:?}");
        }
    }

    /// Links planted at the names the next temporary files take are left alone: the write
    /// goes to a name of its own and replaces the target, and what a link points to is
    /// untouched.
    #[test]
    fn a_link_where_the_temporary_file_goes_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("target");
        fs::write(&target, "untouched").unwrap();
        let next = TEMPS_MADE.load(Ordering::Relaxed);
        for n in next..next + 64 {
            std::os::unix::fs::symlink(&target, dir.path().join(temp_name(n))).unwrap();
        }
        let path = dir.path().join("a.txt");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "untouched");
        assert_eq!(fs::read(&path).unwrap(), b"second");
    }
}
