//! The write side of versioning: opening (or creating) the store's repository, noting what
//! changed, and committing it.

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use git2::build::TreeUpdateBuilder;
use git2::{Commit, FileMode, IndexAddOption, Oid, Repository, Signature, StatusOptions};
use tracing::{debug, info, warn};

use crate::commits::{commit_changes, commit_info, head_commit, short_id, CommitInfo};
use crate::error::GitError;

const IGNORE_HEADER: &str = "# mnemo: rebuildable caches and temporary files";
const INITIAL_MESSAGE: &str = "mnemo: initial commit";

/// Who mnemo's commits are by, and what they must leave out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitConfig {
    /// Author and committer name.
    pub author_name: String,
    /// Author and committer e-mail.
    pub author_email: String,
    /// Lines the store's `.gitignore` must hold: what the store's layout says is rebuildable
    /// or temporary (the caller knows the layout; this crate does not).
    pub ignore: Vec<String>,
}

impl Default for GitConfig {
    fn default() -> Self {
        Self {
            author_name: "mnemo".to_owned(),
            author_email: "mnemo@localhost".to_owned(),
            ignore: Vec::new(),
        }
    }
}

/// The git repository versioning one store. Every call blocks (libgit2 reads and writes
/// files); async callers run them with `tokio::task::spawn_blocking`. Calls are serialised by
/// an internal lock, so one `Versioning` can be shared between threads (it is `Send + Sync`).
pub struct Versioning {
    root: PathBuf,
    config: GitConfig,
    // `Repository` is `Send` but not `Sync`.
    repo: Mutex<Repository>,
    /// What the next commit stages.
    pending: Mutex<Pending>,
    /// Why the last commit failed, until one succeeds (for `/health`).
    last_error: Mutex<Option<String>>,
    /// The repository's git folder (`.git`, or where a `.git` file points).
    git_dir: PathBuf,
}

/// Changes noted since the last successful commit.
#[derive(Debug, Clone, Default)]
struct Pending {
    /// Git paths of files that changed.
    paths: BTreeSet<String>,
    /// Stage every change in the store (its paths are not all known).
    everything: bool,
}

impl std::fmt::Debug for Versioning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Versioning")
            .field("root", &self.root)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Versioning {
    /// Opens the repository at `root` (the store's root, created if missing).
    ///
    /// Without a `root/.git`, creates one (even when `root` lies inside another repository),
    /// writes a `.gitignore` and commits whatever the store already holds. With one, adds any
    /// missing ignore lines to its `.gitignore` and stops tracking files those lines ignore;
    /// both changes, and whatever else is uncommitted, go into the first commit.
    pub fn open(root: &Path, config: GitConfig) -> Result<Self, GitError> {
        fs::create_dir_all(root).map_err(io_err("cannot create", root))?;
        let root = root
            .canonicalize()
            .map_err(io_err("cannot resolve", root))?;
        let fresh = !root.join(".git").exists();
        // libgit2 keeps every small object it reads or writes (each commit's trees) in a
        // cache of up to 256 MiB for the life of the repository, and a busy server's memory
        // grew with its commits. A commit reads little back, and reading it from disk costs
        // nothing measurable (`benches/soak.rs`, 5 minutes: 4,730 requests without the
        // cache, 4,617 with it; anonymous memory flat after the first minute instead of
        // growing 18 MiB a minute). Process-wide, and idempotent.
        git2::opts::enable_caching(false);
        // `Repository::open` looks at `root` only, never at its parents.
        let opened = if fresh {
            Repository::init(&root)
        } else {
            Repository::open(&root)
        };
        let repo = opened.map_err(|source| GitError::Git {
            action: if fresh {
                "cannot create a git repository"
            } else {
                "cannot open the git repository"
            }
            .to_owned(),
            root: root.clone(),
            source,
        })?;
        let versioning = Self {
            root,
            config,
            git_dir: repo.path().to_owned(),
            repo: Mutex::new(repo),
            pending: Mutex::default(),
            last_error: Mutex::default(),
        };
        versioning.clear_stale_lock();
        versioning.repair_index()?;
        versioning.ensure_ignore_file()?;
        if fresh {
            info!(root = %versioning.root.display(), "created a git repository for the store");
            versioning.commit_all(INITIAL_MESSAGE)?;
        } else {
            versioning.untrack_ignored()?;
            // Changes made while mnemo was not running (or that a failed commit left behind)
            // go into the first commit; finding them costs a walk of the store, which only
            // a process that commits pays.
            versioning.note_everything();
        }
        Ok(versioning)
    }

    /// The store's root (canonical), which is also the repository's work tree.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Notes files that changed (written, moved away, removed; absolute inside the store or
    /// relative to it): the next [`commit_noted`](Self::commit_noted) stages exactly these.
    /// A folder, or a path outside the store, makes it stage everything instead.
    pub fn note_changed<P: AsRef<Path>>(&self, paths: impl IntoIterator<Item = P>) {
        let mut pending = self.pending();
        for path in paths {
            let path = path.as_ref();
            match self.git_path(path) {
                Ok(git_path) if !self.root.join(&git_path).is_dir() => {
                    pending.paths.insert(git_path);
                }
                _ => {
                    debug!(path = %path.display(), "not a file of the store; the next commit stages everything");
                    pending.everything = true;
                }
            }
        }
    }

    /// Makes the next [`commit_noted`](Self::commit_noted) stage every change in the store,
    /// e.g. after changes whose paths are not known.
    pub fn note_everything(&self) {
        self.pending().everything = true;
    }

    /// Stages the noted changes and commits them. `Ok(None)` when the tree equals `HEAD`'s:
    /// no empty commits.
    ///
    /// Staging a list of files keeps a commit's cost in proportion to what changed, not to
    /// the store (walking 10k files took about 250 ms). What a failed commit noted (a lock
    /// held by another git process, a full disk) stays noted, so the next call commits it
    /// along with its own changes.
    pub fn commit_noted(&self, message: &str) -> Result<Option<CommitInfo>, GitError> {
        self.commit_noted_then(message, |repo, commit| {
            let changes = commit_changes(repo, commit, |_| true)
                .map_err(self.git_err(format!("cannot diff commit {}", commit.id())))?;
            Ok(commit_info(
                commit,
                changes.into_iter().map(|(c, _)| c).collect(),
            ))
        })
    }

    /// [`commit_noted`](Self::commit_noted), answering only the new commit's short id: the
    /// files it changed are not listed (a diff of two trees, for a caller that would drop
    /// it).
    pub fn commit_noted_short(&self, message: &str) -> Result<Option<String>, GitError> {
        self.commit_noted_then(message, |_, commit| Ok(short_id(commit.id())))
    }

    /// Commits what was noted, then describes the new commit with `describe`, still holding
    /// the repository.
    fn commit_noted_then<T>(
        &self,
        message: &str,
        describe: impl FnOnce(&Repository, &Commit) -> Result<T, GitError>,
    ) -> Result<Option<T>, GitError> {
        let repo = self.lock();
        // Taken out under the repository lock, so a commit queued behind this one stages only
        // what this one left. Changes noted while this one stages stay noted for the next:
        // clearing what was taken after the commit would also clear a note made meanwhile
        // (another thread's new file), and that file would never be committed.
        let taken = std::mem::take(&mut *self.pending());
        let mut result = self.stage_and_commit(&repo, &taken, message);
        if result.as_ref().is_err_and(GitError::is_locked) && self.clear_stale_lock() {
            result = self.stage_and_commit(&repo, &taken, message);
        }
        let result = result.and_then(|id| {
            id.map(|id| {
                let commit = repo
                    .find_commit(id)
                    .map_err(self.git_err(format!("cannot read the new commit {id}")))?;
                describe(&repo, &commit)
            })
            .transpose()
        });
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) =
            result.as_ref().err().map(ToString::to_string);
        if result.is_err() {
            let mut pending = self.pending();
            pending.paths.extend(taken.paths);
            pending.everything |= taken.everything;
        }
        result
    }

    /// Why the last commit failed, while no later one has succeeded.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Removes `.git/index.lock` when it is older than [`STALE_LOCK`]: git holds it for a
    /// moment while it writes the index, so an old one was left by a process that died, and
    /// would stop every commit for ever. Returns whether one was removed.
    fn clear_stale_lock(&self) -> bool {
        // Not through `self.lock()`: commits call this holding the repository.
        let lock = self.git_dir.join("index.lock");
        let age = fs::symlink_metadata(&lock)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        if age.is_none_or(|age| age < STALE_LOCK) {
            return false;
        }
        // `git commit` keeps the lock while its editor is open, for as long as a person
        // types: a git process working in the store means the lock is alive.
        if git_running_in(&self.root) {
            warn!(lock = %lock.display(), "the git index is locked by a git command still running in the store; not committing now");
            return false;
        }
        match fs::remove_file(&lock) {
            Ok(()) => {
                warn!(lock = %lock.display(), ?age, "removed a git index lock left by a process that died");
                true
            }
            Err(e) => {
                warn!(lock = %lock.display(), "cannot remove a stale git index lock: {e}");
                false
            }
        }
    }

    /// Rebuilds the git index from `HEAD` when it cannot be read (empty, truncated, corrupt):
    /// the index is git's cache of what is staged, and mnemo stages everything again at its
    /// first commit anyway. The broken one is kept beside it, renamed.
    fn repair_index(&self) -> Result<(), GitError> {
        let repo = self.lock();
        let broken = match repo.index().and_then(|mut index| index.read(true)) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let path = repo.path().join("index");
        let kept = path.with_extension(format!("broken-{}", chrono_free_stamp()));
        warn!(index = %path.display(), "the git index cannot be read ({broken}); rebuilding it from HEAD");
        fs::rename(&path, &kept).map_err(io_err("cannot move aside", &path))?;
        let mut index = repo
            .index()
            .map_err(self.git_err("cannot create a new git index"))?;
        if let Some(head) = head_commit(&repo).map_err(self.git_err("cannot read HEAD"))? {
            let tree = head
                .tree()
                .map_err(self.git_err("cannot read HEAD's tree"))?;
            index
                .read_tree(&tree)
                .map_err(self.git_err("cannot rebuild the git index from HEAD"))?;
        }
        index
            .write()
            .map_err(self.git_err("cannot write the rebuilt git index"))
    }

    /// Stages every change in the store (new, modified, deleted and moved files, minus what
    /// `.gitignore` excludes) and commits it; see [`commit_noted`](Self::commit_noted).
    pub fn commit_all(&self, message: &str) -> Result<Option<CommitInfo>, GitError> {
        self.note_everything();
        self.commit_noted(message)
    }

    fn stage_and_commit(
        &self,
        repo: &Repository,
        changes: &Pending,
        message: &str,
    ) -> Result<Option<Oid>, GitError> {
        let mut index = repo
            .index()
            .map_err(self.git_err("cannot open the git index"))?;
        // Someone may have run git in the store since we last looked.
        index
            .read(false)
            .map_err(self.git_err("cannot read the git index"))?;
        let parent = head_commit(repo).map_err(self.git_err("cannot read HEAD"))?;
        let tree_id = if changes.everything {
            index
                .add_all(["*"], IndexAddOption::DEFAULT, None)
                .map_err(self.git_err("cannot stage the store's files"))?;
            index
                .update_all(["*"], None)
                .map_err(self.git_err("cannot stage removed files"))?;
            self.write_index_tree(&mut index)?
        } else {
            for path in &changes.paths {
                self.stage_path(repo, &mut index, path)?;
            }
            let updated = parent
                .as_ref()
                .map(|parent| updated_tree(repo, &index, parent, &changes.paths));
            match updated {
                Some(Ok(tree_id)) => tree_id,
                Some(Err(e)) => {
                    debug!("the commit's tree is written from the whole index: {e}");
                    self.write_index_tree(&mut index)?
                }
                None => self.write_index_tree(&mut index)?,
            }
        };
        if parent.as_ref().is_some_and(|p| p.tree_id() == tree_id) {
            return Ok(None);
        }
        // Before the commit: committing with a stale index on disk would make `git status`
        // show the commit's changes as reverted.
        index
            .write()
            .map_err(self.git_err("cannot write the git index"))?;
        let tree = repo
            .find_tree(tree_id)
            .map_err(self.git_err("cannot read the staged tree"))?;
        let signature = Signature::now(&self.config.author_name, &self.config.author_email)
            .map_err(self.git_err("cannot make the commit signature"))?;
        let parents: Vec<&Commit> = parent.iter().collect();
        let id = repo
            .commit(
                Some("HEAD"),
                &signature,
                &signature,
                message,
                &tree,
                &parents,
            )
            .map_err(self.git_err("cannot commit"))?;
        debug!(commit = %id, "committed the store");
        Ok(Some(id))
    }

    /// The tree of everything the index holds (what `git write-tree` writes): its cost is in
    /// proportion to the whole store, however little changed.
    fn write_index_tree(&self, index: &mut git2::Index) -> Result<Oid, GitError> {
        index
            .write_tree()
            .map_err(self.git_err("cannot write the staged tree"))
    }

    /// Stages one file as it is now: added or updated when it exists (and is not ignored),
    /// removed from the index otherwise.
    fn stage_path(
        &self,
        repo: &Repository,
        index: &mut git2::Index,
        path: &str,
    ) -> Result<(), GitError> {
        let relative = Path::new(path);
        let ignored = repo
            .is_path_ignored(relative)
            .map_err(self.git_err(format!("cannot check whether {path} is ignored")))?;
        if self.root.join(relative).is_file() && !ignored {
            index
                .add_path(relative)
                .map_err(self.git_err(format!("cannot stage {path}")))
        } else {
            index
                .remove_path(relative)
                .map_err(self.git_err(format!("cannot unstage {path}")))
        }
    }

    /// Whether the store holds changes [`commit_all`](Self::commit_all) would commit
    /// (staged or not, untracked files included, ignored files excluded).
    pub fn has_uncommitted_changes(&self) -> Result<bool, GitError> {
        let repo = self.lock();
        let mut options = StatusOptions::new();
        options
            .include_untracked(true)
            .recurse_untracked_dirs(true)
            .exclude_submodules(true);
        let statuses = repo
            .statuses(Some(&mut options))
            .map_err(self.git_err("cannot read the status of the store"))?;
        Ok(!statuses.is_empty())
    }

    /// Appends the [`GitConfig::ignore`] lines the store's `.gitignore` lacks, keeping what
    /// is there.
    fn ensure_ignore_file(&self) -> Result<(), GitError> {
        let path = self.root.join(".gitignore");
        let mut text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io_err("cannot read", &path)(e)),
        };
        let present: HashSet<&str> = text.lines().map(str::trim).collect();
        let missing: Vec<&str> = self
            .config
            .ignore
            .iter()
            .map(String::as_str)
            .filter(|line| !present.contains(line))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let header = !present.contains(IGNORE_HEADER);
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        if header {
            text.push_str(IGNORE_HEADER);
            text.push('\n');
        }
        for line in missing {
            text.push_str(line);
            text.push('\n');
        }
        // Replaced whole: half a `.gitignore` could let the index or a session log into git.
        mnemo_fs::atomic::write_atomic(&path, text.as_bytes())
            .map_err(io_err("cannot write", &path))
    }

    /// Removes from the index files that are tracked although ignored (e.g. someone ran
    /// `git add .` in the store before mnemo versioned it); the files themselves stay.
    fn untrack_ignored(&self) -> Result<(), GitError> {
        let repo = self.lock();
        let mut index = repo
            .index()
            .map_err(self.git_err("cannot open the git index"))?;
        let mut untracked = 0;
        let mut ignored = |path: &Path, _: &[u8]| -> i32 {
            // 0 removes the entry, 1 keeps it.
            if repo.is_path_ignored(path).unwrap_or(false) {
                untracked += 1;
                0
            } else {
                1
            }
        };
        index
            .remove_all(["*"], Some(&mut ignored))
            .map_err(self.git_err("cannot untrack ignored files"))?;
        if untracked > 0 {
            index
                .write()
                .map_err(self.git_err("cannot write the git index"))?;
            info!(
                root = %self.root.display(),
                "stopped tracking {untracked} ignored files (they stay on disk)"
            );
        }
        Ok(())
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Repository> {
        // A panic while holding the lock leaves libgit2's state consistent: keep going.
        self.repo.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn git_err(
        &self,
        action: impl Into<String>,
    ) -> impl FnOnce(git2::Error) -> GitError + '_ {
        let action = action.into();
        move |source| GitError::Git {
            action,
            root: self.root.clone(),
            source,
        }
    }

    /// `path` (absolute inside the store, or relative to it) as a git path: `/`-separated,
    /// relative to the root, without `.` or `..`.
    pub(crate) fn git_path(&self, path: &Path) -> Result<String, GitError> {
        let outside = || GitError::OutsideStore {
            path: path.to_owned(),
            root: self.root.clone(),
        };
        let parts = mnemo_fs::store_relative(&self.root, path).ok_or_else(outside)?;
        Ok(parts.join("/"))
    }
}

/// How old `.git/index.lock` must be to count as left by a dead process.
const STALE_LOCK: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether a `git` process runs with its working folder in `root` (Linux: read from
/// `/proc`). Where that cannot be known, assumes one does: a live lock must never be removed.
fn git_running_in(root: &Path) -> bool {
    let Ok(processes) = fs::read_dir("/proc") else {
        return true;
    };
    processes.filter_map(Result::ok).any(|process| {
        let dir = process.path();
        let is_git =
            fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim().starts_with("git"));
        is_git && fs::read_link(dir.join("cwd")).is_ok_and(|cwd| cwd.starts_with(root))
    })
}

/// Seconds since the epoch, to name a file kept aside.
fn chrono_free_stamp() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> GitError {
    let path = path.to_owned();
    move |source| GitError::Io {
        action,
        path,
        source,
    }
}

/// `parent`'s tree with `paths` as the index now stages them: a path the index holds is set
/// to its staged blob, one it does not hold is removed (with the folders it leaves empty).
/// Only the folders on those paths are read and written again, where the index's own
/// `write_tree` walks every entry of the store and reads every tree of the new commit back
/// in: with thousands of files and tombstones that was most of a commit's time. Changes the
/// index holds for other paths (staged by hand) are not committed. An error (a noted path
/// that is a folder in the parent, a file where it has a folder) is for the caller to meet
/// by writing the whole index.
fn updated_tree(
    repo: &Repository,
    index: &git2::Index,
    parent: &Commit,
    paths: &BTreeSet<String>,
) -> Result<Oid, git2::Error> {
    let baseline = parent.tree()?;
    let mut updates = TreeUpdateBuilder::new();
    for path in paths {
        let relative = Path::new(path);
        let committed = baseline.get_path(relative).ok();
        if committed
            .as_ref()
            .is_some_and(|c| c.kind() != Some(git2::ObjectType::Blob))
        {
            // A folder noted by its path (removed whole): the index's entries under it are
            // staged by the whole index, or the commit would drop files the index keeps.
            return Err(git2::Error::from_str(&format!(
                "{path} is a folder in the last commit"
            )));
        }
        match index.get_path(relative, 0) {
            Some(staged) => {
                let unchanged = committed
                    .as_ref()
                    .is_some_and(|c| c.id() == staged.id && c.filemode() as u32 == staged.mode);
                if !unchanged {
                    updates.upsert(path.as_str(), staged.id, file_mode(staged.mode));
                }
            }
            None if committed.is_some() => {
                updates.remove(path.as_str());
            }
            None => {}
        }
    }
    updates.create_updated(repo, &baseline)
}

/// The tree entry mode of an index entry's mode.
fn file_mode(mode: u32) -> FileMode {
    match mode {
        0o100755 => FileMode::BlobExecutable,
        0o120000 => FileMode::Link,
        0o160000 => FileMode::Commit,
        _ => FileMode::Blob,
    }
}
