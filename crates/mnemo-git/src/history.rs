//! The read side of versioning: the log of the store (or of a folder), one commit or one
//! file as it was, and every version of the files a caller picks.

use std::path::{Path, PathBuf};

use git2::{Commit, ErrorCode, Repository, Revwalk, Sort};
use serde::Serialize;

use crate::commits::{
    commit_changes, commit_info, head_commit, ChangeStatus, CommitInfo, FileChange,
};
use crate::error::GitError;
use crate::repo::Versioning;

/// What [`Versioning::show`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Shown {
    /// No path was given: the commit, with every file it changed.
    Commit(CommitInfo),
    /// A path was given: that file as the commit left it.
    File {
        /// The commit, with its change to this file only (none if it left the file alone).
        commit: CommitInfo,
        /// The file, relative to the store.
        path: PathBuf,
        /// The file as it was at that revision (invalid UTF-8 replaced).
        content: String,
    },
}

/// One version of a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema, schemars::JsonSchema)]
pub struct FileVersion {
    /// The commit that made this version; its `changes` are the picked files only.
    pub commit: CommitInfo,
    /// The file, relative to the store.
    #[schema(value_type = String)]
    pub path: PathBuf,
    /// What the commit did to it.
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

    /// Up to `limit` versions of the files `picks` accepts (git paths, relative to the store),
    /// newest first: each commit that added, changed, moved (e.g. into `deleted/` as a
    /// tombstone) or removed one, with the file's content. One memory's files are picked by
    /// the store's layout rules, which this crate does not know.
    pub fn history(
        &self,
        picks: impl Fn(&str) -> bool,
        limit: usize,
    ) -> Result<Vec<FileVersion>, GitError> {
        let repo = self.lock();
        let mut versions = Vec::new();
        for commit in self.walk(&repo)? {
            if versions.len() >= limit {
                break;
            }
            let commit = commit?;
            let found = commit_changes(&repo, &commit, &picks)
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
                versions.push(FileVersion {
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

    /// The commit `rev` resolves to; [`GitError::NoRevision`] when it names none.
    pub(crate) fn resolve<'r>(
        &self,
        repo: &'r Repository,
        rev: &str,
    ) -> Result<Commit<'r>, GitError> {
        let object = repo.revparse_single(rev).map_err(|e| match e.code() {
            ErrorCode::NotFound | ErrorCode::InvalidSpec | ErrorCode::UnbornBranch => {
                GitError::NoRevision {
                    rev: rev.to_owned(),
                    root: self.root().to_owned(),
                }
            }
            _ => self.git_err(format!("cannot resolve revision {rev}"))(e),
        })?;
        // A tree or a blob (`HEAD:entries`) resolves to no commit.
        object.peel_to_commit().map_err(|e| match e.code() {
            ErrorCode::Peel | ErrorCode::InvalidSpec => GitError::NoRevision {
                rev: rev.to_owned(),
                root: self.root().to_owned(),
            },
            _ => self.git_err(format!("{rev} is not a commit"))(e),
        })
    }
}

/// Whether `path` is `prefix` or lies below it (`entries/trip` does not hold `entries/trip-2`).
fn is_under(path: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}
