//! The policy an MCP tool gets: the user's choice, else what the server's annotations
//! suggest.

use reins_tool::ToolPolicy;

use crate::config::McpServer;

/// Where a tool's policy came from (see the crate docs for the rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicySource {
    /// [`McpServer::tool_policy`] named this tool.
    Override,
    /// [`McpServer::default_policy`].
    ServerDefault,
    /// `readOnlyHint: true`: runs at once and is idempotent.
    ReadOnly,
    /// `destructiveHint: true`, or annotations without `readOnlyHint` and without
    /// `destructiveHint: false` (MCP's default for `destructiveHint` is `true`): asks
    /// for confirmation.
    Destructive,
    /// `destructiveHint: false` without `readOnlyHint`: runs at once.
    NonDestructive,
    /// No annotations on a server not marked trusted: asks for confirmation.
    Untrusted,
    /// No annotations on a trusted server: runs at once.
    Trusted,
}

/// The policy of `tool` of `server`, and why.
pub(crate) fn policy_for(
    server: &McpServer,
    tool: &rmcp::model::Tool,
) -> (ToolPolicy, PolicySource) {
    let name = tool.name.as_ref();
    let (policy, source) = if let Some(p) = server.overrides.get(name) {
        (p.clone(), PolicySource::Override)
    } else if let Some(p) = &server.default_policy {
        (p.clone(), PolicySource::ServerDefault)
    } else {
        from_annotations(server, tool)
    };
    let policy = match (policy.timeout, server.call_timeout) {
        (None, Some(t)) => policy.timeout(t),
        _ => policy,
    };
    (policy, source)
}

fn from_annotations(server: &McpServer, tool: &rmcp::model::Tool) -> (ToolPolicy, PolicySource) {
    let name = tool.name.as_ref();
    let Some(a) = &tool.annotations else {
        return if server.trusted {
            (ToolPolicy::auto(), PolicySource::Trusted)
        } else {
            (
                ToolPolicy::confirm().reason(format!(
                    "`{name}` comes from MCP server `{}`, which is not marked trusted and does not say whether the tool changes anything",
                    server.name
                )),
                PolicySource::Untrusted,
            )
        };
    };
    let idempotent_hint = a.idempotent_hint == Some(true);
    if a.read_only_hint == Some(true) {
        return (ToolPolicy::auto().idempotent(true), PolicySource::ReadOnly);
    }
    if a.destructive_hint == Some(false) {
        return (
            ToolPolicy::auto().idempotent(idempotent_hint),
            PolicySource::NonDestructive,
        );
    }
    (
        ToolPolicy::confirm()
            .reason(format!(
                "`{name}` on MCP server `{}` may make destructive changes",
                server.name
            ))
            .idempotent(idempotent_hint),
        PolicySource::Destructive,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use reins_tool::{Gate, GateDecision};
    use serde_json::json;
    use std::time::Duration;

    fn tool(annotations: serde_json::Value) -> rmcp::model::Tool {
        let mut t = json!({ "name": "t", "inputSchema": { "type": "object" } });
        if !annotations.is_null() {
            t["annotations"] = annotations;
        }
        serde_json::from_value(t).unwrap()
    }

    fn server() -> McpServer {
        McpServer::stdio("s", "p", Vec::<String>::new())
    }

    #[test]
    fn annotations_set_the_default() {
        let (p, src) = policy_for(&server(), &tool(json!({ "readOnlyHint": true })));
        assert!(matches!(p.gate, Gate::Auto) && p.idempotent);
        assert_eq!(src, PolicySource::ReadOnly);

        let (p, src) = policy_for(&server(), &tool(json!({ "destructiveHint": true })));
        assert!(matches!(
            p.decide("t", &json!({})),
            GateDecision::Confirm { reason } if reason.contains("destructive")
        ));
        assert_eq!(src, PolicySource::Destructive);

        // MCP's default for destructiveHint is true.
        let (_, src) = policy_for(&server(), &tool(json!({ "title": "T" })));
        assert_eq!(src, PolicySource::Destructive);

        let (p, src) = policy_for(
            &server(),
            &tool(json!({ "destructiveHint": false, "idempotentHint": true })),
        );
        assert!(matches!(p.gate, Gate::Auto) && p.idempotent);
        assert_eq!(src, PolicySource::NonDestructive);
    }

    #[test]
    fn no_annotations_depend_on_trust() {
        let (p, src) = policy_for(&server(), &tool(json!(null)));
        assert!(matches!(p.gate, Gate::Confirm { .. }));
        assert_eq!(src, PolicySource::Untrusted);
        let (p, src) = policy_for(&server().trusted(true), &tool(json!(null)));
        assert!(matches!(p.gate, Gate::Auto) && !p.idempotent);
        assert_eq!(src, PolicySource::Trusted);
    }

    #[test]
    fn the_user_always_wins() {
        let s = server()
            .default_policy(ToolPolicy::external())
            .call_timeout(Duration::from_secs(5));
        let (p, src) = policy_for(&s, &tool(json!({ "readOnlyHint": true })));
        assert!(matches!(p.gate, Gate::External));
        assert_eq!(p.timeout, Some(Duration::from_secs(5)));
        assert_eq!(src, PolicySource::ServerDefault);

        let s = s.tool_policy("t", ToolPolicy::auto().timeout(Duration::from_secs(1)));
        let (p, src) = policy_for(&s, &tool(json!({ "destructiveHint": true })));
        assert!(matches!(p.gate, Gate::Auto));
        assert_eq!(p.timeout, Some(Duration::from_secs(1)));
        assert_eq!(src, PolicySource::Override);
    }
}
