//! reins's events and stored messages as ACP `session/update` payloads: message and
//! thought chunks, tool calls (kind, title, locations, raw input and output) and their
//! updates, and the replay of a stored conversation for `session/load`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use reins_agent::Requirement;
use reins_message::{ContentBlock, Msg, Role, ToolOutcome, ToolResult, ToolUse};
use serde_json::{Value, json};

/// ACP's category of a tool call (`ToolKind`): editors pick icons and layouts by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ToolKind {
    /// Reading files or data.
    Read,
    /// Modifying files or content.
    Edit,
    /// Removing files or data.
    Delete,
    /// Moving or renaming files.
    Move,
    /// Searching for information.
    Search,
    /// Running commands or code.
    Execute,
    /// Internal reasoning or planning.
    Think,
    /// Retrieving external data.
    Fetch,
    /// Anything else.
    Other,
}

impl ToolKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Edit => "edit",
            Self::Delete => "delete",
            Self::Move => "move",
            Self::Search => "search",
            Self::Execute => "execute",
            Self::Think => "think",
            Self::Fetch => "fetch",
            Self::Other => "other",
        }
    }

    /// A guess from a tool's name (its words, split at `_`, `-` and `.`), used when
    /// the server was not told the kind ([`AcpAgentBuilder::tool_kind`](crate::AcpAgentBuilder::tool_kind)).
    pub fn guess(tool: &str) -> Self {
        let lower = tool.to_ascii_lowercase();
        let words: Vec<&str> = lower.split(['_', '-', '.', ' ']).collect();
        let has = |names: &[&str]| words.iter().any(|w| names.contains(w));
        if has(&["delete", "remove", "rm", "unlink", "drop"]) {
            Self::Delete
        } else if has(&["move", "rename", "mv"]) {
            Self::Move
        } else if has(&[
            "write", "edit", "update", "patch", "create", "append", "replace", "tag",
        ]) {
            Self::Edit
        } else if has(&["search", "find", "grep", "query", "lookup"]) {
            Self::Search
        } else if has(&[
            "run", "exec", "execute", "shell", "command", "terminal", "bash",
        ]) {
            Self::Execute
        } else if has(&["fetch", "http", "download", "web", "url", "browse"]) {
            Self::Fetch
        } else if has(&["read", "get", "list", "view", "show", "open", "cat", "scan"]) {
            Self::Read
        } else if has(&["think", "plan", "reason"]) {
            Self::Think
        } else {
            Self::Other
        }
    }
}

/// How tool calls are described to the editor.
#[derive(Debug, Clone, Default)]
pub(crate) struct Describe {
    /// Kinds set by the application, by tool name.
    pub(crate) kinds: HashMap<String, ToolKind>,
}

impl Describe {
    pub(crate) fn kind(&self, tool: &str) -> ToolKind {
        self.kinds
            .get(tool)
            .copied()
            .unwrap_or_else(|| ToolKind::guess(tool))
    }

    /// The `tool_call` fields of a call whose arguments are known.
    pub(crate) fn call(&self, tu: &ToolUse, cwd: &Path, status: &str) -> Value {
        json!({
            "toolCallId": tu.id,
            "title": title(tu),
            "kind": self.kind(&tu.name).as_str(),
            "status": status,
            "rawInput": tu.input,
            "locations": locations(&tu.input, cwd),
        })
    }
}

/// `delete_file path=a.txt`: the tool and its short scalar arguments.
pub(crate) fn title(tu: &ToolUse) -> String {
    let mut t = tu.name.clone();
    if let Value::Object(args) = &tu.input {
        for (k, v) in args.iter().take(3) {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Number(_) | Value::Bool(_) => v.to_string(),
                _ => continue,
            };
            let v: String = v.chars().take(60).collect();
            t.push_str(&format!(" {k}={v}"));
        }
    }
    t
}

/// The files a call names: string arguments called `path`, `file`, `file_path`,
/// `filename` (or arrays of them under `paths`/`files`), made absolute against the
/// session's working directory, with `line` when given.
pub(crate) fn locations(args: &Value, cwd: &Path) -> Vec<Value> {
    let Value::Object(o) = args else {
        return Vec::new();
    };
    let line = o.get("line").and_then(Value::as_u64);
    let mut out = Vec::new();
    let mut push = |p: &str| {
        if p.is_empty() || p.len() > 4096 {
            return;
        }
        let abs = cwd.join(p);
        let mut l = json!({ "path": abs.to_string_lossy() });
        if let Some(n) = line {
            l["line"] = json!(n);
        }
        out.push(l);
    };
    for key in ["path", "file", "file_path", "filename"] {
        if let Some(Value::String(p)) = o.get(key) {
            push(p);
        }
    }
    for key in ["paths", "files"] {
        if let Some(Value::Array(ps)) = o.get(key) {
            for p in ps.iter().filter_map(Value::as_str).take(20) {
                push(p);
            }
        }
    }
    out
}

/// The ACP status of a finished call.
pub(crate) fn finished_status(outcome: &ToolOutcome) -> &'static str {
    match outcome {
        ToolOutcome::Success => "completed",
        _ => "failed",
    }
}

/// The text a result shows.
pub(crate) fn result_text(r: &ToolResult) -> String {
    let text = r.text();
    match &r.outcome {
        ToolOutcome::Rejected { note } => match note {
            Some(n) if !text.contains(n.as_str()) => format!("Rejected: {n}"),
            _ if text.is_empty() => "Rejected".to_owned(),
            _ => text,
        },
        ToolOutcome::Cancelled if text.is_empty() => "Cancelled".to_owned(),
        _ => text,
    }
}

/// The `tool_call_update` fields of a finished call.
pub(crate) fn finished(r: &ToolResult) -> Value {
    let text = result_text(r);
    json!({
        "toolCallId": r.id,
        "status": finished_status(&r.outcome),
        "content": text_content(&text),
        "rawOutput": { "outcome": r.outcome.label(), "text": text },
    })
}

/// Tool call content holding one text block (none when the text is empty).
pub(crate) fn text_content(text: &str) -> Vec<Value> {
    if text.is_empty() {
        return Vec::new();
    }
    vec![json!({ "type": "content", "content": { "type": "text", "text": text } })]
}

/// A message or thought chunk.
pub(crate) fn chunk(kind: &str, text: &str) -> Value {
    json!({ "sessionUpdate": kind, "content": { "type": "text", "text": text } })
}

/// The stored conversation as the updates `session/load` replays: user and agent
/// text, thoughts, each tool call with its final state, and the calls still waiting
/// (`pending`).
pub(crate) fn replay(
    messages: &[Msg],
    pending: &[Requirement],
    describe: &Describe,
    cwd: &Path,
    hidden: &[&str],
) -> Vec<Value> {
    let results: BTreeMap<&str, &ToolResult> = messages
        .iter()
        .flat_map(Msg::tool_results_iter)
        .map(|r| (r.id.as_str(), r))
        .collect();
    let mut out = Vec::new();
    for m in messages {
        match m.role {
            Role::User => {
                let t = m.text();
                if !t.is_empty() {
                    out.push(chunk("user_message_chunk", &t));
                }
            }
            Role::Assistant => {
                for block in &m.content {
                    match block {
                        ContentBlock::Text { text, .. } if !text.is_empty() => {
                            out.push(chunk("agent_message_chunk", text));
                        }
                        ContentBlock::Thinking { thinking, .. } if !thinking.is_empty() => {
                            out.push(chunk("agent_thought_chunk", thinking));
                        }
                        ContentBlock::ToolUse(tu) if !hidden.contains(&tu.name.as_str()) => {
                            let mut call = describe.call(tu, cwd, "pending");
                            if let Some(r) = results.get(tu.id.as_str()) {
                                let done = finished(r);
                                call["status"] = done["status"].clone();
                                call["content"] = done["content"].clone();
                                call["rawOutput"] = done["rawOutput"].clone();
                            } else if !pending.iter().any(|p| p.id == tu.id) {
                                // Neither answered nor waiting: a call cut off by an
                                // interrupt that was never repaired into the transcript.
                                call["status"] = json!("failed");
                            }
                            call["sessionUpdate"] = json!("tool_call");
                            out.push(call);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn kinds_are_guessed_from_the_words_of_the_name() {
        assert_eq!(ToolKind::guess("delete_file"), ToolKind::Delete);
        assert_eq!(ToolKind::guess("read_text_file"), ToolKind::Read);
        assert_eq!(ToolKind::guess("write_text_file"), ToolKind::Edit);
        assert_eq!(ToolKind::guess("search_web"), ToolKind::Search);
        assert_eq!(ToolKind::guess("run_in_terminal"), ToolKind::Execute);
        assert_eq!(ToolKind::guess("send_email"), ToolKind::Other);
        // Words, not substrings: "spreadsheet" holds no "read".
        assert_eq!(ToolKind::guess("spreadsheet"), ToolKind::Other);
    }

    #[test]
    fn locations_are_absolute_and_carry_the_line() {
        let cwd = Path::new("/home/ana/project");
        let l = locations(&json!({"path": "src/a.rs", "line": 7}), cwd);
        assert_eq!(
            l,
            vec![json!({"path": "/home/ana/project/src/a.rs", "line": 7})]
        );
        let l = locations(&json!({"paths": ["/etc/x", 3, "b"]}), cwd);
        assert_eq!(
            l,
            vec![
                json!({"path": "/etc/x"}),
                json!({"path": "/home/ana/project/b"})
            ]
        );
        assert!(locations(&json!("a.txt"), cwd).is_empty());
    }

    #[test]
    fn the_title_names_the_tool_and_its_short_arguments() {
        let tu = ToolUse::new(
            "c1",
            "delete_file",
            json!({"path": "a.txt", "deep": {"x": 1}}),
        );
        assert_eq!(title(&tu), "delete_file path=a.txt");
    }

    #[test]
    fn a_replay_shows_text_finished_calls_and_waiting_ones() {
        let cwd = Path::new("/p");
        let done = ToolUse::new("c1", "read_file", json!({"path": "a"}));
        let waiting = ToolUse::new("c2", "delete_file", json!({"path": "b"}));
        let messages = vec![
            Msg::user("look"),
            Msg::new(Role::Assistant, vec![ContentBlock::ToolUse(done.clone())]),
            Msg::tool_results([ToolResult::new(
                "c1",
                "read_file",
                ToolOutcome::Success,
                vec![ContentBlock::text("hello")],
            )]),
            Msg::assistant("It says hello."),
            Msg::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse(waiting.clone())],
            ),
        ];
        let req: Requirement = serde_json::from_value(json!({
            "id": "c2", "tool_use": waiting, "kind": "confirmation",
            "reason": "r", "created_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        let u = replay(&messages, &[req], &Describe::default(), cwd, &[]);
        let kinds: Vec<&str> = u
            .iter()
            .map(|x| x["sessionUpdate"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "user_message_chunk",
                "tool_call",
                "agent_message_chunk",
                "tool_call"
            ]
        );
        assert_eq!(u[1]["status"], "completed");
        assert_eq!(u[1]["kind"], "read");
        assert_eq!(u[1]["locations"][0]["path"], "/p/a");
        assert_eq!(u[3]["status"], "pending");
    }
}
