//! Loading the ONNX Runtime library once per process.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ort::environment::Environment;

use crate::error::EmbedError;

static LOADED: OnceLock<(PathBuf, Environment)> = OnceLock::new();
static LOADING: Mutex<()> = Mutex::new(());

/// The process-wide ONNX Runtime environment, loading the library at `library` on first use.
///
/// ONNX Runtime allows one library and one environment per process: asking for a different
/// library later is an error rather than a silent mix.
pub fn environment(library: &Path) -> Result<Environment, EmbedError> {
    if let Some(env) = already_loaded(library)? {
        return Ok(env);
    }
    let _guard = LOADING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(env) = already_loaded(library)? {
        return Ok(env);
    }
    if !library.is_file() {
        return Err(EmbedError::Missing {
            what: "the ONNX Runtime library".into(),
            path: library.to_owned(),
        });
    }
    let runtime_error = |message: String| EmbedError::Runtime {
        path: library.to_owned(),
        message,
    };
    let env = ort::init_from(library)
        .map_err(|e| runtime_error(e.to_string()))?
        .with_name("mnemo")
        .build()
        .map_err(|e| runtime_error(e.to_string()))?;
    let canonical = library
        .canonicalize()
        .unwrap_or_else(|_| library.to_owned());
    let _ = LOADED.set((canonical, env.clone()));
    tune_allocator();
    Ok(env)
}

/// How glibc's allocator serves a long-running server. Process-wide, set once when the
/// runtime is loaded (every mnemo process that embeds loads it, early).
///
/// Large blocks (256 KiB and up) are mapped for each allocation and given back to the
/// system when freed. A model run allocates tensors of many megabytes and frees them at its
/// end; glibc raises its mapping threshold past each such block it frees, and then keeps
/// them in its per-thread heaps: a busy server stayed at 1.2 GiB resident instead of about
/// 300 MiB (`benches/soak.rs`, the runtime's own arena off as below).
///
/// And at most one heap per core (two at least): glibc's default is eight per core, and the
/// many threads that run blocking work (file writes, index updates, git) spread over them,
/// each heap keeping the pieces freed into it. In a 10-minute soak on 2 cores, anonymous
/// memory was about 50 MiB lower throughout and grew 3 MiB a minute after the third minute
/// instead of 5, for the same requests in interleaved runs (docs/limits.md).
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let heaps = libc::c_int::try_from(cores.max(2)).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes the allocator's tuning; any value is valid to pass.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
            libc::mallopt(libc::M_ARENA_MAX, heaps);
        }
    }
}

fn already_loaded(library: &Path) -> Result<Option<Environment>, EmbedError> {
    let Some((loaded, env)) = LOADED.get() else {
        return Ok(None);
    };
    let wanted = library
        .canonicalize()
        .unwrap_or_else(|_| library.to_owned());
    if *loaded == wanted {
        Ok(Some(env.clone()))
    } else {
        Err(EmbedError::Runtime {
            path: library.to_owned(),
            message: format!(
                "this process already uses ONNX Runtime from {}",
                loaded.display()
            ),
        })
    }
}

/// The session setting that lets the runtime's worker threads spin while they wait for work.
/// Off: a spinning thread holds a core that the rest of a server needs (searches, the write
/// path), and a server's runs are too short and far apart for spinning to pay (16 clients on
/// 2 cores, `benches/soak.rs`: 18% more requests served with it off).
pub(crate) const SPINNING: &str = "session.intra_op.allow_spinning";

/// The CPU execution provider with its memory arena, for the embedding model. Without
/// it each operator's output is a fresh allocation, and those of 256 KiB and up are mapped
/// and unmapped by the system each time ([`tune_allocator`]): page faults and zeroed pages
/// on every run, a third of the model's time (a text of 2 windows of 128 tokens: 34 ms
/// without the arena, 22 ms with it, 2 threads). The arena keeps the blocks of the largest
/// run it met, so the embedder bounds its runs instead ([`crate::TOKENS_PER_RUN`]).
pub(crate) fn cpu_with_arena() -> ort::ep::ExecutionProviderDispatch {
    ort::ep::CPU::default().with_arena_allocator(true).build()
}

/// The CPU execution provider without its memory arena, for the cross-encoder, whose runs
/// are batches of pairs of any length. The arena keeps every block it ever allocated for
/// the largest and oddest shapes it met (a batch of 64 texts of varied lengths, then one
/// short query), so a server grew by tens of MiB a minute and never gave them back
/// (heaptrack: 358 MB of 623 MB at the peak of a 5-minute soak); without it, each run's
/// tensors are allocated and freed as the run needs them (and, being large, given back to
/// the system: [`tune_allocator`]).
pub(crate) fn cpu_without_arena() -> ort::ep::ExecutionProviderDispatch {
    ort::ep::CPU::default().with_arena_allocator(false).build()
}
