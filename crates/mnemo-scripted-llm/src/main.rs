//! `mnemo-scripted-llm [--port N]`: the echo server as a process, for tests outside Rust (the
//! openai Python SDK) and benchmarks. Prints `listening on http://127.0.0.1:PORT/v1` once
//! bound, then serves until interrupted.

use std::net::SocketAddr;
use std::process::ExitCode;

use mnemo_scripted_llm::ScriptedLlm;

const USAGE: &str = "usage: mnemo-scripted-llm [--port N]   (default: a free port)";

#[tokio::main]
async fn main() -> ExitCode {
    if std::env::args().any(|arg| arg == "-h" || arg == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let port = match parse_port(std::env::args().skip(1)) {
        Ok(port) => port,
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let server = match ScriptedLlm::bind(SocketAddr::from(([127, 0, 0, 1], port))).await {
        Ok(server) => server,
        Err(e) => {
            eprintln!("cannot listen on 127.0.0.1:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Line-buffered stdout flushes this at once; whoever started us waits for it.
    println!("listening on {}", server.base_url());
    if let Err(e) = tokio::signal::ctrl_c().await {
        eprintln!("cannot wait for Ctrl-C: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn parse_port(mut args: impl Iterator<Item = String>) -> Result<u16, String> {
    let mut port = 0;
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "--port" => args.next().ok_or("--port needs a value")?,
            other => match other.strip_prefix("--port=") {
                Some(value) => value.to_string(),
                None => return Err(format!("unknown argument {other:?}")),
            },
        };
        port = value
            .parse()
            .map_err(|_| format!("--port {value:?} is not a port number"))?;
    }
    Ok(port)
}
