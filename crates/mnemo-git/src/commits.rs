//! Reading commits: what one changed, and the shape callers see it in ([`CommitInfo`]).
//!
//! Shared by the writing side ([`crate::Versioning::commit_noted`] reports the commit it made)
//! and the reading side (`log`, `show`, `history`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use git2::{Commit, Delta, DiffFindOptions, DiffOptions, ErrorCode, Oid, Repository, Tree};
use serde::Serialize;

/// One commit. `changes` lists the files it changed relative to its first parent, within
/// what was asked for: all of them, or only those under `log`'s prefix, `show`'s path or
/// `history_of`'s memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema, schemars::JsonSchema)]
pub struct CommitInfo {
    /// Full hex id.
    pub id: String,
    /// The id's first [`SHORT_ID_DIGITS`] hex digits.
    pub short_id: String,
    /// When it was authored.
    pub time: DateTime<Utc>,
    /// Who authored it (`mnemo`, or whoever edited by hand and committed).
    pub author: String,
    /// The commit message.
    pub message: String,
    /// The files it changed (of those asked about).
    pub changes: Vec<FileChange>,
}

/// One file a commit changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema, schemars::JsonSchema)]
pub struct FileChange {
    /// What happened to it.
    pub status: ChangeStatus,
    /// Relative to the store's root; for a deletion, where the file was.
    #[schema(value_type = String)]
    pub path: PathBuf,
    /// Where a renamed (moved) file was before.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub old_path: Option<PathBuf>,
}

/// What a commit did to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChangeStatus {
    /// It appeared.
    Added,
    /// Its content changed.
    Modified,
    /// It was removed.
    Deleted,
    /// It moved (e.g. into `deleted/` as a tombstone).
    Renamed,
}

/// The commit `HEAD` points to; `None` before the first commit.
pub(crate) fn head_commit(repo: &Repository) -> Result<Option<Commit<'_>>, git2::Error> {
    match repo.head() {
        Ok(head) => head.peel_to_commit().map(Some),
        Err(e) if matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => Ok(None),
        Err(e) => Err(e),
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

/// Hex digits of the commit ids mnemo shows ([`CommitInfo::short_id`]).
pub const SHORT_ID_DIGITS: usize = 12;

/// The first [`SHORT_ID_DIGITS`] hex digits of `id`: as git shortens ids in repositories of
/// hundreds of thousands of objects, unique among them by a wide margin, and not checked
/// against every object as git's own short ids are (libgit2 reads the object folders for
/// that: about 1 ms a commit in a store of 30k files).
pub(crate) fn short_id(id: Oid) -> String {
    let mut id = id.to_string();
    id.truncate(SHORT_ID_DIGITS);
    id
}

pub(crate) fn commit_info(commit: &Commit, changes: Vec<FileChange>) -> CommitInfo {
    let short_id = short_id(commit.id());
    let author = commit.author();
    CommitInfo {
        short_id,
        time: DateTime::from_timestamp(author.when().seconds(), 0).unwrap_or_default(),
        author: String::from_utf8_lossy(author.name_bytes()).into_owned(),
        message: String::from_utf8_lossy(commit.message_bytes())
            .trim_end()
            .to_owned(),
        changes,
        id: commit.id().to_string(),
    }
}
