//! Writing out the files of one commit: what a caller needs to work on the store as it was
//! at a revision (a search as of a commit indexes them in a folder of its own).
//!
//! A commit's tree is input from whoever committed to the store, so the export is bounded
//! and careful: only regular files are written (links and submodules are skipped, never
//! followed or made), only the paths the caller picks, each name checked to be one plain
//! name (no `..`, no separator) so nothing lands outside the destination, and files are
//! created anew (never written through something already there). The tree is walked and
//! every cap checked before the first file is written: a tree over [`ExportLimits`]'
//! file-count or total-size cap is an error naming the cap, and writes nothing. A file over
//! the per-file cap is skipped and reported, as the store's own reads skip such a file.
//!
//! The export opens a repository handle of its own: git objects never change, so it reads
//! beside commits without holding them up.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository, Tree};

use crate::commits::{commit_info, CommitInfo};
use crate::error::GitError;
use crate::repo::Versioning;

/// The most one [`Versioning::export`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportLimits {
    /// Files picked; more is an error.
    pub max_files: usize,
    /// Bytes of one file; a larger file is skipped (and listed in [`Export::oversized`]).
    pub max_file_bytes: u64,
    /// Bytes of every picked file together; more is an error.
    pub max_total_bytes: u64,
}

impl Default for ExportLimits {
    /// 100,000 files, 1 MiB each, 512 MiB in all.
    fn default() -> Self {
        Self {
            max_files: 100_000,
            max_file_bytes: 1 << 20,
            max_total_bytes: 512 << 20,
        }
    }
}

/// What [`Versioning::export`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// The commit exported; its `changes` are left empty (nothing was diffed).
    pub commit: CommitInfo,
    /// Files written.
    pub files: usize,
    /// Their bytes, together.
    pub bytes: u64,
    /// Picked files skipped for being over [`ExportLimits::max_file_bytes`], as git paths.
    pub oversized: Vec<String>,
}

/// Folders deeper than this are not walked: no store nests so deep, and the walk recurses.
const MAX_DEPTH: usize = 32;

/// A regular file's mode, and an executable one's; links and submodules have others.
const FILE_MODES: [i32; 2] = [0o100644, 0o100755];
const TREE_MODE: i32 = 0o040000;

/// A picked file of the tree.
struct Picked {
    path: String,
    blob: Oid,
    size: u64,
}

/// The walk of one tree: what it picks, and the caps it checks as it goes.
struct Walk<'a, F> {
    repo: &'a Repository,
    odb: git2::Odb<'a>,
    versioning: &'a Versioning,
    rev: &'a str,
    picks: F,
    limits: &'a ExportLimits,
    picked: Vec<Picked>,
    oversized: Vec<String>,
    total: u64,
}

impl Versioning {
    /// The commit `rev` resolves to (anything git resolves: `HEAD~2`, a hash or a prefix of
    /// one, a branch); its `changes` are left empty.
    pub fn commit_of(&self, rev: &str) -> Result<CommitInfo, GitError> {
        let repo = self.lock();
        let commit = self.resolve(&repo, rev)?;
        Ok(commit_info(&commit, Vec::new()))
    }

    /// Writes the files of `rev`'s tree that `picks` accepts (git paths: relative to the
    /// store, `/`-separated) under `dest`, at the same relative paths; `dest` is created if
    /// missing and should be a new, empty folder. Regular files only; see the module's
    /// documentation for the checks and `limits` for the caps.
    pub fn export(
        &self,
        rev: &str,
        dest: &Path,
        picks: impl Fn(&str) -> bool,
        limits: &ExportLimits,
    ) -> Result<Export, GitError> {
        let repo =
            Repository::open(self.root()).map_err(self.git_err("cannot open the repository"))?;
        let commit = self.resolve(&repo, rev)?;
        let tree = commit
            .tree()
            .map_err(self.git_err(format!("cannot read the tree of {rev}")))?;
        let odb = repo
            .odb()
            .map_err(self.git_err("cannot open the object database"))?;
        let mut walk = Walk {
            repo: &repo,
            odb,
            versioning: self,
            rev,
            picks,
            limits,
            picked: Vec::new(),
            oversized: Vec::new(),
            total: 0,
        };
        walk.tree(&tree, "", 0)?;
        fs::create_dir_all(dest).map_err(io_err("cannot create", dest))?;
        for file in &walk.picked {
            walk.write(file, dest)?;
        }
        Ok(Export {
            commit: commit_info(&commit, Vec::new()),
            files: walk.picked.len(),
            bytes: walk.total,
            oversized: walk.oversized,
        })
    }
}

impl<F: Fn(&str) -> bool> Walk<'_, F> {
    /// Picks from `tree`, the folder at `dir` (`""` or ending in `/`).
    fn tree(&mut self, tree: &Tree, dir: &str, depth: usize) -> Result<(), GitError> {
        for entry in tree.iter() {
            // A name that is not UTF-8 cannot be picked (picks sees text).
            let Some(name) = entry.name() else { continue };
            let path = format!("{dir}{name}");
            match entry.filemode() {
                TREE_MODE if depth < MAX_DEPTH => {
                    let subtree = self.repo.find_tree(entry.id()).map_err(
                        self.versioning
                            .git_err(format!("cannot read {path} at {}", self.rev)),
                    )?;
                    self.tree(&subtree, &format!("{path}/"), depth + 1)?;
                }
                mode if FILE_MODES.contains(&mode) && (self.picks)(&path) => {
                    self.pick(path, entry.id())?;
                }
                // Links, submodules, unpicked files, folders too deep.
                _ => {}
            }
        }
        Ok(())
    }

    /// Adds one picked file, checking its name and the caps.
    fn pick(&mut self, path: String, blob: Oid) -> Result<(), GitError> {
        if !path.split('/').all(is_plain_name) {
            return Err(GitError::UnsafePath {
                path,
                rev: self.rev.to_owned(),
                root: self.versioning.root().to_owned(),
            });
        }
        let (size, kind) = self.odb.read_header(blob).map_err(
            self.versioning
                .git_err(format!("cannot read {path} at {}", self.rev)),
        )?;
        if kind != ObjectType::Blob {
            return Ok(());
        }
        let size = size as u64;
        if size > self.limits.max_file_bytes {
            self.oversized.push(path);
            return Ok(());
        }
        if self.picked.len() >= self.limits.max_files {
            return Err(self.too_large(format!("{} files", self.limits.max_files)));
        }
        self.total += size;
        if self.total > self.limits.max_total_bytes {
            return Err(self.too_large(format!("{} bytes", self.limits.max_total_bytes)));
        }
        self.picked.push(Picked { path, blob, size });
        Ok(())
    }

    fn too_large(&self, limit: String) -> GitError {
        GitError::ExportTooLarge {
            rev: self.rev.to_owned(),
            limit,
            root: self.versioning.root().to_owned(),
        }
    }

    /// Writes one picked file under `dest`, as a new file.
    fn write(&self, file: &Picked, dest: &Path) -> Result<(), GitError> {
        let blob = self.repo.find_blob(file.blob).map_err(
            self.versioning
                .git_err(format!("cannot read {} at {}", file.path, self.rev)),
        )?;
        // Checked again: the header and the object could differ only in a damaged store.
        if blob.size() as u64 != file.size {
            return Err(self.versioning.git_err(format!(
                "{} at {} is not the size its header says",
                file.path, self.rev
            ))(git2::Error::from_str(
                "object size mismatch",
            )));
        }
        let target: PathBuf = file
            .path
            .split('/')
            .fold(dest.to_owned(), |p, part| p.join(part));
        if let Some(folder) = target.parent() {
            fs::create_dir_all(folder).map_err(io_err("cannot create", folder))?;
        }
        fs::File::options()
            .write(true)
            .create_new(true)
            .open(&target)
            .and_then(|mut out| out.write_all(blob.content()))
            .map_err(io_err("cannot write", &target))
    }
}

/// Whether `name` is one plain file or folder name: not empty, not `.` or `..`, and without
/// a separator or NUL.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> GitError {
    let path = path.to_owned();
    move |source| GitError::Io {
        action,
        path,
        source,
    }
}
