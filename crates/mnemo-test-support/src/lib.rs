//! What mnemo's tests and benchmarks share across crates; no crate of the product depends on
//! it.
//!
//! - [`require`] and [`skip_unless!`]: the one rule for a test that needs something from
//!   outside the project (the Qdrant server binary, Chromium) and does not find it. On a
//!   developer's machine the test says why on stderr and passes without checking anything;
//!   under CI ([`in_ci`]: `CI` set to anything but empty, `false` or `0`, as CI services set
//!   it: `true`, `1`, `True`) it fails, naming what is missing, so a CI run can never report
//!   `ok` for a test that did not run.
//! - [`qdrant`]: the Qdrant server binary started on loopback, one node or a cluster.
//! - [`models_dir`] and [`store_config`]: the checkout's models, as `scripts/setup`
//!   installs them, and a store that uses them with every other setting at its default.
//! - [`percentile`]: the one nearest-rank percentile of every test and benchmark report.
//! - [`hostile`]: valid documents mutated into inputs nobody wrote by hand, for the
//!   property tests of every parser of untrusted input.
//! - [`full_disk`]: a small tmpfs of a test's own, and a way to fill it.

pub mod full_disk;
pub mod hostile;
pub mod qdrant;

use std::path::{Path, PathBuf};

/// The checkout's `models/` folder, which `scripts/setup` fills.
pub fn models_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models")
}

/// A store at `memory_path` with the checkout's models and every other setting at its
/// default, as a user gets it.
pub fn store_config(memory_path: &Path) -> mnemo_core::Config {
    mnemo_core::Config {
        memory_path: memory_path.to_owned(),
        models_dir: models_dir(),
        ..mnemo_core::Config::default()
    }
}

/// The `p` quantile (0..=1) of `values` (durations, or milliseconds as `f64`), which it
/// sorts: the nearest rank. Panics on no values, as a report of nothing is a bug.
pub fn percentile<T: Copy + PartialOrd>(values: &mut [T], p: f64) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let i = ((values.len() as f64 - 1.0) * p).round() as usize;
    values[i.min(values.len() - 1)]
}

/// The environment variable that makes a missing dependency fail a test instead of skipping
/// it, when it says CI ([`is_ci`]).
pub const CI_VAR: &str = "CI";

/// Whether this is a CI run, from the environment's [`CI_VAR`] ([`is_ci`]). Every test and
/// script of the project reads CI this way (`scripts/test` too).
pub fn in_ci() -> bool {
    is_ci(std::env::var_os(CI_VAR).as_deref())
}

/// Whether `value` of [`CI_VAR`] (`None`: unset) says CI: anything but empty, `false` or `0`
/// (any case). CI services do not agree on a spelling (`true`, `1`, `True`), and a CI run
/// that took itself for a developer's machine would skip, and pass, the tests it cannot run.
pub fn is_ci(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| {
        let v = v.to_string_lossy();
        !(v.is_empty() || v.eq_ignore_ascii_case("false") || v == "0")
    })
}

/// `found`'s value when the test can run. Otherwise (`Err(why)`, why naming what is missing
/// and how to get it): under CI ([`in_ci`]) a panic with that reason; elsewhere `None`, after
/// saying on stderr that the test is skipped and why.
#[track_caller]
pub fn require<T>(found: Result<T, String>) -> Option<T> {
    match found {
        Ok(value) => Some(value),
        Err(why) => match skip_or_fail(&why, in_ci()) {
            Outcome::Fail(message) => panic!("{message}"),
            Outcome::Skip(message) => {
                eprintln!("{message}");
                None
            }
        },
    }
}

/// What a test does when something it needs is missing.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Skip, with this line on stderr.
    Skip(String),
    /// Fail with this message.
    Fail(String),
}

fn skip_or_fail(why: &str, ci: bool) -> Outcome {
    match ci {
        true => Outcome::Fail(format!(
            "{why}\n(CI is set: a test that cannot run here fails instead of skipping)"
        )),
        false => Outcome::Skip(format!(
            "skipped: {why}; with CI=true this test fails instead"
        )),
    }
}

/// `skip_unless!(found)`: the value in `found` (a `Result<T, String>`), or — when the test
/// cannot run here — a return from the calling test after [`require`] said why (or a panic
/// under CI). For test functions returning `()`.
#[macro_export]
macro_rules! skip_unless {
    ($found:expr) => {
        match $crate::require($found) {
            Some(value) => value,
            None => return,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_dependency_skips_with_its_reason_outside_ci() {
        assert_eq!(
            skip_or_fail("no binary at /x", false),
            Outcome::Skip("skipped: no binary at /x; with CI=true this test fails instead".into())
        );
    }

    #[test]
    fn a_missing_dependency_fails_with_its_reason_under_ci() {
        let Outcome::Fail(message) = skip_or_fail("no binary at /x", true) else {
            panic!("CI must fail");
        };
        assert!(message.starts_with("no binary at /x\n"), "{message}");
    }

    #[test]
    fn ci_is_any_value_but_empty_false_or_0() {
        let says = |v: Option<&str>| is_ci(v.map(std::ffi::OsStr::new));
        for ci in ["true", "True", "TRUE", "1", "yes", "github-actions"] {
            assert!(says(Some(ci)), "CI={ci} is CI");
        }
        for not_ci in [
            None,
            Some(""),
            Some("false"),
            Some("False"),
            Some("FALSE"),
            Some("0"),
        ] {
            assert!(!says(not_ci), "CI={not_ci:?} is not CI");
        }
    }

    #[test]
    fn what_is_there_is_handed_back() {
        assert_eq!(require::<u8>(Ok(7)), Some(7));
    }

    fn uses_the_macro(found: Result<u8, String>, seen: &mut Option<u8>) {
        let value = skip_unless!(found);
        *seen = Some(value);
    }

    #[test]
    fn the_macro_returns_before_the_rest_of_the_test_when_skipping() {
        let mut seen = None;
        uses_the_macro(Ok(3), &mut seen);
        assert_eq!(seen, Some(3));
        // A missing dependency: a return outside CI, a panic under it; never the rest.
        let mut seen = None;
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            uses_the_macro(Err("gone".into()), &mut seen)
        }));
        assert_eq!(run.is_err(), in_ci());
        assert_eq!(seen, None);
    }
}
