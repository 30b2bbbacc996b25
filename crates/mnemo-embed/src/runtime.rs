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
    Ok(env)
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
