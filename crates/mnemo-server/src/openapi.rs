//! `GET /openapi.json`: the API described as OpenAPI 3.1.

use axum::Json;
use serde_json::{json, Value};

pub(crate) async fn document() -> Json<Value> {
    Json(spec())
}

fn error_responses() -> Value {
    json!({
        "400": {"description": "Invalid request", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
        "413": {"description": "Request body too large", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    })
}

fn json_body(schema: &str) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}})
}

fn ok(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

fn with_errors(mut responses: Value) -> Value {
    if let (Some(map), Value::Object(errors)) = (responses.as_object_mut(), error_responses()) {
        map.extend(errors);
    }
    responses
}

/// The OpenAPI document.
pub fn spec() -> Value {
    let memory_ref = json!({"$ref": "#/components/schemas/Memory"});
    let id_param = json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string", "format": "uuid"}});
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "mnemo",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Long-term memory for LLM agents: an OpenAI-compatible proxy that remembers, and a REST API for the memories (Markdown files)."
        },
        "paths": {
            "/v1/chat/completions": {"post": {
                "summary": "Chat completion through memory",
                "description": "An OpenAI chat completion request, plus optional memory_* fields (stripped before forwarding). Relevant memories are injected into the last user message; the turn is stored and distilled into facts afterwards. Non-streamed answers carry memory_hits; streamed ones (stream: true) are server-sent events passed through as they arrive.",
                "requestBody": json_body("ChatRequest"),
                "responses": with_errors(json!({
                    "200": {"description": "The upstream's answer (JSON, or text/event-stream when streaming)"},
                    "502": {"description": "The upstream LLM failed", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                    "504": {"description": "The upstream LLM timed out", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
                }))
            }},
            "/v1/memories": {
                "post": {
                    "summary": "Remember texts as facts",
                    "description": "Each text is reconciled with the conversation's facts (ADD/UPDATE/DELETE), then the summary is updated and the change committed.",
                    "requestBody": json_body("AddRequest"),
                    "responses": with_errors(json!({"201": ok("What changed", json!({"$ref": "#/components/schemas/AddResult"}))}))
                },
                "get": {
                    "summary": "List live memories, oldest first, by page",
                    "parameters": [
                        {"name": "conversation_id", "in": "query", "schema": {"type": "string"}},
                        {"name": "role", "in": "query", "schema": {"type": "string", "enum": ["memory", "user", "assistant", "summary"]}},
                        {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}
                    ],
                    "responses": with_errors(json!({"200": ok("A page of memories", json!({
                        "type": "object",
                        "properties": {"total": {"type": "integer"}, "offset": {"type": "integer"}, "limit": {"type": "integer"}, "items": {"type": "array", "items": memory_ref}}
                    }))}))
                }
            },
            "/v1/memories/search": {"post": {
                "summary": "Search memories of a conversation and of global",
                "requestBody": json_body("SearchRequest"),
                "responses": with_errors(json!({"200": ok("Results, best first, with each stage's scores", json!({
                    "type": "object",
                    "properties": {"conversation_id": {"type": "string"}, "hits": {"type": "array", "items": {"$ref": "#/components/schemas/SearchHit"}}}
                }))}))
            }},
            "/v1/memories/{id}": {
                "get": {
                    "summary": "One live memory",
                    "parameters": [id_param],
                    "responses": with_errors(json!({"200": ok("The memory", memory_ref.clone()), "404": {"description": "No such memory"}}))
                },
                "delete": {
                    "summary": "Soft-delete a memory (its file moves under deleted/)",
                    "parameters": [id_param],
                    "responses": with_errors(json!({"200": ok("Deleted", json!({"type": "object", "properties": {"deleted": {"type": "string"}, "tombstone": {"type": "string"}}})), "404": {"description": "No such memory"}}))
                }
            },
            "/v1/memories/{id}/history": {"get": {
                "summary": "Every version of a memory in git, newest first",
                "parameters": [id_param, {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}}],
                "responses": with_errors(json!({"200": ok("Versions", json!({"type": "object", "properties": {"id": {"type": "string"}, "versions": {"type": "array", "items": {"type": "object"}}}})), "404": {"description": "No history"}}))
            }},
            "/health": {"get": {
                "summary": "Status of the store, index, models and upstream",
                "responses": {"200": ok("Status", json!({"type": "object"}))}
            }}
        },
        "components": {"schemas": {
            "Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {
                "message": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "integer"}}}}},
            "ChatRequest": {"type": "object", "required": ["messages"], "properties": {
                "model": {"type": "string"},
                "messages": {"type": "array", "items": {"type": "object"}},
                "stream": {"type": "boolean"},
                "memory_id": {"type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$", "description": "Conversation (default: default)"},
                "memory_top_k": {"type": "integer", "maximum": 100, "description": "Memories to inject; 0 or less turns retrieval off"},
                "memory_recency_weight": {"type": "number", "minimum": 0, "maximum": 1},
                "memory_score_threshold": {"type": "number", "minimum": 0, "maximum": 1},
                "memory_filter": {"type": "object", "description": "Metadata filter (eq, ne, gt, gte, lt, lte, in, nin, $or)"}
            }},
            "AddRequest": {"type": "object", "additionalProperties": false, "properties": {
                "content": {"type": "string"},
                "texts": {"type": "array", "items": {"type": "string"}},
                "conversation_id": {"type": "string"}
            }},
            "AddResult": {"type": "object", "properties": {
                "conversation_id": {"type": "string"},
                "added": {"type": "array", "items": memory_ref},
                "updated": {"type": "array", "items": {"type": "object", "properties": {"old": {"type": "string"}, "new": {"type": "string"}}}},
                "deleted": {"type": "array", "items": {"type": "string"}},
                "commit": {"type": ["string", "null"]}
            }},
            "SearchRequest": {"type": "object", "additionalProperties": false, "required": ["query"], "properties": {
                "query": {"type": "string"},
                "conversation_id": {"type": "string"},
                "top_k": {"type": "integer", "minimum": 0, "maximum": 1000},
                "recency_weight": {"type": "number", "minimum": 0, "maximum": 1},
                "mmr_lambda": {"type": "number", "minimum": 0, "maximum": 1},
                "score_threshold": {"type": "number", "minimum": 0, "maximum": 1},
                "filter": {"type": "object"}
            }},
            "Memory": {"type": "object", "properties": {
                "id": {"type": "string", "format": "uuid"},
                "conversation_id": {"type": "string"},
                "role": {"type": "string", "enum": ["memory", "user", "assistant", "summary"]},
                "created_at": {"type": "string", "format": "date-time"},
                "content": {"type": "string"},
                "metadata": {"type": "object"},
                "source_id": {"type": ["string", "null"]},
                "replaced_by": {"type": ["string", "null"]},
                "path": {"type": "string"}
            }},
            "SearchHit": {"type": "object", "properties": {
                "id": {"type": "string"}, "conversation_id": {"type": "string"}, "role": {"type": "string"},
                "content": {"type": "string"}, "created_at": {"type": ["string", "null"]}, "metadata": {"type": "object"},
                "path": {"type": "string"}, "score": {"type": "number"},
                "scores": {"type": "object", "properties": {
                    "dense": {"type": ["number", "null"]}, "lexical": {"type": ["number", "null"]}, "fused": {"type": "number"},
                    "rerank": {"type": ["number", "null"]}, "recency": {"type": "number"}, "combined": {"type": "number"}}}
            }}
        }}
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_route_is_described() {
        let spec = super::spec();
        for path in [
            "/v1/chat/completions",
            "/v1/memories",
            "/v1/memories/search",
            "/v1/memories/{id}",
            "/v1/memories/{id}/history",
            "/health",
        ] {
            assert!(spec["paths"][path].is_object(), "{path}");
        }
        // Every $ref points at a schema that exists.
        let text = spec.to_string();
        for piece in text.split("#/components/schemas/").skip(1) {
            let name: String = piece.chars().take_while(|c| c.is_alphanumeric()).collect();
            assert!(spec["components"]["schemas"][&name].is_object(), "{name}");
        }
    }
}
