//! One declaration of every tool: name, description, input and output JSON Schema. The
//! OpenAPI document and the MCP `tools/list` are both built from it, so they cannot drift.

use serde_json::{Value, json};

use crate::query;

/// A tool's public description.
#[derive(Debug, Clone)]
pub struct ToolMeta {
    pub name: &'static str,
    pub description: &'static str,
    pub input: Value,
    pub output: Value,
}

fn window() -> Value {
    json!({"type": "string", "description": "How far back from now, as a duration (30s, 15m, 1h, 7d). Default: the listener's query.default_window.", "examples": ["1h"]})
}

fn cluster() -> Value {
    json!({"type": "string", "description": "The cluster (ingero.cluster.id).", "minLength": 1, "examples": ["prod"]})
}

fn num() -> Value {
    json!({"type": ["number", "null"]})
}

/// One stored causal chain as the tools answer it.
fn causal_chain() -> Value {
    let text = || json!({"type": "string"});
    let texts = || json!({"type": "array", "items": {"type": "string"}});
    json!({"type": "object", "required": ["causal_chain_id", "position", "chain_id", "severity", "root_cause", "causes", "recommendations"], "properties": {
        "causal_chain_id": text(),
        "position": {"type": "integer", "minimum": 0, "description": "0 for the most severe chain."},
        "ts_ns": {"type": "integer", "description": "When the event carrying the chains was recorded."},
        "node_id": {"type": ["string", "null"]},
        "event_id": {"type": ["string", "null"], "description": "The ingero.event.id of the event (or span) that carried the chains."},
        "chain_id": text(),
        "severity": {"type": "string", "enum": crate::chains::SEVERITIES},
        "summary": text(),
        "root_cause": text(),
        "explanation": {"type": ["string", "null"]},
        "causes": texts(),
        "recommendations": texts(),
        "cuda_op": text(),
        "cuda_p99_us": {"type": "integer", "minimum": 0},
        "tail_ratio": {"type": "number", "minimum": 0}
    }})
}

fn cluster_input(extra: Value) -> Value {
    let mut props = json!({"cluster_id": cluster(), "window": window()});
    if let (Some(p), Some(e)) = (props.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            p.insert(k.clone(), v.clone());
        }
    }
    json!({"type": "object", "properties": props, "required": ["cluster_id"], "additionalProperties": false})
}

fn limit() -> Value {
    json!({"type": "integer", "minimum": 1, "description": "At most this many items (capped by query.max_rows)."})
}

/// Every tool, in [`query::TOOLS`] order.
pub fn tools() -> Vec<ToolMeta> {
    vec![
        ToolMeta {
            name: query::SUMMARY,
            description: "Health of one cluster, or of every cluster the caller may see: nodes, score statistics, the latest threshold, straggler events and the nodes straggling now.",
            input: json!({"type": "object", "properties": {"cluster_id": cluster(), "window": window()}, "additionalProperties": false}),
            output: json!({
                "type": "object",
                "required": ["window_seconds", "clusters"],
                "properties": {
                    "window_seconds": {"type": "integer"},
                    "clusters": {"type": "array", "items": {"type": "object", "properties": {
                        "cluster_id": {"type": "string"},
                        "nodes": {"type": "integer"},
                        "health_points": {"type": "integer"},
                        "avg_score": num(),
                        "min_score": num(),
                        "last_seen_ns": {"type": ["integer", "null"]},
                        "latest_threshold": num(),
                        "straggler_events": {"type": "integer"},
                        "current_stragglers": {"type": "array", "items": {"type": "string"}}
                    }}}
                }
            }),
        },
        ToolMeta {
            name: query::EVENT_HISTORY,
            description: "Straggler events (agent `ingero.node.straggler_event`, with `ingero.event.id`) and Fleet's straggler flags of a cluster, newest first; each agent event with the causal chains its node's agent attached to the straggler episode (`causal_chain_id`).",
            input: cluster_input(json!({"node_id": {"type": "string"}, "limit": limit()})),
            output: json!({
                "type": "object",
                "required": ["cluster_id", "events"],
                "properties": {
                    "cluster_id": {"type": "string"},
                    "window_seconds": {"type": "integer"},
                    "events": {"type": "array", "items": {"type": "object", "properties": {
                        "ts_ns": {"type": "integer"},
                        "node_id": {"type": ["string", "null"]},
                        "source": {"type": "string", "enum": ["straggler_event", "fleet_straggler"]},
                        "event_id": {"type": ["string", "null"]},
                        "value": {"type": ["integer", "null"]},
                        "threshold": num(),
                        "score": num(),
                        "dominant_signal": {"type": ["string", "null"]},
                        "detection_mode": {"type": ["string", "null"]},
                        "rank": {"type": ["integer", "null"]},
                        "causal_chain_id": {"type": ["string", "null"], "description": "The straggler episode (ingero.causal_chain_id): the same on every event of one episode."},
                        "causal_chains": {"type": "array", "description": "The causal chains the node's agent attached to the episode, most severe first (empty when it sent none).", "items": causal_chain()}
                    }}},
                    "truncated": {"type": "boolean", "description": "More events existed than query.max_result_bytes allows."}
                }
            }),
        },
        ToolMeta {
            name: query::FIND_OUTLIER_NODES,
            description: "Stragglers of a cluster over a window, ranked by time spent straggling (Fleet's flags and the agents' straggler events) and then by depth (how far below its peers' median score, or below the threshold, the node was).",
            input: cluster_input(json!({"limit": limit()})),
            output: json!({
                "type": "object",
                "required": ["cluster_id", "nodes"],
                "properties": {
                    "cluster_id": {"type": "string"},
                    "window_seconds": {"type": "integer"},
                    "ranking": {"type": "string"},
                    "nodes": {"type": "array", "items": {"type": "object", "properties": {
                        "node_id": {"type": "string"},
                        "straggler_seconds": {"type": "number"},
                        "depth": {"type": "number"},
                        "avg_score": num(),
                        "min_score": num(),
                        "cluster_median_score": num(),
                        "health_samples": {"type": "integer"},
                        "fleet_straggler_samples": {"type": "integer"},
                        "straggler_events": {"type": "integer"},
                        "is_straggler": {"type": "boolean"}
                    }}}
                }
            }),
        },
        ToolMeta {
            name: query::NCCL,
            description: "NCCL rollups per rank and collective: peer lag (Fleet's nccl.collective.peer_lag_ms), durations, barrier waits, element counts and elements per millisecond, with the slowest rank.",
            input: cluster_input(
                json!({"op_type": {"type": "string", "description": "Only this collective (ncclAllReduce, ...)."}}),
            ),
            output: json!({
                "type": "object",
                "required": ["cluster_id", "ranks"],
                "properties": {
                    "cluster_id": {"type": "string"},
                    "window_seconds": {"type": "integer"},
                    "ranks": {"type": "array", "items": {"type": "object"}},
                    "slowest_rank": {"type": ["object", "null"]}
                }
            }),
        },
        ToolMeta {
            name: query::GET_COST,
            description: "What the stragglers of a cluster cost over a window: straggling time x affected GPUs x the GPU-hour rate of the node's provider and GPU model (Fleet's rate table).",
            input: cluster_input(json!({})),
            output: json!({
                "type": "object",
                "required": ["cluster_id", "total_cost", "nodes"],
                "properties": {
                    "cluster_id": {"type": "string"},
                    "window_seconds": {"type": "integer"},
                    "currency": {"type": ["string", "null"]},
                    "formula": {"type": "string"},
                    "total_cost": num(),
                    "nodes": {"type": "array", "items": {"type": "object"}}
                }
            }),
        },
        ToolMeta {
            name: query::RUN_ANALYSIS,
            description: "One read-only SQL SELECT over the store (tables: points (also as the view events, with value as value_double), health_scores, health_minutes (per cluster, node and minute: samples, score_sum, score_min, last_ns; partial rows to add up; covers the health_scores rows with seq <= rollup_state.flushed_seq), health_minute_totals (a view of health_minutes with the partial rows added up, plus avg_score), straggler_events (causal_chain_id: the episode), fleet_stragglers, nccl, node_info, causal_chains (one row per chain and straggler episode: causal_chain_id, position 0 = most severe, severity, summary, root_cause, explanation, causes and recommendations as JSON arrays, cuda_op, cuda_p99_us, tail_ratio), spans, logs, clusters, rollup_state, and the view node_metrics (one row per cluster and node: points, first_ns, last_ns, health_samples, avg_score, min_score, last_score, straggler_events, last_straggler_ns, chain_episodes, provider, gpu_model, gpu_count); times are ts_ns, Unix nanoseconds; attributes and resource columns are JSON text that json_extract and json_extract_string read). Needs a token scoped to every cluster. Other statements, several statements, file and network access are refused.",
            input: json!({"type": "object", "properties": {
                "sql": {"type": "string", "minLength": 1, "description": "One SELECT statement. It runs as SELECT * FROM (<sql>) LIMIT max_rows + 1."},
                "max_rows": {"type": "integer", "minimum": 1}
            }, "required": ["sql"], "additionalProperties": false}),
            output: json!({
                "type": "object",
                "required": ["columns", "rows", "truncated"],
                "properties": {
                    "columns": {"type": "array", "items": {"type": "string"}},
                    "rows": {"type": "array", "items": {"type": "array"}},
                    "truncated": {"type": "boolean"}
                }
            }),
        },
        ToolMeta {
            name: query::NCCL_TRACE,
            description: "A Chrome trace-event document (open it in Perfetto or chrome://tracing) of a cluster's NCCL collectives: one track per rank, one slice per collective, peer lag as counters; the straggler's track stands out.",
            input: cluster_input(json!({"limit": limit()})),
            output: json!({
                "type": "object",
                "required": ["traceEvents"],
                "properties": {
                    "traceEvents": {"type": "array", "items": {"type": "object"}},
                    "displayTimeUnit": {"type": "string"}
                }
            }),
        },
        ToolMeta {
            name: query::HISTORY,
            description: "Health scores per node and the cluster threshold, averaged per step: the data of a history chart.",
            input: cluster_input(
                json!({"step": {"type": "string", "description": "Bucket width as a duration (default: window / 60). The window may hold at most query.max_rows steps."}}),
            ),
            output: json!({
                "type": "object",
                "required": ["cluster_id", "scores", "thresholds"],
                "properties": {
                    "cluster_id": {"type": "string"},
                    "window_seconds": {"type": "integer"},
                    "step_seconds": {"type": "number"},
                    "scores": {"type": "array", "items": {"type": "object"}},
                    "thresholds": {"type": "array", "items": {"type": "object"}},
                    "truncated": {"type": "boolean", "description": "Rows beyond query.max_rows or query.max_result_bytes were left out."}
                }
            }),
        },
    ]
}

/// The API path of a tool.
pub fn tool_path(name: &str) -> String {
    format!("/api/v1/tools/{name}")
}

/// The OpenAPI 3.1 document of the HTTP API.
pub fn openapi(version: &str) -> Value {
    let error = json!({"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}});
    let mut paths = serde_json::Map::new();
    for t in tools() {
        let err = |d: &str| json!({"description": d, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
        paths.insert(
            tool_path(t.name),
            json!({"post": {
                "operationId": t.name.replace('.', "_"),
                "summary": t.name,
                "description": t.description,
                // An empty body is the empty object: optional where no argument is required.
                "requestBody": {
                    "required": t.input.get("required").and_then(Value::as_array).is_some_and(|r| !r.is_empty()),
                    "content": {"application/json": {"schema": t.input}}
                },
                "responses": {
                    "200": {"description": "The tool's answer.", "content": {"application/json": {"schema": t.output}}},
                    "400": err("Invalid arguments, or SQL the sandbox refused."),
                    "401": err("Missing or invalid bearer token."),
                    "403": err("The token may not use this tool."),
                    "404": err("Unknown cluster (or one outside the token's scope)."),
                    "408": err("The query (its SQL check included) ran past query.timeout and was interrupted."),
                    "422": err("The query failed."),
                    "429": err("The token's rate limit is exceeded."),
                    "503": err("The store is not open yet, or query.max_concurrent queries are running.")
                }
            }}),
        );
    }
    paths.insert(
        "/api/v1/tools".into(),
        json!({"get": {
            "operationId": "list_tools",
            "summary": "Every tool with its input and output schema.",
            "responses": {
                "401": {"description": "Missing or invalid bearer token.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                "429": {"description": "The token's rate limit is exceeded.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                "200": {"description": "The tools.", "content": {"application/json": {"schema": {
                "type": "object", "required": ["tools"],
                "properties": {"tools": {"type": "array", "items": {"type": "object", "required": ["name", "description", "input_schema", "output_schema"], "properties": {
                    "name": {"type": "string"}, "description": {"type": "string"},
                    "input_schema": {"type": "object"}, "output_schema": {"type": "object"}
                }}}}
            }}}}}
        }}),
    );
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Ingero Echo API",
            "version": version,
            "description": "The cluster's queryable memory: straggler history, NCCL rollups, cost and read-only SQL over what Fleet forwards. The same tools are served over MCP at /mcp."
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "schemas": {"Error": error},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        },
        "security": [{"bearer": []}]
    })
}
