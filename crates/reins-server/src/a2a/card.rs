//! The agent card (`GET /.well-known/agent-card.json`), generated from the agent: its
//! name, one skill per toolkit tool, streaming, bearer auth, and the JSON-RPC
//! interface at `/a2a` on the host the card was asked from (`X-Forwarded-Proto` and
//! `X-Forwarded-Host` are honoured behind a proxy).

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::state::AppState;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The card of the agent this server serves, as seen from `base` (`http://host:port`).
pub(crate) fn card(state: &AppState, base: &str) -> Value {
    let card = state.sessions.card();
    let name = card.name.as_str();
    let skills: Vec<Value> = card
        .tools
        .iter()
        .map(|t| {
            json!({
                "id": t.name,
                "name": t.name,
                "description": t.description,
                "tags": ["tool"],
            })
        })
        .collect();
    json!({
        "name": name,
        "description": format!(
            "{name}, a reins agent: it can stop for a person's approval, input or an external result (TASK_STATE_INPUT_REQUIRED), and resumes from a follow-up message with decisions."
        ),
        "supportedInterfaces": [{
            "url": format!("{base}/a2a"),
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }],
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": {"streaming": true, "pushNotifications": true, "extendedAgentCard": false},
        "securitySchemes": {
            "bearer": {"httpAuthSecurityScheme": {
                "scheme": "bearer",
                "description": "A reins-server token (Authorization: Bearer <token>)",
            }},
        },
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": skills,
    })
}

/// `GET /.well-known/agent-card.json` (public: a card says how to authenticate).
pub(crate) async fn get_card(State(state): State<AppState>, headers: HeaderMap) -> Json<Value> {
    let host = header(&headers, "x-forwarded-host")
        .or_else(|| header(&headers, "host"))
        .unwrap_or("localhost");
    let proto = header(&headers, "x-forwarded-proto").unwrap_or("http");
    Json(card(&state, &format!("{proto}://{host}")))
}
