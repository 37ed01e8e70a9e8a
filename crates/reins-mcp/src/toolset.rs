//! [`McpToolset`]: a connected server's tools, ready to add to a [`Toolkit`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use reins_tool::{DynamicTool, ToolPolicy, Toolkit};
use serde_json::Value;

use crate::config::McpServer;
use crate::connection::{Connection, lock};
use crate::error::{Error, Result};
use crate::policy::{PolicySource, policy_for};

/// One MCP tool as reins offers it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct McpTool {
    /// The name in the toolkit (namespaced, see [`McpServer::tool_name`]).
    pub name: String,
    /// The name on the server.
    pub mcp_name: String,
    /// The description the model sees.
    pub description: String,
    /// The JSON Schema of the arguments (checked before every call).
    pub input_schema: Value,
    /// The server's annotations (`readOnlyHint`, `destructiveHint`, ...), as sent.
    pub annotations: Option<Value>,
    /// The policy calls are gated by.
    pub policy: ToolPolicy,
    /// Why the tool has this policy.
    pub policy_source: PolicySource,
}

/// A connection to one MCP server and the tools it offers.
///
/// Cheap to clone: clones share the connection. The connection (and a stdio server's
/// child process) lives as long as the toolset or any tool added from it; it is
/// reopened by the next call when it was lost. [`McpToolset::close`] stops it at once.
#[derive(Clone)]
pub struct McpToolset {
    conn: Arc<Connection>,
}

impl std::fmt::Debug for McpToolset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.tools().into_iter().map(|t| t.name).collect();
        f.debug_struct("McpToolset")
            .field("server", &self.conn.config)
            .field("tools", &names)
            .finish()
    }
}

impl McpToolset {
    /// Starts (or reaches) the server, completes the MCP handshake and lists its tools
    /// (every page). Fails if the server cannot be started or reached, or if two of
    /// its tools would get the same reins name.
    pub async fn connect(server: McpServer) -> Result<Self> {
        let set = Self {
            conn: Arc::new(Connection::new(server)),
        };
        set.conn.list_tools().await?;
        set.check_collisions()?;
        Ok(set)
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        self.conn.name()
    }

    /// The configuration this toolset was made from.
    pub fn config(&self) -> &McpServer {
        &self.conn.config
    }

    /// The tools as last listed, in the server's order.
    pub fn tools(&self) -> Vec<McpTool> {
        let config = &self.conn.config;
        lock(&self.conn.tools)
            .iter()
            .map(|t| {
                let (policy, policy_source) = policy_for(config, t);
                McpTool {
                    name: config.tool_name(&t.name),
                    mcp_name: t.name.to_string(),
                    description: t
                        .description
                        .as_deref()
                        .or(t.title.as_deref())
                        .unwrap_or_default()
                        .to_owned(),
                    input_schema: object_schema(&t.input_schema),
                    annotations: t
                        .annotations
                        .as_ref()
                        .and_then(|a| serde_json::to_value(a).ok()),
                    policy,
                    policy_source,
                }
            })
            .collect()
    }

    /// One tool by its reins name.
    pub fn tool(&self, name: &str) -> Option<McpTool> {
        self.tools().into_iter().find(|t| t.name == name)
    }

    fn check_collisions(&self) -> Result<()> {
        let mut seen: HashMap<String, String> = HashMap::new();
        for t in self.tools() {
            if let Some(first) = seen.insert(t.name.clone(), t.mcp_name.clone()) {
                return Err(Error::NameCollision {
                    name: t.name,
                    first: format!("server `{}`'s tool `{first}`", self.server()),
                    second: format!("server `{}`'s tool `{}`", self.server(), t.mcp_name),
                });
            }
        }
        Ok(())
    }

    /// Adds every tool to `toolkit` as a dynamic tool with its policy. Nothing is added
    /// when one name is taken already.
    pub fn add_to(&self, toolkit: &mut Toolkit) -> Result<()> {
        self.add(toolkit, None)
    }

    /// Like [`McpToolset::add_to`], into a tool group made with
    /// [`Toolkit::create_group`] (e.g. to offer a server's tools only on demand).
    pub fn add_to_group(&self, toolkit: &mut Toolkit, group: &str) -> Result<()> {
        self.add(toolkit, Some(group))
    }

    /// A new toolkit holding this server's tools.
    pub fn toolkit(&self) -> Result<Toolkit> {
        let mut tk = Toolkit::new();
        self.add_to(&mut tk)?;
        Ok(tk)
    }

    fn add(&self, toolkit: &mut Toolkit, group: Option<&str>) -> Result<()> {
        self.check_collisions()?;
        let tools = self.tools();
        if let Some(t) = tools.iter().find(|t| toolkit.contains(&t.name)) {
            return Err(Error::NameCollision {
                name: t.name.clone(),
                first: "a tool already in the toolkit".to_owned(),
                second: format!("server `{}`'s tool `{}`", self.server(), t.mcp_name),
            });
        }
        for t in tools {
            let tool = self.dynamic_tool(&t);
            let added = match group {
                Some(g) => toolkit.add_dynamic_in_group(g, tool),
                None => toolkit.add_dynamic(tool),
            };
            added.map_err(|source| Error::Toolkit {
                server: self.server().to_owned(),
                tool: t.mcp_name.clone(),
                source,
            })?;
        }
        Ok(())
    }

    fn dynamic_tool(&self, t: &McpTool) -> DynamicTool {
        let conn = self.conn.clone();
        let mcp_name = t.mcp_name.clone();
        let idempotent = t.policy.idempotent;
        DynamicTool::new(
            &t.name,
            &t.description,
            t.input_schema.clone(),
            move |args, ctx| {
                crate::call::call_tool(conn.clone(), mcp_name.clone(), args, ctx, idempotent)
            },
        )
        .policy(t.policy.clone())
    }

    /// Whether the server announced (`notifications/tools/list_changed`) that its tool
    /// list changed since it was last listed. Calls re-list by themselves (a removed
    /// tool answers with an error, a changed schema is checked); to offer new tools to
    /// the model, [`refresh`](McpToolset::refresh) and build a new toolkit.
    pub fn tools_changed(&self) -> bool {
        self.conn.routes.tools_changed.load(Ordering::Acquire)
    }

    /// Lists the tools again. Returns whether the set of names or any schema changed.
    pub async fn refresh(&self) -> Result<bool> {
        let before: Vec<(String, Value)> = self
            .tools()
            .into_iter()
            .map(|t| (t.name, t.input_schema))
            .collect();
        self.conn.list_tools().await?;
        self.check_collisions()?;
        let after: Vec<(String, Value)> = self
            .tools()
            .into_iter()
            .map(|t| (t.name, t.input_schema))
            .collect();
        Ok(before != after)
    }

    /// The process id of a stdio server's child, while one runs.
    pub async fn child_pid(&self) -> Option<u32> {
        self.conn.current().await.and_then(|l| l.pid)
    }

    /// How many times a connection was opened (1 after `connect`; more after
    /// reconnections).
    pub fn connections(&self) -> u64 {
        self.conn.connections()
    }

    /// How many `notifications/cancelled` were sent (interrupted or abandoned calls).
    pub fn cancellations_sent(&self) -> u64 {
        self.conn.cancellations.load(Ordering::Acquire)
    }

    /// Closes the connection now (a stdio server's child is stopped). A later call
    /// through one of the tools reconnects.
    pub async fn close(&self) {
        self.conn.close().await;
    }
}

/// The input schema as an object schema (`"type": "object"` added when missing).
fn object_schema(schema: &serde_json::Map<String, Value>) -> Value {
    let mut s = schema.clone();
    s.entry("type").or_insert_with(|| Value::from("object"));
    Value::Object(s)
}

/// Adds the tools of several toolsets to `toolkit`, refusing (before adding anything)
/// names that two servers share, naming both.
pub fn add_all(toolsets: &[McpToolset], toolkit: &mut Toolkit) -> Result<()> {
    let mut owner: HashMap<String, (String, String)> = HashMap::new();
    for set in toolsets {
        for t in set.tools() {
            let here = (set.server().to_owned(), t.mcp_name.clone());
            if let Some((s, m)) = owner.insert(t.name.clone(), here) {
                return Err(Error::NameCollision {
                    name: t.name,
                    first: format!("server `{s}`'s tool `{m}`"),
                    second: format!("server `{}`'s tool `{}`", set.server(), t.mcp_name),
                });
            }
        }
    }
    for set in toolsets {
        set.add_to(toolkit)?;
    }
    Ok(())
}
