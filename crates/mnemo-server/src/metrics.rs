//! `GET /metrics`: Prometheus text exposition of what the server does.
//!
//! - `memory_compaction_items_total{stage}`: items governance changed (`offload`, `compact`,
//!   `trim`, `summarize` = messages summarised, `repair`);
//! - `memory_tokens_before_after{phase}`: tokens of each chat request before and after
//!   governance (a histogram, `phase` = `before` | `after`);
//! - `mnemo_request_duration_seconds{route}`: request latency by route;
//! - `mnemo_upstream_errors_total{kind}`: failed calls to the upstream LLM;
//! - `mnemo_background_queue_depth`: write-path work queued or running;
//! - `mnemo_upstream_answers_total`, `mnemo_upstream_tokens_total{kind}` (`prompt` |
//!   `completion`) and `mnemo_upstream_cost_usd_total`: what chat answers took and cost
//!   upstream since the server started (the engine's totals, `crate::usage` there; answers
//!   whose model has no price add no cost);
//! - `mnemo_embedding_seconds_total`: how long the embedding model has run (or its endpoint
//!   been waited for). The local model runs one call at a time, so its rate is the share of
//!   the time it was busy: near 1, requests queue for it whatever else the machine has free.

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use mnemo_engine::ContextReport;
use prometheus::{
    Counter, Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

use crate::error::ApiError;

/// What `GET /metrics` reads: the metrics, and the client for its queue and usage.
#[derive(Clone)]
pub(crate) struct MetricsState {
    pub client: mnemo_engine::MemoryClient,
    pub metrics: Metrics,
}

/// The server's metrics and the registry that exposes them.
#[derive(Clone)]
pub(crate) struct Metrics {
    registry: Registry,
    compaction_items: IntCounterVec,
    tokens: HistogramVec,
    latency: HistogramVec,
    upstream_errors: IntCounterVec,
    queue_depth: IntGauge,
    answers: IntCounter,
    upstream_tokens: IntCounterVec,
    cost: Counter,
    embedding: Counter,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let compaction_items = IntCounterVec::new(
            Opts::new(
                "memory_compaction_items_total",
                "Items context governance changed, by stage",
            ),
            &["stage"],
        )
        .expect("valid metric");
        let tokens = HistogramVec::new(
            HistogramOpts::new(
                "memory_tokens_before_after",
                "Tokens of a chat request before and after context governance",
            )
            .buckets(prometheus::exponential_buckets(256.0, 2.0, 12).expect("valid buckets")),
            &["phase"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new("mnemo_request_duration_seconds", "Request latency by route"),
            &["route", "method"],
        )
        .expect("valid metric");
        let upstream_errors = IntCounterVec::new(
            Opts::new(
                "mnemo_upstream_errors_total",
                "Failed calls to the upstream LLM, by kind",
            ),
            &["kind"],
        )
        .expect("valid metric");
        let queue_depth = IntGauge::new(
            "mnemo_background_queue_depth",
            "Write-path work queued or running in the background",
        )
        .expect("valid metric");
        let answers = IntCounter::new(
            "mnemo_upstream_answers_total",
            "Chat answers the upstream LLM gave",
        )
        .expect("valid metric");
        let upstream_tokens = IntCounterVec::new(
            Opts::new(
                "mnemo_upstream_tokens_total",
                "Tokens chat answers took upstream, by kind (prompt, completion)",
            ),
            &["kind"],
        )
        .expect("valid metric");
        let cost = Counter::new(
            "mnemo_upstream_cost_usd_total",
            "US dollars chat answers cost upstream, where genai-prices knows the model",
        )
        .expect("valid metric");
        let embedding = Counter::new(
            "mnemo_embedding_seconds_total",
            "Seconds the embedding model has run (or its endpoint been waited for)",
        )
        .expect("valid metric");
        let registry = Registry::new();
        for metric in [
            Box::new(compaction_items.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(tokens.clone()),
            Box::new(latency.clone()),
            Box::new(upstream_errors.clone()),
            Box::new(queue_depth.clone()),
            Box::new(answers.clone()),
            Box::new(upstream_tokens.clone()),
            Box::new(cost.clone()),
            Box::new(embedding.clone()),
        ] {
            registry.register(metric).expect("metric names are unique");
        }
        Self {
            registry,
            compaction_items,
            tokens,
            latency,
            upstream_errors,
            queue_depth,
            answers,
            upstream_tokens,
            cost,
            embedding,
        }
    }

    /// Brings the usage counters up to the engine's totals (which only grow).
    fn catch_up_usage(&self, totals: &mnemo_engine::UsageTotals) {
        let int = |counter: &IntCounter, total: u64| {
            counter.inc_by(total.saturating_sub(counter.get()));
        };
        int(&self.answers, totals.requests);
        int(
            &self.upstream_tokens.with_label_values(&["prompt"]),
            totals.prompt_tokens,
        );
        int(
            &self.upstream_tokens.with_label_values(&["completion"]),
            totals.completion_tokens,
        );
        catch_up(&self.cost, totals.cost_usd);
    }

    /// Records what governance did to one chat request.
    pub(crate) fn record_context(&self, report: &ContextReport) {
        self.tokens
            .with_label_values(&["before"])
            .observe(report.tokens_before as f64);
        self.tokens
            .with_label_values(&["after"])
            .observe(report.tokens_after as f64);
        for (stage, items) in [
            ("repair", report.orphan_results + report.missing_results),
            ("offload", report.offloaded.len()),
            ("compact", report.compacted),
            ("trim", report.trimmed),
            ("summarize", report.summarised_messages),
        ] {
            if items > 0 {
                self.compaction_items
                    .with_label_values(&[stage])
                    .inc_by(items as u64);
            }
        }
    }

    /// Counts a failed upstream call.
    pub(crate) fn upstream_error(&self, kind: &str) {
        self.upstream_errors.with_label_values(&[kind]).inc();
    }
}

/// Brings `counter` up to `total` (a total that only grows).
fn catch_up(counter: &Counter, total: f64) {
    let more = total - counter.get();
    if more > 0.0 {
        counter.inc_by(more);
    }
}

/// Times every request, by the route it matched (`other` for the pass-through).
pub(crate) async fn time_requests(
    State(metrics): State<Metrics>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "other".to_owned());
    let method = request.method().as_str().to_owned();
    let timer = metrics
        .latency
        .with_label_values(&[route.as_str(), method.as_str()])
        .start_timer();
    let response = next.run(request).await;
    timer.observe_duration();
    response
}

/// The metrics in Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "service",
    responses((status = 200, description = "Prometheus text exposition (version 0.0.4)", content_type = "text/plain"))
)]
pub(crate) async fn metrics(State(state): State<MetricsState>) -> Response {
    let metrics = &state.metrics;
    metrics
        .queue_depth
        .set(i64::try_from(state.client.background_tasks()).unwrap_or(i64::MAX));
    metrics.catch_up_usage(&state.client.usage_since_start());
    catch_up(
        &metrics.embedding,
        state.client.embedding_busy().as_secs_f64(),
    );
    let encoder = TextEncoder::new();
    let mut text = Vec::new();
    if let Err(e) = encoder.encode(&metrics.registry.gather(), &mut text) {
        return ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            format!("cannot encode the metrics: {e}"),
        )
        .into_response();
    }
    (
        [(header::CONTENT_TYPE, encoder.format_type().to_owned())],
        text,
    )
        .into_response()
}
