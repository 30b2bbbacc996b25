//! `mnemo models`: what is installed, and fetching the cross-encoder from the Hugging Face hub
//! where the network allows (no package registry ships one; see docs/retrieval.md).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use mnemo_embed::{Reranker, RerankerConfig};
use serde::Serialize;
use sha2::{Digest, Sha256};

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
    /// Print the status as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Status {
    onnxruntime: Installed,
    embedding_model: Installed,
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
        let dir = paths.reranker_model_dir.clone();
        let hub = args.hub_url.trim_end_matches('/').to_owned();
        fetch_reranker(&hub, &dir)
            .await
            .map_err(|e| Failure { error: e, code: 1 })?;
        let config = RerankerConfig::new(&paths.onnxruntime_library, &dir);
        tokio::task::spawn_blocking(move || Reranker::load(&config))
            .await
            .context("the check of the downloaded model failed")?
            .map_err(|e| anyhow!("the downloaded model does not work: {e}"))?;
        eprintln!("cross-encoder installed in {}", dir.display());
    }
    let status = Status {
        onnxruntime: installed(paths.onnxruntime_library),
        embedding_model: installed(paths.embedding_model_dir.join("model.onnx")),
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
        ("cross-encoder", &status.reranker),
        ("local LLM", &status.local_llm),
        ("local LLM runtime", &status.local_llm_runtime),
    ] {
        let state = if item.installed { "ok     " } else { "missing" };
        println!("{state}  {name:<18} {}", item.path.display());
    }
    if !status.reranker.installed {
        println!("(no cross-encoder: `mnemo models --fetch-reranker` where the hub is reachable)");
    }
    Ok(())
}

/// Downloads every file into a temporary folder beside `dir`, then moves it into place and
/// records the files' sha256 in `SHA256SUMS`.
async fn fetch_reranker(hub: &str, dir: &Path) -> anyhow::Result<()> {
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
        sums.push_str(&format!("{:x}  {local}\n", Sha256::digest(&bytes)));
        std::fs::write(staging.path().join(local), &bytes)
            .with_context(|| format!("cannot write {local}"))?;
    }
    std::fs::write(staging.path().join("SHA256SUMS"), sums).context("cannot write SHA256SUMS")?;
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("cannot replace {}", dir.display()))?;
    }
    let staged = staging.keep();
    std::fs::rename(&staged, dir)
        .with_context(|| format!("cannot move the model into {}", dir.display()))?;
    Ok(())
}
