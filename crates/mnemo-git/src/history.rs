use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use git2::{
    Commit, Delta, DiffFindOptions, DiffOptions, ErrorCode, Oid, Repository, Revwalk, Sort, Tree,
};
use mnemo_core::{ConversationId, MemoryId};
use serde::Serialize;

use crate::repo::head_commit;
use crate::{GitError, Versioning};

/// One commit. `changes` lists the files it changed relative to its first parent, within
/// what was asked for: all of them, or only those under `log`'s prefix, `show`'s path or
/// `history_of`'s memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommitInfo {
    /// Full hex id.
    pub id: String,
    /// Shortest unambiguous prefix (at least 7 digits).
    pub short_id: String,
    /// When it was authored.
    pub time: DateTime<Utc>,
    pub author: String,
    pub message: String,
    pub changes: Vec<FileChange>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChange {
    pub status: ChangeStatus,
    /// Relative to the store's root; for a deletion, where the file was.
    pub path: PathBuf,
    /// Where a renamed (moved) file was before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_path: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeStatus {
    Added,
    Modified,
    Deleted,
    Renamed,
}

/// What [`Versioning::show`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Shown {
    Commit(CommitInfo),
    File {
        commit: CommitInfo,
        path: PathBuf,
        /// The file as it was at that revision (invalid UTF-8 replaced).
        content: String,
    },
}

/// One version of a memory's file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryVersion {
    /// The commit that made this version; its `changes` are this memory's files only.
    pub commit: CommitInfo,
    pub path: PathBuf,
    pub status: ChangeStatus,
    /// The whole file as this commit left it; for a deletion, as it was before.
    pub content: String,
}

impl Versioning {
    /// Up to `limit` commits reachable from `HEAD`, newest first. With `path_prefix` (relative
    /// to the store, e.g. `entries/trip-japan`), only commits that changed files under it.
    pub fn log(
        &self,
        path_prefix: Option<&Path>,
        limit: usize,
    ) -> Result<Vec<CommitInfo>, GitError> {
        let prefix = path_prefix.map(|p| self.git_path(p)).transpose()?;
        let repo = self.lock();
        let mut found = Vec::new();
        for commit in self.walk(&repo)? {
            if found.len() >= limit {
                break;
            }
            let commit = commit?;
            let changes = self.changes(&repo, &commit, |path| match &prefix {
                Some(prefix) => is_under(path, prefix),
                None => true,
            })?;
            if prefix.is_none() || !changes.is_empty() {
                found.push(commit_info(&commit, changes));
            }
        }
        Ok(found)
    }

    /// `rev` is anything git resolves to a commit (`HEAD~2`, a hash or a prefix of one, a
    /// branch). Without `path`, the commit and its changes; with one, the file as it was then.
    pub fn show(&self, rev: &str, path: Option<&Path>) -> Result<Shown, GitError> {
        let path = path.map(|p| self.git_path(p)).transpose()?;
        let repo = self.lock();
        let commit = self.resolve(&repo, rev)?;
        let changes = self.changes(&repo, &commit, |p| {
            path.as_ref().is_none_or(|path| p == path)
        })?;
        let info = commit_info(&commit, changes);
        let Some(path) = path else {
            return Ok(Shown::Commit(info));
        };
        let tree = commit
            .tree()
            .map_err(self.git_err(format!("cannot read the tree of {rev}")))?;
        let entry = tree
            .get_path(Path::new(&path))
            .map_err(|e| match e.code() {
                ErrorCode::NotFound => GitError::NoSuchPath {
                    path: PathBuf::from(&path),
                    rev: rev.to_owned(),
                    root: self.root().to_owned(),
                },
                _ => self.git_err(format!("cannot look up {path} at {rev}"))(e),
            })?;
        let object = entry
            .to_object(&repo)
            .map_err(self.git_err(format!("cannot read {path} at {rev}")))?;
        let blob = object.as_blob().ok_or_else(|| GitError::NotAFile {
            path: PathBuf::from(&path),
            rev: rev.to_owned(),
            root: self.root().to_owned(),
        })?;
        Ok(Shown::File {
            commit: info,
            path: PathBuf::from(path),
            content: String::from_utf8_lossy(blob.content()).into_owned(),
        })
    }

    /// Up to `limit` versions of one memory, newest first: each commit that added, changed,
    /// moved (e.g. into `deleted/` as a tombstone) or removed its file, with the file's
    /// content. Files are found by the id in their name (`<ts>__<id>.md`); a conversation's
    /// live `summary.md` by the id summaries derive from their conversation.
    pub fn history_of(&self, id: MemoryId, limit: usize) -> Result<Vec<MemoryVersion>, GitError> {
        let repo = self.lock();
        let id_text = id.to_string();
        let mut versions = Vec::new();
        for commit in self.walk(&repo)? {
            if versions.len() >= limit {
                break;
            }
            let commit = commit?;
            let found = commit_changes(&repo, &commit, |path| {
                path.contains(&id_text) || is_summary_of(path, id)
            })
            .map_err(self.git_err(format!("cannot diff commit {}", commit.id())))?;
            if found.is_empty() {
                continue;
            }
            let info = commit_info(&commit, found.iter().map(|(c, _)| c.clone()).collect());
            for (change, blob) in found {
                let blob = repo.find_blob(blob).map_err(self.git_err(format!(
                    "cannot read {} at {}",
                    change.path.display(),
                    info.short_id
                )))?;
                versions.push(MemoryVersion {
                    commit: info.clone(),
                    path: change.path,
                    status: change.status,
                    content: String::from_utf8_lossy(blob.content()).into_owned(),
                });
            }
        }
        versions.truncate(limit);
        Ok(versions)
    }

    fn changes(
        &self,
        repo: &Repository,
        commit: &Commit,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<FileChange>, GitError> {
        let changes = commit_changes(repo, commit, keep)
            .map_err(self.git_err(format!("cannot diff commit {}", commit.id())))?;
        Ok(changes.into_iter().map(|(change, _)| change).collect())
    }

    /// Commits reachable from `HEAD`, newest first; none before the first commit.
    fn walk<'r>(
        &self,
        repo: &'r Repository,
    ) -> Result<impl Iterator<Item = Result<Commit<'r>, GitError>> + use<'r, '_>, GitError> {
        let head = head_commit(repo).map_err(self.git_err("cannot read HEAD"))?;
        let walk: Option<Revwalk<'r>> = match head {
            None => None,
            Some(head) => {
                let mut walk = repo
                    .revwalk()
                    .map_err(self.git_err("cannot walk the history"))?;
                // Topological too: commits made within one second must still come after
                // their parents.
                walk.set_sorting(Sort::TOPOLOGICAL | Sort::TIME)
                    .and_then(|()| walk.push(head.id()))
                    .map_err(self.git_err("cannot walk the history"))?;
                Some(walk)
            }
        };
        Ok(walk.into_iter().flatten().map(move |oid| {
            oid.and_then(|oid| repo.find_commit(oid))
                .map_err(self.git_err("cannot walk the history"))
        }))
    }

    fn resolve<'r>(&self, repo: &'r Repository, rev: &str) -> Result<Commit<'r>, GitError> {
        let object = repo.revparse_single(rev).map_err(|e| match e.code() {
            ErrorCode::NotFound | ErrorCode::InvalidSpec | ErrorCode::UnbornBranch => {
                GitError::NoRevision {
                    rev: rev.to_owned(),
                    root: self.root().to_owned(),
                }
            }
            _ => self.git_err(format!("cannot resolve revision {rev}"))(e),
        })?;
        object
            .peel_to_commit()
            .map_err(self.git_err(format!("{rev} is not a commit")))
    }
}

/// Whether `path` is `prefix` or lies below it (`entries/trip` does not hold `entries/trip-2`).
fn is_under(path: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Whether `path` is the live summary of the conversation whose summary id is `id`.
fn is_summary_of(path: &str, id: MemoryId) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["entries", conversation, "summaries", "summary.md"] => {
            ConversationId::new(conversation).is_ok_and(|c| MemoryId::summary_of(&c) == id)
        }
        _ => false,
    }
}

/// The files `commit` changed relative to its first parent (all of them, for a root commit)
/// whose paths `keep` accepts, with moves detected as renames; for each, the id of its blob
/// after the commit (before it, for a deletion).
pub(crate) fn commit_changes(
    repo: &Repository,
    commit: &Commit,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<(FileChange, Oid)>, git2::Error> {
    let parent_tree = match commit.parent_count() {
        0 => None,
        _ => Some(commit.parent(0)?.tree()?),
    };
    let tree = commit.tree()?;
    let mut paths = Vec::new();
    changed_paths(repo, parent_tree.as_ref(), Some(&tree), b"", &mut paths)?;
    paths.retain(|p| keep(&String::from_utf8_lossy(p)));
    if paths.is_empty() {
        // An empty path list would mean "every path" to libgit2.
        return Ok(Vec::new());
    }
    // Given exact paths, libgit2 reads only the folders on their way.
    let mut options = DiffOptions::new();
    options.disable_pathspec_match(true);
    for path in paths {
        options.pathspec(path);
    }
    let mut diff = repo.diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), Some(&mut options))?;
    diff.find_similar(Some(DiffFindOptions::new().renames(true)))?;
    let changes = diff
        .deltas()
        .map(|delta| {
            let (old, new) = (delta.old_file(), delta.new_file());
            let status = match delta.status() {
                Delta::Added | Delta::Copied => ChangeStatus::Added,
                Delta::Deleted => ChangeStatus::Deleted,
                Delta::Renamed => ChangeStatus::Renamed,
                _ => ChangeStatus::Modified,
            };
            let (side, old_path) = match status {
                ChangeStatus::Deleted => (old, None),
                ChangeStatus::Renamed => (new, old.path().map(Path::to_owned)),
                _ => (new, None),
            };
            let change = FileChange {
                status,
                path: side.path().map(Path::to_owned).unwrap_or_default(),
                old_path,
            };
            (change, side.id())
        })
        .collect();
    Ok(changes)
}

/// Appends to `out` the paths of the files that differ between two trees. Subtrees with the
/// same id on both sides are skipped unread: a commit touches a folder or two, so this keeps
/// walking a long history cheap where libgit2's own tree diff reads every entry of both trees.
fn changed_paths(
    repo: &Repository,
    old: Option<&Tree>,
    new: Option<&Tree>,
    dir: &[u8],
    out: &mut Vec<Vec<u8>>,
) -> Result<(), git2::Error> {
    // Bytes, not text: git names need not be UTF-8, and libgit2 must get them back exactly.
    let mut entries: BTreeMap<Vec<u8>, [Option<(Oid, i32)>; 2]> = BTreeMap::new();
    for (side, tree) in [old, new].into_iter().enumerate() {
        for entry in tree.into_iter().flat_map(Tree::iter) {
            entries.entry(entry.name_bytes().to_vec()).or_default()[side] =
                Some((entry.id(), entry.filemode()));
        }
    }
    let is_tree = |e: &Option<(Oid, i32)>| e.is_some_and(|(_, mode)| mode == TREE_MODE);
    let subtree = |e: &Option<(Oid, i32)>| match e {
        Some((id, TREE_MODE)) => repo.find_tree(*id).map(Some),
        _ => Ok(None),
    };
    for (name, [before, after]) in entries {
        if before == after {
            continue;
        }
        let path = if dir.is_empty() {
            name
        } else {
            [dir, b"/", &name].concat()
        };
        if is_tree(&before) || is_tree(&after) {
            let (before_tree, after_tree) = (subtree(&before)?, subtree(&after)?);
            changed_paths(repo, before_tree.as_ref(), after_tree.as_ref(), &path, out)?;
        }
        // A file on either side (possibly replacing a folder, or replaced by one).
        if before.is_some() && !is_tree(&before) || after.is_some() && !is_tree(&after) {
            out.push(path);
        }
    }
    Ok(())
}

const TREE_MODE: i32 = 0o040000;

pub(crate) fn commit_info(commit: &Commit, changes: Vec<FileChange>) -> CommitInfo {
    let id = commit.id().to_string();
    let short_id = commit
        .as_object()
        .short_id()
        .ok()
        .and_then(|buf| buf.as_str().map(str::to_owned))
        .unwrap_or_else(|| id.chars().take(7).collect());
    let author = commit.author();
    CommitInfo {
        short_id,
        time: DateTime::from_timestamp(author.when().seconds(), 0).unwrap_or_default(),
        author: String::from_utf8_lossy(author.name_bytes()).into_owned(),
        message: String::from_utf8_lossy(commit.message_bytes())
            .trim_end()
            .to_owned(),
        changes,
        id,
    }
}
