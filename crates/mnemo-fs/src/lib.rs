//! Reading files that people and `git pull` put in mnemo's store, which are untrusted input.
//!
//! A memory file may be a link to `/proc/self/environ`, a FIFO that never answers, or a 2 GiB
//! log. The rules here keep any of those from reaching memory, the index or an answer:
//! - files are opened without following links and without blocking, and must be regular
//!   files no larger than the caller's limit ([`read_regular`]); the type and size are taken
//!   from the open file, so a swap between a check and the read cannot slip past;
//! - a folder mnemo writes into must be a real folder, every component of it under the store's
//!   root ([`check_real_folders`]), or a linked conversation folder would send writes outside
//!   the store.
//!
//! Every crate that reads the store (memories, sessions, context state) reads through here.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a file in the store was not read.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A link: mnemo reads regular files and real folders only.
    #[error("a symbolic link (mnemo reads regular files only, never what a link points to)")]
    Link,
    /// A FIFO, socket, device or folder where a regular file was expected.
    #[error("{0}, not a regular file")]
    NotRegular(&'static str),
    /// Larger than the limit for its kind.
    #[error("{size} bytes, more than the {limit} mnemo reads from such a file")]
    TooLarge {
        /// The file's size.
        size: u64,
        /// The limit it passed.
        limit: u64,
    },
    /// The operating system refused (missing, no permission, ...).
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl Refusal {
    /// Whether the file simply is not there (deleted between a listing and the read).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Refusal::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

/// Reads a regular file of at most `limit` bytes, refusing links, special files and larger
/// files without reading them (see the module docs).
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, Refusal> {
    // O_NONBLOCK (in `open_regular`): opening a FIFO with no writer must not wait for one.
    let file = open_regular(path, false)?;
    let meta = file.metadata()?;
    if meta.len() > limit {
        return Err(Refusal::TooLarge {
            size: meta.len(),
            limit,
        });
    }
    read_at_most(file, limit)
}

/// Opens a regular file without following a link or blocking on a FIFO, to read it, or to
/// append to it (`append`: created when missing). The type is checked on the open file.
pub fn open_regular(path: &Path, append: bool) -> Result<File, Refusal> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    if append {
        options.append(true).create(true);
    }
    let file = options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => Refusal::Link,
            _ => Refusal::Io(e),
        })?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(Refusal::NotRegular(describe(&kind)));
    }
    Ok(file)
}

/// Reads to the end, but not past `limit`: a file growing after the size check is cut off
/// and refused instead of read without bound.
fn read_at_most(file: File, limit: u64) -> Result<Vec<u8>, Refusal> {
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    let size = bytes.len() as u64;
    if size > limit {
        return Err(Refusal::TooLarge { size, limit });
    }
    Ok(bytes)
}

/// What a file type is, for a message.
fn describe(kind: &std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a folder"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

/// Checks that every existing component of `folder` below `root` is a real folder, not a
/// link or a file: what mnemo writes there then stays inside the store. Components that do
/// not exist yet are fine (they are created as real folders). `folder` must lie under
/// `root`.
pub fn check_real_folders(root: &Path, folder: &Path) -> Result<(), String> {
    let Ok(relative) = folder.strip_prefix(root) else {
        return Err(format!(
            "{} is outside the store {}",
            folder.display(),
            root.display()
        ));
    };
    let mut current = root.to_path_buf();
    for component in relative.components() {
        current.push(component);
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.is_dir() => {}
            Ok(meta) => {
                return Err(format!(
                    "{} is {}, not a real folder; mnemo does not write through links",
                    current.display(),
                    describe(&meta.file_type())
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("cannot inspect {}: {e}", current.display())),
        }
    }
    Ok(())
}

/// Whether a directory entry is a real folder (not a link to one).
pub fn is_real_folder(entry: &std::fs::DirEntry) -> bool {
    entry.file_type().is_ok_and(|t| t.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_fifos_and_large_files_are_refused_without_reading() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "API_KEY=sk-live").unwrap();
        let link = dir.path().join("link.md");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        assert!(matches!(read_regular(&link, 100), Err(Refusal::Link)));

        let fifo = dir.path().join("fifo.md");
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let err = read_regular(&fifo, 100).unwrap_err();
        assert_eq!(err.to_string(), "a FIFO, not a regular file");

        let err = read_regular(dir.path(), 100).unwrap_err();
        assert_eq!(err.to_string(), "a folder, not a regular file");

        let err = read_regular(&secret, 5).unwrap_err();
        assert!(matches!(err, Refusal::TooLarge { size: 15, limit: 5 }));
        assert_eq!(read_regular(&secret, 15).unwrap(), b"API_KEY=sk-live");
        assert!(read_regular(&dir.path().join("absent"), 5)
            .unwrap_err()
            .is_not_found());
    }

    #[test]
    fn linked_folders_on_the_way_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("entries/real")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("entries/linked")).unwrap();
        assert!(check_real_folders(root, &root.join("entries/real/facts")).is_ok());
        assert!(check_real_folders(root, &root.join("entries/new/facts")).is_ok());
        let err = check_real_folders(root, &root.join("entries/linked/facts")).unwrap_err();
        assert!(err.contains("entries/linked is a symbolic link"), "{err}");
        assert!(check_real_folders(root, outside.path()).is_err());
    }
}
