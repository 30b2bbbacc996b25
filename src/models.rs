//! `mnemo models`: what is installed, embedding the model's own words for document expansion
//! ahead of the first start (`--prepare-words`), and fetching the cross-encoder from the
//! Hugging Face hub where the network allows (no package registry ships one; see
//! docs/retrieval.md).
//!
//! A fetched file is installed only if its sha256 is the one pinned for it (`--sha256sums`,
//! in `sha256sum`'s format); `--trust-hub` takes the files as the hub sends them instead, and
//! says so. Either way the model must load before it replaces what was installed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use mnemo_embed::{Reranker, RerankerConfig};
use serde::Serialize;
use sha2::{Digest, Sha256};

use mnemo_engine::EngineError;
use mnemo_engine::MODEL_WORDS_FILE;

use crate::commands::{self, CommandResult, Failure, GlobalArgs};

/// The cross-encoder mnemo is tuned for, and the files it needs from its hub repository.
const RERANKER_REPO: &str = "cross-encoder/ms-marco-MiniLM-L-6-v2";
const RERANKER_FILES: [(&str, &str); 5] = [
    ("onnx/model.onnx", "model.onnx"),
    ("tokenizer.json", "tokenizer.json"),
    ("config.json", "config.json"),
    ("special_tokens_map.json", "special_tokens_map.json"),
    ("tokenizer_config.json", "tokenizer_config.json"),
];

#[derive(Args)]
pub struct ModelsArgs {
    /// Download the cross-encoder (ms-marco-MiniLM-L-6-v2) into the reranker_model folder
    #[arg(long)]
    fetch_reranker: bool,
    /// Hub to download from (a mirror, for instance)
    #[arg(long, default_value = "https://huggingface.co")]
    hub_url: String,
    /// The sha256 each downloaded file must have, as `sha256sum` prints them
    /// (model.onnx, tokenizer.json, config.json, special_tokens_map.json, tokenizer_config.json)
    #[arg(long, value_name = "FILE", conflicts_with = "trust_hub")]
    sha256sums: Option<PathBuf>,
    /// Install the files as the hub sends them, unchecked (their hashes are still recorded)
    #[arg(long)]
    trust_hub: bool,
    /// Embed the embedding model's own words for document expansion now, unless they are
    /// kept already (otherwise the first start does it; about 13 s on 2 cores)
    #[arg(long)]
    prepare_words: bool,
    /// Print the status as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Status {
    onnxruntime: Installed,
    embedding_model: Installed,
    /// The embedding model's words, embedded for document expansion.
    model_words: Installed,
    reranker: Installed,
    local_llm: Installed,
    local_llm_runtime: Installed,
}

#[derive(Serialize)]
struct Installed {
    path: PathBuf,
    installed: bool,
}

fn installed(path: PathBuf) -> Installed {
    let installed = path.exists();
    Installed { path, installed }
}

pub async fn models(global: &GlobalArgs, args: ModelsArgs) -> CommandResult {
    let config = commands::load_config(global)?;
    let paths = config.model_paths();
    if args.fetch_reranker {
        let pins = match (&args.sha256sums, args.trust_hub) {
            (Some(file), _) => Some(read_pins(file).map_err(Failure::invalid)?),
            (None, true) => None,
            (None, false) => {
                return Err(Failure::invalid(anyhow!(
                    "--fetch-reranker needs the files' hashes to check them against: give \
                     --sha256sums FILE (each file's sha256, as the model's page on the hub \
                     shows them), or --trust-hub to install them unchecked"
                )))
            }
        };
        let dir = paths.reranker_model_dir.clone();
        let hub = args.hub_url.trim_end_matches('/').to_owned();
        fetch_reranker(&hub, &dir, pins.as_ref(), &paths.onnxruntime_library)
            .await
            .map_err(|e| Failure { error: e, code: 1 })?;
        let checked = if pins.is_some() {
            "every file matched its pinned sha256"
        } else {
            "UNCHECKED: installed as the hub sent it (--trust-hub)"
        };
        eprintln!("cross-encoder installed in {} ({checked})", dir.display());
    }
    if args.prepare_words {
        if !paths.embedding_model_dir.join(MODEL_WORDS_FILE).exists() {
            eprintln!(
                "embedding the model's words for document expansion, once (about 13 s on 2 cores)"
            );
        }
        let (words, file) =
            mnemo_engine::prepare_model_words(&config).map_err(EngineError::from)?;
        eprintln!(
            "{words} model words for document expansion kept in {}",
            file.display()
        );
    }
    let status = Status {
        onnxruntime: installed(paths.onnxruntime_library),
        embedding_model: installed(paths.embedding_model_dir.join("model.onnx")),
        model_words: installed(paths.embedding_model_dir.join(MODEL_WORDS_FILE)),
        reranker: installed(paths.reranker_model_dir.join("model.onnx")),
        local_llm: installed(paths.local_llm_model),
        local_llm_runtime: installed(paths.python),
    };
    if args.json {
        return commands::print_json(&status);
    }
    for (name, item) in [
        ("ONNX Runtime", &status.onnxruntime),
        ("embedding model", &status.embedding_model),
        ("model words", &status.model_words),
        ("cross-encoder", &status.reranker),
        ("local LLM", &status.local_llm),
        ("local LLM runtime", &status.local_llm_runtime),
    ] {
        let state = if item.installed { "ok     " } else { "missing" };
        println!("{state}  {name:<18} {}", item.path.display());
    }
    if !status.model_words.installed {
        println!(
            "(no model words yet: the first start embeds them, or `mnemo models --prepare-words`)"
        );
    }
    if !status.reranker.installed {
        println!("(no cross-encoder: `mnemo models --fetch-reranker` where the hub is reachable)");
    }
    Ok(())
}

/// Reads pinned hashes in `sha256sum`'s format (`<64 hex digits>  <file name>`); every file
/// the cross-encoder needs must be pinned.
fn read_pins(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut pins = BTreeMap::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let parsed = line
            .split_once(char::is_whitespace)
            .and_then(|(hash, name)| {
                let name = name.trim_start().trim_start_matches('*');
                let valid = hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit());
                valid.then(|| (name.to_owned(), hash.to_ascii_lowercase()))
            });
        let (name, hash) = parsed.ok_or_else(|| {
            anyhow!(
                "{} line {}: expected `<sha256>  <file name>`",
                path.display(),
                n + 1
            )
        })?;
        pins.insert(name, hash);
    }
    for (_, local) in RERANKER_FILES {
        if !pins.contains_key(local) {
            bail!("{} pins no sha256 for {local}", path.display());
        }
    }
    Ok(pins)
}

/// Downloads every file into a temporary folder beside `dir`, checks each against its pinned
/// sha256 (when pinned), records the hashes in `SHA256SUMS`, loads the model from there, and
/// only then moves the folder into place. Any failure leaves what was installed untouched.
async fn fetch_reranker(
    hub: &str,
    dir: &Path,
    pins: Option<&BTreeMap<String, String>>,
    onnxruntime: &Path,
) -> anyhow::Result<()> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let staging = tempfile::tempdir_in(parent).context("cannot create a download folder")?;
    let http = reqwest::Client::new();
    let mut sums = String::new();
    for (remote, local) in RERANKER_FILES {
        let url = format!("{hub}/{RERANKER_REPO}/resolve/main/{remote}");
        eprintln!("fetching {url}");
        let response = http
            .get(&url)
            .send()
            .await
            .with_context(|| format!("cannot reach {url}"))?;
        if !response.status().is_success() {
            bail!("{url} answered {}", response.status());
        }
        let bytes = response
            .bytes()
            .await
            .with_context(|| format!("download of {url} broke off"))?;
        let sha256 = format!("{:x}", Sha256::digest(&bytes));
        if let Some(pinned) = pins.and_then(|p| p.get(local)) {
            if *pinned != sha256 {
                bail!("{url} has sha256 {sha256}, not the pinned {pinned}: refusing to install it");
            }
        }
        sums.push_str(&format!("{sha256}  {local}\n"));
        std::fs::write(staging.path().join(local), &bytes)
            .with_context(|| format!("cannot write {local}"))?;
    }
    std::fs::write(staging.path().join("SHA256SUMS"), sums).context("cannot write SHA256SUMS")?;
    let config = RerankerConfig::new(onnxruntime, staging.path());
    tokio::task::spawn_blocking(move || Reranker::load(&config))
        .await
        .context("the check of the downloaded model failed")?
        .map_err(|e| anyhow!("the downloaded model does not load: {e}"))?;
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("cannot replace {}", dir.display()))?;
    }
    let staged = staging.keep();
    std::fs::rename(&staged, dir)
        .with_context(|| format!("cannot move the model into {}", dir.display()))?;
    Ok(())
}
