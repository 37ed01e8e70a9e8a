//! docs/server.md keeps step with the routes: every path of the OpenAPI document is
//! named in its "The API" section (a route added without a word there fails here).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use reins_server::Server;
use serde_json::Value;

#[test]
fn every_route_of_the_openapi_document_is_in_the_api_section_of_the_docs() {
    let doc: Value = serde_json::from_str(&Server::openapi().to_json().unwrap()).unwrap();
    let text = include_str!("../../../docs/server.md");
    let start = text
        .find("\n## The API\n")
        .expect("docs/server.md has `## The API`");
    let api = &text[start + 1..];
    let api = match api[1..].find("\n## ") {
        Some(end) => &api[..end + 1],
        None => api,
    };
    let mut missing = Vec::new();
    for path in doc["paths"].as_object().unwrap().keys() {
        // `/v1/sessions/{id}/runs` is written with a session id in its place.
        let parts: Vec<&str> = path.split('/').collect();
        let named = api
            .match_indices(parts[..2].join("/").as_str())
            .any(|(at, _)| {
                let rest = &api[at..];
                let written: Vec<&str> = rest
                    .split(|c: char| c.is_whitespace() || "`\"'?(),.;:".contains(c))
                    .next()
                    .unwrap_or("")
                    .split('/')
                    .collect();
                written.len() == parts.len()
                    && written
                        .iter()
                        .zip(&parts)
                        .all(|(w, p)| p.starts_with('{') || w == p)
            });
        if !named {
            missing.push(path.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "routes not named in the API section of docs/server.md: {missing:?}"
    );
}
