//! The file store against a real directory: layout, round trips, hand edits, soft deletes,
//! and that nothing is ever written outside the store.

use std::fs;
use std::path::Path;

use mnemo_core::{ConversationId, MemoryRecord, Role};
use mnemo_store::FileStore;

fn conv(id: &str) -> ConversationId {
    ConversationId::new(id).unwrap()
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn writes_every_role_to_its_folder_and_reads_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let mut written = Vec::new();
    for role in Role::ALL {
        let record = MemoryRecord::new(conv("c1"), role, format!("a {role} memory"));
        let written_file = store.write(&record).unwrap();
        let bytes = fs::read(&written_file.path).unwrap();
        assert_eq!(
            written_file.sha256,
            mnemo_store::sha256_hex(&bytes),
            "the hash is of the bytes on disk"
        );
        assert_eq!(store.read(&written_file.path).unwrap().record, record);
        written.push(record);
    }
    let files = files_under(dir.path());
    let prefixes = [
        "entries/c1/facts/",
        "entries/c1/turns/user/",
        "entries/c1/turns/assistant/",
    ];
    for p in prefixes {
        assert!(
            files.iter().any(|f| f.starts_with(p)),
            "{p} missing in {files:?}"
        );
    }
    assert!(files.contains(&"entries/c1/summaries/summary.md".to_string()));
    let scan = store.scan();
    assert!(scan.skipped.is_empty());
    assert_eq!(scan.memories.len(), 4);
}

#[test]
fn a_broken_file_is_skipped_with_its_name_and_the_rest_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    store
        .write(&MemoryRecord::new(conv("c1"), Role::Memory, "good"))
        .unwrap();
    let facts = dir.path().join("entries/c1/facts");
    fs::write(facts.join("broken.md"), "---\nid: [oops\n---\nbody\n").unwrap();
    fs::write(facts.join("binary.md"), [0xff, 0xfe, 0x00, 0x80]).unwrap();
    fs::write(facts.join("hand.md"), "Written by hand, no front matter.").unwrap();
    fs::write(facts.join(".hand.md.swp"), "editor junk").unwrap();
    fs::write(facts.join("notes.txt"), "not markdown").unwrap();

    let scan = store.scan();
    let contents: Vec<_> = scan
        .memories
        .iter()
        .map(|m| m.record.content.as_str())
        .collect();
    assert_eq!(contents.len(), 2, "{contents:?}");
    assert!(contents.contains(&"Written by hand, no front matter."));
    let skipped: Vec<_> = scan
        .skipped
        .iter()
        .map(|s| {
            (
                s.path.file_name().unwrap().to_string_lossy().into_owned(),
                s.reason.clone(),
            )
        })
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped
        .iter()
        .any(|(n, r)| n == "broken.md" && r.contains("broken.md") && r.contains("YAML")));
    assert!(skipped
        .iter()
        .any(|(n, r)| n == "binary.md" && r.contains("UTF-8")));
}

#[test]
fn soft_delete_moves_to_deleted_and_keeps_the_content() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let old = MemoryRecord::new(conv("c1"), Role::Memory, "my wife is Jane");
    let new = MemoryRecord::new(conv("c1"), Role::Memory, "my wife is Anne");
    let old_path = store.write(&old).unwrap().path;
    store.write(&new).unwrap();

    let tomb = store.soft_delete(&old_path, Some(new.id)).unwrap();
    assert!(!old_path.exists());
    assert!(tomb.starts_with(
        dir.path()
            .canonicalize()
            .unwrap()
            .join("entries/c1/deleted/facts")
    ));
    let dead = store.read(&tomb).unwrap().record;
    assert_eq!(dead.id, old.id);
    assert_eq!(dead.content, "my wife is Jane");
    assert_eq!(dead.replaced_by, Some(new.id));
    assert!(dead.deleted_at.is_some());

    let live: Vec<_> = store
        .scan()
        .memories
        .into_iter()
        .map(|m| m.record.id)
        .collect();
    assert_eq!(live, vec![new.id]);
    assert_eq!(store.scan_deleted(&conv("c1")).memories.len(), 1);
    assert!(
        store.soft_delete(&tomb, None).is_err(),
        "a tombstone cannot be deleted again"
    );
}

#[test]
fn paths_outside_the_store_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.md");
    fs::write(&victim, "do not touch").unwrap();
    let store = FileStore::open(dir.path().join("mem")).unwrap();
    for path in [
        victim.clone(),
        Path::new("entries/../../victim.md").to_owned(),
        Path::new("../victim.md").to_owned(),
        Path::new("entries/c1/../../../victim.md").to_owned(),
    ] {
        let err = store.read(&path).unwrap_err().to_string();
        assert!(err.contains("not a memory file inside the store"), "{err}");
        assert!(store.soft_delete(&path, None).is_err());
    }
    assert_eq!(fs::read_to_string(&victim).unwrap(), "do not touch");
}

#[test]
fn scans_ignore_folders_that_are_not_conversations() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    for bad in [".git", "bad name"] {
        let facts = dir.path().join("entries").join(bad).join("facts");
        fs::create_dir_all(&facts).unwrap();
        fs::write(facts.join("x.md"), "hidden").unwrap();
    }
    assert!(store.scan().memories.is_empty());
}

#[test]
fn leftovers_of_interrupted_writes_are_removed_and_memories_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let kept = store
        .write(&MemoryRecord::new(conv("c1"), Role::Memory, "kept"))
        .unwrap()
        .path;
    let facts = kept.parent().unwrap();
    fs::write(facts.join(".mnemo-tmp-0123abcd"), "---\nid: half").unwrap();
    fs::write(facts.join(".other-hidden"), "not ours").unwrap();
    assert_eq!(store.remove_stale_temp_files(), 1);
    assert!(kept.exists());
    assert!(
        facts.join(".other-hidden").exists(),
        "only mnemo's own temp files are removed"
    );
    assert_eq!(store.memory_files(), vec![kept]);
}

#[test]
fn the_store_id_is_made_once_kept_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let id = store.store_id().unwrap();
    assert_eq!(store.store_id().unwrap(), id, "kept");
    let path = dir.path().join(mnemo_store::layout::STORE_ID_FILE);
    std::fs::write(&path, "not a uuid").unwrap();
    let err = store.store_id().unwrap_err().to_string();
    assert!(err.contains("not a store id"), "{err}");
    assert!(err.contains("delete it"), "{err}");
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
    let err = store.store_id().unwrap_err().to_string();
    assert!(err.contains("symbolic link"), "{err}");
}
