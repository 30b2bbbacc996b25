//! A disk that fills: a small tmpfs of a test's own (root only; a test without it skips,
//! or fails under `CI=true`, through [`crate::require`]), and a way to fill it.

use std::io::Write;
use std::path::{Path, PathBuf};

/// A tmpfs of its own, unmounted when dropped.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// A tmpfs of `size` (`mount -o size=`, e.g. "64m"), or why this user cannot have one.
    pub fn mount(size: &str) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::piped())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !mounted.status.success() {
            return Err(format!(
                "a full disk is tested on a tmpfs, and this user cannot mount one ({}): run as root",
                String::from_utf8_lossy(&mounted.stderr).trim()
            ));
        }
        Ok(Self { dir })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Makes it read-only, as a read-only mount of a store is.
    pub fn remount_read_only(&self) {
        let status = std::process::Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(self.path())
            .status()
            .unwrap();
        assert!(status.success(), "remounting read-only failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.path())
            .status();
    }
}

/// Writes zeros into a new file under `dir` until the filesystem is full; returns the file.
pub fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 1 << 16];
    loop {
        match file.write_all(&block) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    // Whatever the page cache still held is refused now too.
    let _ = file.sync_all();
    path
}
