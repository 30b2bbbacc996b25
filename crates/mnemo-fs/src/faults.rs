//! Faults injected at mnemo's write seams, so tests can meet a failing disk where they
//! choose: every durable write to a store (a memory file, a tombstone, a queued pass, a
//! session log line, context state) asks [`check`] first, and a test that registered a
//! plan for a folder ([`inject`]) gets the error the plan gives instead of the write.
//!
//! A full disk is tested on a real small filesystem; an I/O error (EIO) cannot be had that
//! way, and neither can a failure at one chosen write of many. Plans apply only under their
//! own folder, so tests running side by side in one process do not meet each other's
//! faults, and nothing in mnemo registers one: without a plan, [`check`] is one atomic load.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Where on the way to the disk a write is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seam {
    /// A file's bytes written.
    Write,
    /// A file or folder made durable (fsync).
    Sync,
    /// A file renamed into place.
    Rename,
}

/// Which writes fail: called with each write's path, seam and number (counted from 0 over
/// the writes under the plan's folder), it returns the error that write meets, if any.
pub type FaultRule = dyn Fn(&Path, Seam, u64) -> Option<io::Error> + Send + Sync;

/// A plan in force: its folder, its rule and the writes it has seen.
struct FaultPlan {
    under: PathBuf,
    rule: Box<FaultRule>,
    seen: AtomicU64,
}

static PLANS: Mutex<Vec<Arc<FaultPlan>>> = Mutex::new(Vec::new());
static IN_FORCE: AtomicUsize = AtomicUsize::new(0);

/// Makes writes under `under` meet `rule` until the returned guard is dropped.
pub fn inject(
    under: impl Into<PathBuf>,
    rule: impl Fn(&Path, Seam, u64) -> Option<io::Error> + Send + Sync + 'static,
) -> Injected {
    let plan = Arc::new(FaultPlan {
        under: under.into(),
        rule: Box::new(rule),
        seen: AtomicU64::new(0),
    });
    plans().push(plan.clone());
    IN_FORCE.fetch_add(1, Ordering::AcqRel);
    Injected { plan }
}

/// The error a write to `path` at `seam` meets, if a plan says so.
pub fn check(path: &Path, seam: Seam) -> io::Result<()> {
    if IN_FORCE.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let plan = plans()
        .iter()
        .find(|plan| path.starts_with(&plan.under))
        .cloned();
    let Some(plan) = plan else {
        return Ok(());
    };
    let nth = plan.seen.fetch_add(1, Ordering::AcqRel);
    match (plan.rule)(path, seam, nth) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// An I/O error as a failing disk gives it (EIO).
pub fn io_error() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

/// A plan in force; dropping it ends the plan.
pub struct Injected {
    plan: Arc<FaultPlan>,
}

impl Injected {
    /// Writes the plan has seen so far.
    pub fn writes_seen(&self) -> u64 {
        self.plan.seen.load(Ordering::Acquire)
    }
}

impl Drop for Injected {
    fn drop(&mut self) {
        plans().retain(|plan| !Arc::ptr_eq(plan, &self.plan));
        IN_FORCE.fetch_sub(1, Ordering::AcqRel);
    }
}

fn plans() -> std::sync::MutexGuard<'static, Vec<Arc<FaultPlan>>> {
    PLANS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_fails_the_writes_it_chooses_under_its_folder_only() {
        let dir = tempfile::tempdir().unwrap();
        let (mine, other) = (dir.path().join("mine"), dir.path().join("other"));
        let plan = inject(&mine, |_, seam, nth| {
            (seam == Seam::Sync && nth == 1).then(io_error)
        });
        assert!(check(&mine.join("a"), Seam::Write).is_ok(), "write 0");
        let err = check(&mine.join("a"), Seam::Sync).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "write 1");
        assert!(check(&mine.join("b"), Seam::Sync).is_ok(), "write 2");
        assert!(
            check(&other.join("a"), Seam::Sync).is_ok(),
            "not its folder"
        );
        assert_eq!(plan.writes_seen(), 3);
        drop(plan);
        assert!(check(&mine.join("a"), Seam::Sync).is_ok(), "ended");
    }
}
