//! Real repositories in temporary folders; the `git` command line checks what we committed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use mnemo_core::MemoryId;
use mnemo_git::{ChangeStatus, CommitInfo, GitConfig, GitError, Shown, Versioning};
use mnemo_store::layout::{is_file_of, unversioned};
use tempfile::TempDir;

/// What mnemo opens a store's repository with: the store's own ignore list.
fn config() -> GitConfig {
    GitConfig {
        ignore: unversioned(),
        ..GitConfig::default()
    }
}

fn open(root: &Path) -> Versioning {
    Versioning::open(root, config()).unwrap()
}

fn new_store() -> (TempDir, Versioning) {
    let dir = tempfile::tempdir().unwrap();
    let versioning = open(dir.path());
    (dir, versioning)
}

/// Writes like the store does: a temporary file (which git ignores), renamed over the target.
/// Other threads commit meanwhile, and must never see half a file.
fn write(root: &Path, relative: &str, text: &str) {
    let path = root.join(relative);
    let dir = path.parent().unwrap();
    fs::create_dir_all(dir).unwrap();
    let temp = dir.join(format!(".mnemo-tmp-{}", MemoryId::random()));
    fs::write(&temp, text).unwrap();
    fs::rename(temp, path).unwrap();
}

fn fact_path(conversation: &str, id: MemoryId) -> String {
    format!("entries/{conversation}/facts/20260302T184005000Z__{id}.md")
}

fn fact(id: MemoryId, body: &str) -> String {
    format!("---\nid: {id}\nconversation_id: c\nrole: memory\ncreated_at: 2026-03-02T18:40:05.000Z\n---\n{body}\n")
}

fn changes(info: &CommitInfo) -> Vec<(ChangeStatus, String)> {
    let changes: Vec<_> = info
        .changes
        .iter()
        .map(|c| (c.status, c.path.to_string_lossy().into_owned()))
        .collect();
    sorted(changes)
}

fn sorted(mut changes: Vec<(ChangeStatus, String)>) -> Vec<(ChangeStatus, String)> {
    changes.sort_by(|a, b| a.1.cmp(&b.1));
    changes
}

fn git(root: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn versioning_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Versioning>();
}

#[test]
fn init_commits_what_the_store_holds_once() {
    let dir = tempfile::tempdir().unwrap();
    let id = MemoryId::random();
    write(
        dir.path(),
        &fact_path("c", id),
        &fact(id, "Anne is my wife."),
    );
    write(dir.path(), "memory_index.json", "{}");
    write(dir.path(), "index/segment", "binary");

    let versioning = open(dir.path());
    assert!(dir.path().join(".git").is_dir());
    let ignore = fs::read_to_string(dir.path().join(".gitignore")).unwrap();
    for line in unversioned() {
        assert!(ignore.lines().any(|l| l == line), "{line} in {ignore}");
    }
    let log = versioning.log(None, 10).unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].message, "mnemo: initial commit");
    assert_eq!(log[0].author, "mnemo");
    assert_eq!(
        changes(&log[0]),
        [
            (ChangeStatus::Added, ".gitignore".to_owned()),
            (ChangeStatus::Added, fact_path("c", id)),
        ]
    );
    assert!(!versioning.has_uncommitted_changes().unwrap());
    drop(versioning);

    let reopened = open(dir.path());
    assert_eq!(reopened.log(None, 10).unwrap(), log);
    assert_eq!(reopened.commit_all("nothing").unwrap(), None);
}

#[test]
fn ignored_files_are_never_committed() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let ignored = [
        "index/segment",
        "index/.lock",
        "memory_index.json",
        "entries/c/facts/.mnemo-tmp-x",
        "entries/c/facts/a.swp",
        "entries/c/facts/a.md~",
        "entries/c/facts/a.tmp",
        ".mnemo.lock",
        "pending/123-abc.json",
    ];
    for path in ignored {
        write(root, path, "junk");
    }
    assert!(!versioning.has_uncommitted_changes().unwrap());
    assert_eq!(versioning.commit_all("junk only").unwrap(), None);

    let id = MemoryId::random();
    write(root, &fact_path("c", id), &fact(id, "real"));
    let commit = versioning.commit_all("one fact").unwrap().unwrap();
    assert_eq!(
        changes(&commit),
        [(ChangeStatus::Added, fact_path("c", id))]
    );
    for path in ignored {
        let err = versioning.show("HEAD", Some(Path::new(path))).unwrap_err();
        assert!(matches!(err, GitError::NoSuchPath { .. }), "{path}: {err}");
    }
}

#[test]
fn commits_show_added_modified_deleted_and_moved_files() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    assert_eq!(versioning.commit_all("no change").unwrap(), None);

    let (a, b) = (MemoryId::random(), MemoryId::random());
    write(root, &fact_path("c", a), &fact(a, "Anne likes tea."));
    write(root, &fact_path("c", b), &fact(b, "The cat is Miso."));
    let added = versioning.commit_all("add").unwrap().unwrap();
    assert_eq!(added.message, "add");
    assert_eq!(
        changes(&added),
        sorted(vec![
            (ChangeStatus::Added, fact_path("c", a)),
            (ChangeStatus::Added, fact_path("c", b)),
        ])
    );
    assert!(!versioning.has_uncommitted_changes().unwrap());

    write(root, &fact_path("c", a), &fact(a, "Anne likes green tea."));
    assert!(versioning.has_uncommitted_changes().unwrap());
    let modified = versioning.commit_all("modify").unwrap().unwrap();
    assert_eq!(
        changes(&modified),
        [(ChangeStatus::Modified, fact_path("c", a))]
    );

    // A soft delete: moved under deleted/ and marked.
    let tombstone = format!("entries/c/deleted/facts/20260302T184005000Z__{a}.md");
    fs::create_dir_all(root.join("entries/c/deleted/facts")).unwrap();
    fs::rename(root.join(fact_path("c", a)), root.join(&tombstone)).unwrap();
    let marked = fact(a, "Anne likes green tea.")
        .replace("---\nA", "deleted_at: 2026-03-03T00:00:00.000Z\n---\nA");
    write(root, &tombstone, &marked);
    let moved = versioning.commit_all("delete").unwrap().unwrap();
    assert_eq!(moved.changes.len(), 1, "{moved:?}");
    assert_eq!(moved.changes[0].status, ChangeStatus::Renamed);
    assert_eq!(moved.changes[0].path, PathBuf::from(&tombstone));
    assert_eq!(
        moved.changes[0].old_path,
        Some(PathBuf::from(fact_path("c", a)))
    );

    fs::remove_file(root.join(fact_path("c", b))).unwrap();
    let removed = versioning.commit_all("remove").unwrap().unwrap();
    assert_eq!(
        changes(&removed),
        [(ChangeStatus::Deleted, fact_path("c", b))]
    );

    let messages: Vec<_> = versioning
        .log(None, 10)
        .unwrap()
        .into_iter()
        .map(|c| c.message)
        .collect();
    assert_eq!(
        messages,
        ["remove", "delete", "modify", "add", "mnemo: initial commit"]
    );
    assert_eq!(versioning.log(None, 2).unwrap().len(), 2);
}

/// A commit of noted files builds its tree from the last commit's, folder by folder: after
/// every step of 120 adds, edits, tombstone moves and removals (the last file of a folder
/// too), each noted and committed (every other one answering only its short id), the commit
/// holds exactly the files on disk, git sees nothing uncommitted and no empty folder is
/// left in the tree. A file replaced by a folder
/// of the same name is committed too (from the whole index).
#[test]
fn a_commit_of_noted_files_is_the_store_as_it_is() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let mut seed: u64 = 0x5eed;
    let mut next = move |n: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize % n
    };
    let mut live: Vec<String> = Vec::new();
    for step in 0..120 {
        let conversation = ["a", "b", "c"][next(3)];
        let id = MemoryId::random();
        let mut noted: Vec<String> = Vec::new();
        match next(4) {
            0 | 1 => {
                let path = fact_path(conversation, id);
                write(root, &path, &fact(id, &format!("fact {step}")));
                noted.push(path.clone());
                live.push(path);
            }
            2 if !live.is_empty() => {
                let path = live[next(live.len())].clone();
                write(root, &path, &format!("edited at {step}\n"));
                noted.push(path);
            }
            _ if !live.is_empty() => {
                let path = live.swap_remove(next(live.len()));
                if next(2) == 0 {
                    fs::remove_file(root.join(&path)).unwrap();
                } else {
                    let name = Path::new(&path).file_name().unwrap().to_str().unwrap();
                    let conversation = path.split('/').nth(1).unwrap();
                    let tombstone = format!("entries/{conversation}/deleted/facts/{name}");
                    fs::create_dir_all(root.join(&tombstone).parent().unwrap()).unwrap();
                    fs::rename(root.join(&path), root.join(&tombstone)).unwrap();
                    noted.push(tombstone);
                }
                noted.push(path);
            }
            _ => continue,
        }
        versioning.note_changed(noted.iter().map(|p| root.join(p)));
        if step % 2 == 0 {
            versioning.commit_noted(&format!("step {step}")).unwrap();
        } else {
            let short = versioning.commit_noted_short(&format!("step {step}"));
            let head = git(root, &["rev-parse", "--short=12", "HEAD"]);
            assert_eq!(short.unwrap().unwrap(), head.trim(), "step {step}");
        }
        assert_eq!(
            git(root, &["status", "--porcelain", "--untracked-files=all"]),
            "",
            "step {step}"
        );
        let mut committed: Vec<String> = git(root, &["ls-tree", "-r", "--name-only", "HEAD"])
            .lines()
            .filter(|p| p.starts_with("entries/"))
            .map(str::to_owned)
            .collect();
        committed.sort();
        let mut on_disk = files_under(&root.join("entries"));
        on_disk.iter_mut().for_each(|p| *p = format!("entries/{p}"));
        assert_eq!(committed, on_disk, "step {step}");
        for tree in git(root, &["ls-tree", "-r", "-d", "--name-only", "HEAD"]).lines() {
            assert!(
                committed.iter().any(|p| p.starts_with(&format!("{tree}/"))),
                "step {step}: {tree} is an empty folder in the commit"
            );
        }
    }

    // A file where a folder now is: a type change.
    let path = live.pop().unwrap();
    fs::remove_file(root.join(&path)).unwrap();
    write(root, &format!("{path}/inside.md"), "a file in a folder\n");
    versioning.note_changed([root.join(&path), root.join(format!("{path}/inside.md"))]);
    versioning.commit_noted("type change").unwrap().unwrap();
    assert_eq!(
        git(root, &["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
    assert!(
        git(root, &["ls-tree", "-r", "--name-only", "HEAD"]).contains(&format!("{path}/inside.md"))
    );
}

#[test]
fn log_filters_by_conversation_folder() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    // `trip` is a prefix of `trip-japan` as text, not as a folder.
    for (conversation, message) in [
        ("trip", "trip 1"),
        ("trip-japan", "japan"),
        ("trip", "trip 2"),
    ] {
        let id = MemoryId::random();
        write(root, &fact_path(conversation, id), &fact(id, message));
        versioning.commit_all(message).unwrap().unwrap();
    }
    let messages = |prefix: &str| -> Vec<String> {
        versioning
            .log(Some(Path::new(prefix)), 10)
            .unwrap()
            .into_iter()
            .map(|c| c.message)
            .collect()
    };
    assert_eq!(messages("entries/trip"), ["trip 2", "trip 1"]);
    assert_eq!(messages("entries/trip-japan"), ["japan"]);
    assert_eq!(messages("entries/nobody"), Vec::<String>::new());
    // Absolute paths inside the store work too; outside it they are refused.
    assert_eq!(
        versioning
            .log(Some(&versioning.root().join("entries/trip-japan")), 10)
            .unwrap()
            .len(),
        1
    );
    let err = versioning
        .log(Some(Path::new("/elsewhere")), 10)
        .unwrap_err();
    assert!(matches!(err, GitError::OutsideStore { .. }), "{err}");
    let err = versioning.log(Some(Path::new("../x")), 10).unwrap_err();
    assert!(matches!(err, GitError::OutsideStore { .. }), "{err}");
}

#[test]
fn show_gives_old_content_and_clear_errors() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let id = MemoryId::random();
    let path = fact_path("c", id);
    write(root, &path, &fact(id, "first"));
    let first = versioning.commit_all("first").unwrap().unwrap();
    write(root, &path, &fact(id, "second"));
    versioning.commit_all("second").unwrap().unwrap();

    for rev in ["HEAD~1", first.id.as_str(), first.short_id.as_str()] {
        let Shown::File {
            commit, content, ..
        } = versioning.show(rev, Some(Path::new(&path))).unwrap()
        else {
            panic!("{rev} should show a file");
        };
        assert_eq!(content, fact(id, "first"));
        assert_eq!(commit.id, first.id);
    }
    let Shown::Commit(head) = versioning.show("HEAD", None).unwrap() else {
        panic!("HEAD should show a commit");
    };
    assert_eq!(head.message, "second");
    assert_eq!(changes(&head), [(ChangeStatus::Modified, path.clone())]);

    let err = versioning
        .show("HEAD~1", Some(Path::new("entries/c/facts/nope.md")))
        .unwrap_err();
    assert!(matches!(err, GitError::NoSuchPath { .. }));
    assert!(
        err.to_string()
            .contains("entries/c/facts/nope.md did not exist at revision HEAD~1"),
        "{err}"
    );
    let err = versioning
        .show("HEAD~2", Some(Path::new(&path)))
        .unwrap_err();
    assert!(matches!(err, GitError::NoSuchPath { .. }), "{err}");
    let err = versioning
        .show("HEAD", Some(Path::new("entries/c")))
        .unwrap_err();
    assert!(matches!(err, GitError::NotAFile { .. }), "{err}");
    for rev in ["nope", "HEAD~9", "0123456789abcdef"] {
        let err = versioning.show(rev, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("no revision {rev} in {}", versioning.root().display())
        );
    }
}

#[test]
fn history_follows_a_fact_into_deleted() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let (old, new, other) = (MemoryId::random(), MemoryId::random(), MemoryId::random());
    write(root, &fact_path("c", old), &fact(old, "Anne likes tea."));
    write(root, &fact_path("c", other), &fact(other, "unrelated"));
    versioning.commit_all("add").unwrap().unwrap();
    write(
        root,
        &fact_path("c", old),
        &fact(old, "Anne likes green tea."),
    );
    versioning.commit_all("edit").unwrap().unwrap();
    write(
        root,
        &fact_path("c", other),
        &fact(other, "still unrelated"),
    );
    versioning.commit_all("other").unwrap().unwrap();
    // An update: the old fact becomes a tombstone replaced by a new one.
    let tombstone = format!("entries/c/deleted/facts/20260302T184005000Z__{old}.md");
    fs::create_dir_all(root.join("entries/c/deleted/facts")).unwrap();
    fs::remove_file(root.join(fact_path("c", old))).unwrap();
    let marked = format!(
        "---\nid: {old}\nconversation_id: c\nrole: memory\ncreated_at: 2026-03-02T18:40:05.000Z\n\
         deleted_at: 2026-03-04T10:00:00.000Z\nreplaced_by: {new}\n---\nAnne likes green tea.\n"
    );
    write(root, &tombstone, &marked);
    write(root, &fact_path("c", new), &fact(new, "Anne likes coffee."));
    versioning.commit_all("update").unwrap().unwrap();

    let history = versioning.history(|p| is_file_of(p, old), 10).unwrap();
    let summary: Vec<_> = history
        .iter()
        .map(|v| {
            (
                v.commit.message.as_str(),
                v.status,
                v.path.to_string_lossy().into_owned(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("update", ChangeStatus::Renamed, tombstone.clone()),
            ("edit", ChangeStatus::Modified, fact_path("c", old)),
            ("add", ChangeStatus::Added, fact_path("c", old)),
        ]
    );
    assert!(history[0].content.contains(&format!("replaced_by: {new}")));
    assert_eq!(history[1].content, fact(old, "Anne likes green tea."));
    assert_eq!(history[2].content, fact(old, "Anne likes tea."));
    // The commit lists this memory's files only.
    assert_eq!(history[0].commit.changes.len(), 1);
    assert_eq!(
        versioning.history(|p| is_file_of(p, old), 1).unwrap().len(),
        1
    );
    assert_eq!(
        versioning
            .history(|p| is_file_of(p, MemoryId::random()), 10)
            .unwrap(),
        []
    );
}

#[test]
fn history_of_a_summary_follows_summary_md() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let conversation = mnemo_core::ConversationId::new("c").unwrap();
    let id = MemoryId::summary_of(&conversation);
    for (i, body) in ["v1", "v2"].iter().enumerate() {
        write(
            root,
            "entries/c/summaries/summary.md",
            &format!("---\nid: {id}\n---\n{body}\n"),
        );
        write(
            root,
            "entries/d/summaries/summary.md",
            &format!("---\n---\nother {i}\n"),
        );
        versioning.commit_all(body).unwrap().unwrap();
    }
    let history = versioning.history(|p| is_file_of(p, id), 10).unwrap();
    let bodies: Vec<_> = history
        .iter()
        .map(|v| v.content.lines().last().unwrap_or(""))
        .collect();
    assert_eq!(bodies, ["v2", "v1"]);
    assert!(history
        .iter()
        .all(|v| v.path == Path::new("entries/c/summaries/summary.md")));
}

#[test]
fn a_store_inside_another_repository_gets_its_own() {
    let outer = tempfile::tempdir().unwrap();
    git(outer.path(), &["init", "-q"]);
    let store = outer.path().join("memory_db");
    let versioning = open(&store);
    assert!(store.join(".git").is_dir());
    let top = git(&store, &["rev-parse", "--show-toplevel"]);
    assert_eq!(Path::new(top.trim()), versioning.root());
    // The outer repository saw no commit.
    let outer_log = Command::new("git")
        .arg("-C")
        .arg(outer.path())
        .args(["rev-parse", "--verify", "-q", "HEAD"])
        .output()
        .unwrap();
    assert!(!outer_log.status.success());
}

#[test]
fn a_locked_index_fails_the_commit_and_the_next_one_catches_up() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let (a, b) = (MemoryId::random(), MemoryId::random());
    write(root, &fact_path("c", a), &fact(a, "first"));
    let lock = root.join(".git/index.lock");
    fs::write(&lock, "").unwrap();
    let err = versioning.commit_all("blocked").unwrap_err();
    assert!(err.to_string().contains("locked"), "{err}");
    assert!(versioning
        .last_error()
        .is_some_and(|e| e.contains("locked")));
    assert_eq!(versioning.log(None, 10).unwrap().len(), 1);
    assert!(versioning.has_uncommitted_changes().unwrap());

    fs::remove_file(&lock).unwrap();
    write(root, &fact_path("c", b), &fact(b, "second"));
    let commit = versioning.commit_all("retry").unwrap().unwrap();
    assert_eq!(
        changes(&commit),
        sorted(vec![
            (ChangeStatus::Added, fact_path("c", a)),
            (ChangeStatus::Added, fact_path("c", b)),
        ])
    );
    assert!(!versioning.has_uncommitted_changes().unwrap());
}

#[test]
fn existing_repository_gets_ignore_lines_and_untracks_ignored_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q"]);
    write(root, ".gitignore", "notes/private");
    write(root, "memory_index.json", "{}");
    write(root, "index/segment", "binary");
    write(root, "entries/c/facts/x.md", "hand-written");
    git(root, &["add", "."]);
    git(
        root,
        &[
            "-c",
            "user.name=someone",
            "-c",
            "user.email=s@x",
            "commit",
            "-q",
            "-m",
            "by hand",
        ],
    );

    let versioning = open(root);
    let ignore = fs::read_to_string(root.join(".gitignore")).unwrap();
    assert!(ignore.starts_with("notes/private\n"), "{ignore}");
    assert!(ignore.contains("/memory_index.json\n"));
    let commit = versioning.commit_all("mnemo takes over").unwrap().unwrap();
    assert_eq!(
        changes(&commit),
        [
            (ChangeStatus::Modified, ".gitignore".to_owned()),
            (ChangeStatus::Deleted, "index/segment".to_owned()),
            (ChangeStatus::Deleted, "memory_index.json".to_owned()),
        ]
    );
    assert!(root.join("memory_index.json").exists());
    assert_eq!(
        git(root, &["ls-files"]),
        ".gitignore\nentries/c/facts/x.md\n"
    );
    // Opening again changes nothing.
    drop(versioning);
    assert_eq!(open(root).commit_all("again").unwrap(), None);
}

#[test]
fn the_git_command_line_agrees() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let id = MemoryId::random();
    write(root, &fact_path("c", id), &fact(id, "one"));
    write(root, "memory_index.json", "{}");
    versioning.commit_all("one").unwrap().unwrap();
    write(root, &fact_path("c", id), &fact(id, "two"));
    write(root, "entries/c/facts/b.swp", "junk");
    versioning.commit_all("two").unwrap().unwrap();

    assert_eq!(git(root, &["status", "--porcelain"]), "");
    let ids: Vec<String> = versioning
        .log(None, 10)
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    let git_ids: Vec<String> = git(root, &["log", "--format=%H"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(ids, git_ids);
    assert_eq!(
        git(root, &["log", "-1", "--format=%an <%ae> %s"]),
        "mnemo <mnemo@localhost> two\n"
    );
    assert_eq!(
        git(root, &["show", &format!("HEAD~1:{}", fact_path("c", id))]),
        fact(id, "one")
    );
    // And mnemo sees what git commits.
    write(root, "entries/c/facts/hand.md", "by hand");
    git(root, &["add", "."]);
    git(
        root,
        &[
            "-c",
            "user.name=someone",
            "-c",
            "user.email=s@x",
            "commit",
            "-q",
            "-m",
            "hand edit",
        ],
    );
    assert_eq!(versioning.commit_all("nothing").unwrap(), None);
    assert_eq!(versioning.log(None, 1).unwrap()[0].message, "hand edit");
}

#[test]
fn threads_share_one_versioning() {
    let (dir, versioning) = new_store();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (root, versioning) = (dir.path(), &versioning);
            scope.spawn(move || {
                for i in 0..5 {
                    let id = MemoryId::random();
                    write(
                        root,
                        &fact_path(&format!("t{t}"), id),
                        &fact(id, &format!("{t} {i}")),
                    );
                    versioning.commit_all(&format!("{t} {i}")).unwrap();
                }
            });
        }
    });
    assert!(!versioning.has_uncommitted_changes().unwrap());
    let files: usize = versioning
        .log(None, 100)
        .unwrap()
        .iter()
        .map(|c| c.changes.len())
        .sum();
    assert_eq!(files, 20 + 1);
}

#[test]
fn commit_noted_stages_only_the_noted_files_and_keeps_them_noted_after_a_failure() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let (a, b, c) = (MemoryId::random(), MemoryId::random(), MemoryId::random());
    write(root, &fact_path("c", a), &fact(a, "noted"));
    write(
        root,
        &fact_path("c", b),
        &fact(b, "edited by hand, not noted"),
    );
    fs::write(root.join("entries/c/facts/.mnemo-tmp-x"), "half").unwrap();
    versioning.note_changed([
        root.join(fact_path("c", a)),
        root.join("entries/c/facts/.mnemo-tmp-x"),
    ]);
    let commit = versioning.commit_noted("one fact").unwrap().unwrap();
    assert_eq!(
        changes(&commit),
        vec![(ChangeStatus::Added, fact_path("c", a))],
        "only the noted file, never an ignored one"
    );
    assert!(versioning.has_uncommitted_changes().unwrap(), "b waits");

    // A failed commit keeps what it was to stage; the next one carries it.
    fs::remove_file(root.join(fact_path("c", a))).unwrap();
    write(root, &fact_path("c", c), &fact(c, "third"));
    versioning.note_changed([PathBuf::from(fact_path("c", a))]);
    versioning.note_changed([root.join(fact_path("c", c))]);
    let lock = root.join(".git/index.lock");
    fs::write(&lock, "").unwrap();
    versioning.commit_noted("blocked").unwrap_err();
    fs::remove_file(&lock).unwrap();
    versioning.commit_noted("retry").unwrap().unwrap();
    let tracked = git(root, &["ls-tree", "-r", "--name-only", "HEAD"]);
    assert!(!tracked.contains(&fact_path("c", a)), "{tracked}");
    assert!(tracked.contains(&fact_path("c", c)), "{tracked}");
    assert!(!tracked.contains(&fact_path("c", b)), "{tracked}");
    assert_eq!(versioning.commit_noted("nothing noted").unwrap(), None);

    // A reopened repository stages everything once: what changed while it was closed.
    drop(versioning);
    let reopened = open(root);
    let commit = reopened.commit_noted("catch up").unwrap().unwrap();
    assert_eq!(
        changes(&commit),
        vec![(ChangeStatus::Added, fact_path("c", b))]
    );
    assert!(!reopened.has_uncommitted_changes().unwrap());
}

#[test]
fn a_lock_left_by_a_dead_process_is_cleared() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let id = MemoryId::random();
    write(root, &fact_path("c", id), &fact(id, "first"));
    let lock = root.join(".git/index.lock");
    fs::write(&lock, "").unwrap();
    // Two minutes old: git holds the lock for a moment, so nobody alive holds this one.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
    fs::File::options()
        .write(true)
        .open(&lock)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let commit = versioning.commit_all("after a crash").unwrap().unwrap();
    assert_eq!(
        changes(&commit),
        [(ChangeStatus::Added, fact_path("c", id))]
    );
    assert!(!lock.exists());
    assert_eq!(versioning.last_error(), None);
}

/// A `git commit -a` in the store whose editor never returns, as when a person leaves it
/// open: it holds `.git/index.lock` for as long as it runs. It runs in a process group of
/// its own (git and its editor), killed when this is dropped.
struct EditingCommit(std::process::Child);

impl EditingCommit {
    fn start(root: &Path) -> Self {
        use std::os::unix::process::CommandExt;
        let child = Command::new("git")
            .args(["commit", "-a"])
            .current_dir(root)
            // The comment swallows the file name git appends.
            .env("GIT_EDITOR", "sleep 600 #")
            .envs([
                ("GIT_AUTHOR_NAME", "person"),
                ("GIT_AUTHOR_EMAIL", "person@localhost"),
                ("GIT_COMMITTER_NAME", "person"),
                ("GIT_COMMITTER_EMAIL", "person@localhost"),
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        Self(child)
    }

    /// Kills git and its editor at once, as a crash would.
    fn kill(&mut self) {
        let group = self.0.id() as libc::pid_t;
        // SAFETY: signals the process group this test started (its id is the child's).
        unsafe { libc::killpg(group, libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

impl Drop for EditingCommit {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Each `git` process this machine runs, with its working folder, for a failure message.
fn git_processes() -> String {
    let Ok(processes) = fs::read_dir("/proc") else {
        return "(no /proc)".into();
    };
    processes
        .filter_map(Result::ok)
        .filter(|p| fs::read_to_string(p.path().join("comm")).is_ok_and(|c| c.starts_with("git")))
        .map(|p| {
            format!(
                "{:?} in {:?}",
                p.file_name(),
                fs::read_link(p.path().join("cwd"))
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Sets `path`'s modification time `secs` seconds back.
fn age(path: &Path, secs: u64) {
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(secs);
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(old)
        .unwrap();
}

#[test]
fn a_lock_held_by_a_live_git_command_is_kept_however_old() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let id = MemoryId::random();
    write(root, &fact_path("c", id), &fact(id, "first"));
    versioning.commit_all("one").unwrap().unwrap();
    write(root, &fact_path("c", id), &fact(id, "edited by hand"));
    let lock = root.join(".git/index.lock");
    let mut editing = EditingCommit::start(root);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !lock.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "git commit never took the index lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Older than any lock git holds for a moment; but git is alive and working in the store.
    age(&lock, 120);
    let err = versioning
        .commit_all("while a person edits")
        .expect_err("a commit went through a lock a live git command holds");
    assert!(err.to_string().contains("locked"), "{err}");
    assert!(lock.exists(), "a live git command's lock was removed");
    assert!(versioning
        .last_error()
        .is_some_and(|e| e.contains("locked")));

    // Once that git is dead, its lock is one left behind: cleared, and the commit made.
    editing.kill();
    assert!(lock.exists(), "git died holding its lock");
    age(&lock, 120);
    // SIGKILL reaches the rest of the group (the editor's shell) a moment later; until
    // the kernel has taken them down, a git of the group may still show in `/proc`.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let commit = loop {
        match versioning.commit_all("after the editor died") {
            Ok(commit) => break commit.unwrap(),
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => panic!("{e}; git processes: {}", git_processes()),
        }
    };
    assert_eq!(
        changes(&commit),
        [(ChangeStatus::Modified, fact_path("c", id))]
    );
    assert!(!lock.exists());
    assert_eq!(versioning.last_error(), None);
}

#[test]
fn a_corrupt_index_is_rebuilt_from_head() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let id = MemoryId::random();
    write(root, &fact_path("c", id), &fact(id, "kept"));
    versioning.commit_all("one").unwrap().unwrap();
    drop(versioning);
    for broken in ["", "DIRC garbage that is no index"] {
        fs::write(root.join(".git/index"), broken).unwrap();
        let reopened = open(root);
        assert!(!reopened.has_uncommitted_changes().unwrap(), "index = HEAD");
        let other = MemoryId::random();
        write(root, &fact_path("c", other), &fact(other, "new"));
        let commit = reopened.commit_all("after repair").unwrap().unwrap();
        assert_eq!(
            changes(&commit),
            [(ChangeStatus::Added, fact_path("c", other))]
        );
    }
    let kept_aside = fs::read_dir(root.join(".git"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("index.broken-")
        })
        .count();
    assert!(kept_aside >= 1);
}

/// Every file of `dir`, as `/`-separated paths relative to it, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else {
                let relative = path.strip_prefix(base).unwrap();
                out.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out.sort();
    out
}

fn entries_only(path: &str) -> bool {
    path.starts_with("entries/")
}

#[test]
fn export_writes_the_picked_files_of_a_revision_as_they_were() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let (a, b, c) = (MemoryId::random(), MemoryId::random(), MemoryId::random());
    write(root, &fact_path("c", a), &fact(a, "Anne likes tea."));
    write(root, &fact_path("c", b), &fact(b, "The cat is Miso."));
    write(root, "conversations/c/strategy.yaml", "mode: trim\n");
    std::os::unix::fs::symlink("/etc/passwd", root.join("entries/c/facts/link.md")).unwrap();
    let first = versioning.commit_all("first").unwrap().unwrap();
    write(root, &fact_path("c", a), &fact(a, "Anne likes coffee."));
    fs::remove_file(root.join(fact_path("c", b))).unwrap();
    write(root, &fact_path("c", c), &fact(c, "Bob plays the cello."));
    versioning.commit_all("second").unwrap().unwrap();

    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("as-of");
    let export = versioning
        .export("HEAD~1", &dest, entries_only, &Default::default())
        .unwrap();
    assert_eq!(export.commit.id, first.id);
    assert_eq!(export.commit.message, "first");
    assert!(export.commit.changes.is_empty());
    assert_eq!(export.files, 2, "the link is not a regular file");
    assert!(export.oversized.is_empty());
    assert_eq!(
        files_under(&dest),
        sorted_paths([fact_path("c", a), fact_path("c", b)])
    );
    let old_a = fs::read_to_string(dest.join(fact_path("c", a))).unwrap();
    assert!(old_a.contains("Anne likes tea."), "{old_a}");
    assert_eq!(
        export.bytes,
        (old_a.len() + fact(b, "The cat is Miso.").len()) as u64
    );
    assert_eq!(versioning.commit_of("HEAD~1").unwrap(), export.commit);
    assert_eq!(versioning.commit_of(&first.short_id).unwrap().id, first.id);

    let err = versioning
        .export(
            "no-such-rev",
            &out.path().join("x"),
            entries_only,
            &Default::default(),
        )
        .unwrap_err();
    assert!(matches!(err, GitError::NoRevision { .. }), "{err}");
    assert!(
        !out.path().join("x").exists(),
        "nothing is written for a bad revision"
    );
    assert!(matches!(
        versioning.commit_of("HEAD~9").unwrap_err(),
        GitError::NoRevision { .. }
    ));
}

fn sorted_paths<const N: usize>(paths: [String; N]) -> Vec<String> {
    let mut paths = paths.to_vec();
    paths.sort();
    paths
}

#[test]
fn an_export_over_its_caps_writes_nothing_and_names_the_cap() {
    let (dir, versioning) = new_store();
    let root = dir.path();
    let (a, b) = (MemoryId::random(), MemoryId::random());
    write(root, &fact_path("c", a), &fact(a, "Anne likes tea."));
    write(root, &fact_path("c", b), &fact(b, &"long ".repeat(100)));
    versioning.commit_all("two").unwrap().unwrap();
    let out = tempfile::tempdir().unwrap();
    let export = |limits: mnemo_git::ExportLimits, name: &str| {
        versioning.export("HEAD", &out.path().join(name), entries_only, &limits)
    };

    let err = export(
        mnemo_git::ExportLimits {
            max_files: 1,
            ..Default::default()
        },
        "files",
    )
    .unwrap_err();
    assert!(matches!(err, GitError::ExportTooLarge { .. }), "{err}");
    assert!(err.to_string().contains("more than 1 files"), "{err}");
    let err = export(
        mnemo_git::ExportLimits {
            max_total_bytes: 200,
            ..Default::default()
        },
        "bytes",
    )
    .unwrap_err();
    assert!(err.to_string().contains("more than 200 bytes"), "{err}");
    assert_eq!(files_under(out.path()), Vec::<String>::new());

    let export = export(
        mnemo_git::ExportLimits {
            max_file_bytes: 300,
            ..Default::default()
        },
        "one",
    )
    .unwrap();
    assert_eq!(export.oversized, [fact_path("c", b)]);
    assert_eq!(files_under(&out.path().join("one")), [fact_path("c", a)]);
}

#[test]
fn an_export_refuses_a_picked_path_that_climbs_out() {
    let (dir, versioning) = new_store();
    // A tree no git command writes: a file named `..` inside `entries/`.
    let repo = git2::Repository::open(dir.path()).unwrap();
    let blob = repo.blob(b"escaped").unwrap();
    let mut raw = b"100644 ..\0".to_vec();
    raw.extend_from_slice(blob.as_bytes());
    let odb = repo.odb().unwrap();
    let entries = odb.write(git2::ObjectType::Tree, &raw).unwrap();
    let mut raw = b"40000 entries\0".to_vec();
    raw.extend_from_slice(entries.as_bytes());
    let top = odb.write(git2::ObjectType::Tree, &raw).unwrap();
    let tree = repo.find_tree(top).unwrap();
    let signature = git2::Signature::now("t", "t@localhost").unwrap();
    let head = repo.head().unwrap().peel_to_commit().unwrap();
    repo.commit(
        Some("HEAD"),
        &signature,
        &signature,
        "hostile",
        &tree,
        &[&head],
    )
    .unwrap();

    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("in");
    let err = versioning
        .export("HEAD", &dest, |_| true, &Default::default())
        .unwrap_err();
    assert!(matches!(err, GitError::UnsafePath { .. }), "{err}");
    assert_eq!(files_under(out.path()), Vec::<String>::new());
    // Unpicked, it is never looked at.
    let export = versioning
        .export("HEAD", &dest, |p| p.ends_with(".md"), &Default::default())
        .unwrap();
    assert_eq!(export.files, 0);
}
