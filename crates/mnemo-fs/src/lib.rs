//! Reading files that people and `git pull` put in mnemo's store, which are untrusted input.
//!
//! A memory file may be a link to `/proc/self/environ`, a FIFO that never answers, or a 2 GiB
//! log. The rules here keep any of those from reaching memory, the index or an answer:
//! - files are opened without following links and without blocking, and must be regular
//!   files no larger than the caller's limit ([`read_regular`]); the type and size are taken
//!   from the open file, so a swap between a check and the read cannot slip past;
//! - a folder mnemo reads or writes must be a real folder, every component of it from the
//!   store's root down ([`StoreDir`], [`check_real_folders`]), or a linked conversation or
//!   session folder would send reads and writes outside the store. The check runs each time
//!   a folder is opened (read, listed, created or written into), not once when a path is
//!   made, so a link a `git pull` brings later is refused too.
//!
//! A path inside the store is named by its parts below the root ([`store_relative`]), one
//! check for the store's files and for git alike.
//!
//! Every crate that reads the store (memories, sessions, context state) reads through here,
//! and writes whole files through [`atomic`] (crash-safe replacement). And since a store also
//! fills its disk: [`free_space`] says how much room is left, and [`faults`] lets tests make
//! chosen writes fail as a failing disk would.

pub mod atomic;
pub mod faults;

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// The parts of `path` below the store's `root`: `path` is absolute inside the store or
/// relative to it; `.` parts are dropped. `None` for a path outside the store, one that
/// climbs (`..`), or one that is not UTF-8. The one check of a store-relative path, for the
/// store's files and for git alike.
pub fn store_relative<'p>(root: &Path, path: &'p Path) -> Option<Vec<&'p str>> {
    let relative = if path.is_absolute() {
        path.strip_prefix(root).ok()?
    } else {
        path
    };
    relative
        .components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect()
}

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
    /// A folder on the way from the store's root is a link, a file or a special file.
    #[error("{path} is {what}, not a real folder; mnemo reads and writes only real folders under the store")]
    NotAFolder {
        /// The folder, relative to the store's root.
        path: String,
        /// What it is instead ("a symbolic link", "a FIFO", ...).
        what: &'static str,
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
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
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
    } else if kind.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

/// Checks that every existing component of `folder` below `root` is a real folder, not a
/// link or a file: what mnemo writes there then stays inside the store. Components that do
/// not exist yet are fine (they are created as real folders). `folder` must lie under
/// `root`.
pub fn check_real_folders(root: &Path, folder: &Path) -> Result<(), String> {
    StoreDir::new(root, folder)
        .check()
        .map_err(|refusal| refusal.to_string())
}

/// A folder of the store: `root` is the store's root, trusted; every component from there
/// down to the folder is checked to be a real folder each time the folder is used (read,
/// listed, created or written into). A component that does not exist yet is fine until the
/// folder is needed: reading from a missing folder finds nothing, creating makes real
/// folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreDir {
    root: PathBuf,
    dir: PathBuf,
}

impl StoreDir {
    /// The folder `dir`, which must lie under the store's `root` (one that does not is
    /// refused by every use).
    pub fn new(root: impl Into<PathBuf>, dir: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            dir: dir.into(),
        }
    }

    /// The folder's path.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The store's root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder `name` inside this one.
    pub fn child(&self, name: impl AsRef<Path>) -> StoreDir {
        StoreDir {
            root: self.root.clone(),
            dir: self.dir.join(name),
        }
    }

    /// The path of the file `name` in this folder (not checked: use [`read`](Self::read),
    /// [`open`](Self::open) or [`check`](Self::check) before touching it).
    pub fn file(&self, name: impl AsRef<Path>) -> PathBuf {
        self.dir.join(name)
    }

    /// The folder relative to the store's root, for messages.
    pub fn relative(&self) -> String {
        self.dir
            .strip_prefix(&self.root)
            .unwrap_or(&self.dir)
            .display()
            .to_string()
    }

    /// Refused when a component from the root down is anything but a real folder; `Ok` when
    /// they are, or when the first that is not there does not exist yet.
    pub fn check(&self) -> Result<(), Refusal> {
        self.walk().map(|_| ())
    }

    /// Whether the folder exists as a real folder (every component checked); `false` when a
    /// component is missing, an error when one is a link or a file.
    pub fn exists(&self) -> Result<bool, Refusal> {
        self.walk()
    }

    /// Creates the folder and the missing ones above it, as real folders, checking every
    /// component before and after.
    pub fn create(&self) -> Result<(), Refusal> {
        if self.walk()? {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)?;
        // A link swapped in meanwhile is caught here, before anything is written.
        if self.walk()? {
            Ok(())
        } else {
            Err(Refusal::Io(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} vanished as it was created", self.relative()),
            )))
        }
    }

    /// Reads the regular file `name` of this folder (see [`read_regular`]), once the folder
    /// is checked.
    pub fn read(&self, name: impl AsRef<Path>, limit: u64) -> Result<Vec<u8>, Refusal> {
        self.check()?;
        read_regular(&self.file(name), limit)
    }

    /// Opens the regular file `name` of this folder (see [`open_regular`]), once the folder
    /// is checked; to append, the folder is created first.
    pub fn open(&self, name: impl AsRef<Path>, append: bool) -> Result<File, Refusal> {
        if append {
            self.create()?;
        } else {
            self.check()?;
        }
        open_regular(&self.file(name), append)
    }

    /// The folder's entries, once it is checked; `None` when it does not exist.
    pub fn entries(&self) -> Result<Option<std::fs::ReadDir>, Refusal> {
        if !self.walk()? {
            return Ok(None);
        }
        match std::fs::read_dir(&self.dir) {
            Ok(entries) => Ok(Some(entries)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Refusal::Io(e)),
        }
    }

    /// Walks from the root down: `true` when every component is a real folder, `false` when
    /// one is missing (those below it are then missing too), refused at the first that is
    /// something else.
    fn walk(&self) -> Result<bool, Refusal> {
        let relative = self.dir.strip_prefix(&self.root).map_err(|_| {
            Refusal::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is outside the store", self.dir.display()),
            ))
        })?;
        let mut current = self.root.clone();
        for component in relative.components() {
            match component {
                Component::Normal(name) => current.push(name),
                _ => {
                    return Err(Refusal::Io(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{} is not a plain path inside the store",
                            relative.display()
                        ),
                    )))
                }
            }
            match std::fs::symlink_metadata(&current) {
                Ok(meta) if meta.is_dir() => {}
                Ok(meta) => {
                    return Err(Refusal::NotAFolder {
                        path: current
                            .strip_prefix(&self.root)
                            .unwrap_or(&current)
                            .display()
                            .to_string(),
                        what: describe(&meta.file_type()),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(Refusal::Io(e)),
            }
        }
        Ok(true)
    }
}

/// Whether a directory entry is a real folder (not a link to one).
pub fn is_real_folder(entry: &std::fs::DirEntry) -> bool {
    entry.file_type().is_ok_and(|t| t.is_dir())
}

/// Room left on the filesystem that holds `path`, as `statvfs(2)` tells an unprivileged
/// writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeSpace {
    /// Bytes a write may still use.
    pub bytes: u64,
    /// Files that may still be created, when the filesystem counts them.
    pub files: Option<u64>,
}

/// Below this much free room a store counts as full: a memory file (at most 1 MiB), its
/// commit and the index's flush need a little more than one file's worth.
pub const MIN_FREE_BYTES: u64 = 4 << 20;

impl FreeSpace {
    /// Whether a write would likely fail for lack of room: less than [`MIN_FREE_BYTES`],
    /// or no new file.
    pub fn is_full(&self) -> bool {
        self.bytes < MIN_FREE_BYTES || self.files == Some(0)
    }
}

/// How much room is left on the filesystem that holds `path`.
// The fields of `statvfs` are `u64` here and narrower on other platforms.
#[allow(clippy::useless_conversion)]
pub fn free_space(path: &Path) -> io::Result<FreeSpace> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `name` is a NUL-terminated path and `stats` points to a `statvfs` the call
    // fills; it is read only after the call reports success.
    if unsafe { libc::statvfs(name.as_ptr(), stats.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: filled by the successful call above.
    let stats = unsafe { stats.assume_init() };
    let files = u64::from(stats.f_files);
    Ok(FreeSpace {
        bytes: u64::from(stats.f_bavail).saturating_mul(u64::from(stats.f_frsize)),
        files: (files > 0).then(|| u64::from(stats.f_favail)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_reports_the_room_left_and_refuses_what_is_not_there() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_space(dir.path()).unwrap();
        assert!(free.bytes > 0, "{free:?}");
        let err = free_space(&dir.path().join("missing")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

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
        assert!(
            err.starts_with("entries/linked is a symbolic link"),
            "{err}"
        );
        assert!(check_real_folders(root, outside.path()).is_err());
    }

    #[test]
    fn a_store_folder_is_checked_at_every_level_each_time_it_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "outside").unwrap();
        let root = dir.path();
        let folder = StoreDir::new(root, root.join("sessions/s1/tool_outputs"));
        assert!(!folder.exists().unwrap(), "nothing there yet");
        assert!(folder.entries().unwrap().is_none());
        assert!(folder.read("secret.txt", 100).unwrap_err().is_not_found());
        folder.create().unwrap();
        std::fs::write(folder.file("a.txt"), "inside").unwrap();
        assert_eq!(folder.read("a.txt", 100).unwrap(), b"inside");
        std::fs::remove_dir_all(root.join("sessions")).unwrap();

        // A link at each level, made after the folder value was: every use refuses it.
        for level in ["sessions", "sessions/s1", "sessions/s1/tool_outputs"] {
            std::fs::remove_dir_all(root.join("sessions")).ok();
            std::fs::remove_file(root.join("sessions")).ok();
            if let Some(parent) = Path::new(level).parent() {
                std::fs::create_dir_all(root.join(parent)).unwrap();
            }
            std::os::unix::fs::symlink(outside.path(), root.join(level)).unwrap();
            let expected = format!("{level} is a symbolic link, not a real folder");
            for err in [
                folder.check().unwrap_err(),
                folder.create().unwrap_err(),
                folder.read("secret.txt", 100).unwrap_err(),
                folder.open("secret.txt", false).unwrap_err(),
                folder.open("new.txt", true).unwrap_err(),
                folder.entries().unwrap_err(),
            ] {
                assert!(err.to_string().starts_with(&expected), "{level}: {err}");
            }
            std::fs::remove_file(root.join(level)).unwrap();
        }
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            1,
            "nothing was written outside"
        );

        std::fs::remove_dir_all(root.join("sessions")).unwrap();
        std::fs::create_dir_all(root.join("sessions")).unwrap();
        std::fs::write(root.join("sessions/s1"), "a file").unwrap();
        let err = folder.create().unwrap_err().to_string();
        assert!(
            err.starts_with("sessions/s1 is a regular file, not a real folder"),
            "{err}"
        );
        let escape = StoreDir::new(root, root.join("sessions/../.."));
        assert!(escape.check().is_err());
        assert!(StoreDir::new(root, outside.path()).check().is_err());
    }
}
