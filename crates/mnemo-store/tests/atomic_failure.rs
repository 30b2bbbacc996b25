//! A write that fails halfway leaves the file it was replacing as it was, and no temporary
//! file. The failure is real: the process may not write files beyond a few kilobytes
//! (`RLIMIT_FSIZE`), so writing the new content fails with `EFBIG` part way through. The
//! limit holds for the whole process, which is why this test has a binary to itself.

use mnemo_store::atomic::{write_atomic, TEMP_PREFIX};

/// Lowers the file size limit to `bytes` for this process, and ignores the signal the kernel
/// sends on going past it, so the write fails with an error instead of killing the process.
fn limit_file_size(bytes: u64) {
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain system calls on this process's own settings.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
}

#[test]
fn a_write_that_fails_halfway_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("facts/a.md");
    write_atomic(&target, b"the old memory").unwrap();

    limit_file_size(4096);
    let new = vec![b'x'; 64 * 1024];
    let err = write_atomic(&target, &new).unwrap_err();
    limit_file_size(libc::RLIM_INFINITY);

    assert_eq!(err.raw_os_error(), Some(libc::EFBIG), "{err}");
    let after = std::fs::read(&target).unwrap();
    assert!(
        after == b"the old memory",
        "the old file was overwritten ({} bytes now)",
        after.len()
    );
    let leftovers: Vec<_> = std::fs::read_dir(target.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with(TEMP_PREFIX))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary file left behind: {leftovers:?}"
    );
    // And the same write succeeds once it may.
    write_atomic(&target, &new).unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), new);
}
