//! What the web view costs to render: one conversation of 10k facts, its first page (50
//! facts, newest first) and the conversation list, over a real socket, p50 and p99 of the
//! whole answer, with its size. The baseline, in the same run and interleaved call by call,
//! is the REST API's page of the same 50 facts (`GET /v1/memories`), which parses every
//! file of the conversation to sort them; the web view sorts by the times in the file
//! names and reads only the 50 it shows.
//!
//! `cargo bench --workspace --bench web_view [-- --json] [-- --quick]`.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{filled_store, ms, percentile, round};

const MEMORIES: usize = 10_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_out = args.iter().any(|a| a == "--json");
    let rounds = if args.iter().any(|a| a == "--quick") {
        20
    } else {
        100
    };
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime.block_on(run(rounds, dir.path()));
    // The server task holds the store open: it goes before the store's folder does.
    drop(runtime);
    if json_out {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
    }
}

async fn run(rounds: usize, store: &std::path::Path) -> serde_json::Value {
    let client = filled_store(store, MEMORIES, |_| "big".to_owned()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = mnemo_server::router(client, mnemo_server::ServerOptions::default());
    tokio::spawn(async move { axum_serve(listener, app).await });

    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let pages = [
        (
            "rest_page_of_50",
            "/v1/memories?conversation_id=big&limit=50",
        ),
        ("conversation_page_of_50", "/ui/conversations/big"),
        ("conversation_list", "/ui/"),
    ];
    let mut times = vec![Vec::new(); pages.len()];
    let mut sizes = vec![0; pages.len()];
    for round in 0..rounds + 3 {
        for (i, (_, path)) in pages.iter().enumerate() {
            let (took, size) = fetch(&http, &format!("{base}{path}")).await;
            // The first rounds warm the page cache and the connection.
            if round >= 3 {
                times[i].push(took);
            }
            sizes[i] = size;
        }
    }
    let rest_p50 = ms(percentile(&mut times[0], 0.5));
    let mut report = json!({"memories_in_the_conversation": MEMORIES, "rounds": rounds});
    for (i, (name, _)) in pages.iter().enumerate() {
        let p50 = ms(percentile(&mut times[i], 0.5));
        let p99 = ms(percentile(&mut times[i], 0.99));
        report[*name] = json!({
            "p50_ms": round(p50),
            "p99_ms": round(p99),
            "bytes": sizes[i],
            "p50_vs_rest_page": round(p50 / rest_p50),
        });
    }
    report
}

async fn axum_serve(listener: tokio::net::TcpListener, app: axum::Router) {
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .await
    .unwrap();
}

/// One GET, timed until the whole body has arrived; its size.
async fn fetch(http: &reqwest::Client, url: &str) -> (Duration, usize) {
    let started = Instant::now();
    let response = http.get(url).send().await.unwrap();
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    let body = response.bytes().await.unwrap();
    (started.elapsed(), body.len())
}
