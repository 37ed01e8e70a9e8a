//! The child side of the crash harness: the scripted conversation, a model and a
//! store that mark where the child is (so that the parent can kill it there), and the
//! tools whose effects the parent counts.

use super::*;

/// The model's side of the conversation, decided by the transcript so that any
/// process can pick it up where another one died.
pub(crate) fn script(req: &ChatRequest) -> ScriptedResponse {
    let msgs = &req.messages;
    let last_user = msgs.iter().rposition(|m| m.role == Role::User).unwrap_or(0);
    let turn: usize = msgs[last_user]
        .text()
        .trim_start_matches("turn ")
        .parse()
        .unwrap_or(0);
    let rounds = msgs[last_user..]
        .iter()
        .filter(|m| m.role == Role::Assistant && m.has_tool_uses())
        .count();
    match rounds {
        0 => ScriptedResponse::tool_call_with_id(
            format!("t{turn}-note"),
            "note",
            json!({"text": format!("turn {turn} starts")}),
        )
        .then_tool_call("note", json!({"text": "a second note"})),
        1 => ScriptedResponse::tool_call_with_id(
            format!("t{turn}-slow"),
            "slow_write",
            json!({"ms": 80}),
        )
        .then_tool_call(IDEMPOTENT, json!({"ms": 60})),
        2 => ScriptedResponse::tool_call_with_id(
            format!("t{turn}-mail"),
            MAIL,
            json!({"to": format!("user{turn}@example.com")}),
        ),
        3 => ScriptedResponse::tool_call_with_id(
            format!("t{turn}-deploy"),
            "deploy",
            json!({"target": "prod"}),
        ),
        _ => ScriptedResponse::text(format!(
            "Turn {turn} complete: two notes written, one slow write, one fetch, one email \
             and one approved deploy. Nothing was run twice, and every result is recorded."
        )),
    }
}

/// Streams the inner model's chunks a few milliseconds apart and tells the parent
/// about each one (kill point: during streaming).
pub(crate) struct MarkedModel(pub(crate) ScriptedModel);

#[async_trait]
impl ChatModel for MarkedModel {
    fn model_name(&self) -> &str {
        "marked"
    }
    async fn stream(&self, req: ChatRequest) -> reins_model::Result<ChatStream> {
        let inner = self.0.stream(req).await?;
        let s = inner.enumerate().then(|(i, c)| async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            tell_parent(&format!("STREAM {i}"));
            c
        });
        Ok(Box::pin(s))
    }
}

/// Delegates to a real store, telling the parent before each write and waiting a
/// random moment first (kill point: during a store write).
pub(crate) struct MarkedStore(pub(crate) Arc<dyn MemoryStore>);

pub(crate) async fn jitter() {
    tokio::time::sleep(Duration::from_micros(fastrand::u64(0..1500))).await;
}

#[async_trait]
impl MemoryStore for MarkedStore {
    async fn open_session(&self, id: &str) -> reins_memory::Result<SessionState> {
        self.0.open_session(id).await
    }
    async fn load_session(&self, id: &str) -> reins_memory::Result<SessionState> {
        self.0.load_session(id).await
    }
    async fn commit(&self, id: &str, commit: Commit) -> reins_memory::Result<u64> {
        tell_parent("STORE-BEGIN commit");
        jitter().await;
        let r = self.0.commit(id, commit).await;
        tell_parent("STORE-END commit");
        r
    }
    async fn list_sessions(&self) -> reins_memory::Result<Vec<SessionSummary>> {
        self.0.list_sessions().await
    }
    async fn delete_session(&self, id: &str) -> reins_memory::Result<()> {
        self.0.delete_session(id).await
    }
    async fn claim(
        &self,
        session: &str,
        tool_use_id: &str,
        fingerprint: &str,
        lease: Duration,
        allow_takeover: bool,
    ) -> reins_memory::Result<Claim> {
        tell_parent("STORE-BEGIN claim");
        jitter().await;
        let r = self
            .0
            .claim(session, tool_use_id, fingerprint, lease, allow_takeover)
            .await;
        tell_parent("STORE-END claim");
        r
    }
    async fn finish(
        &self,
        session: &str,
        tool_use_id: &str,
        result: &ToolResult,
    ) -> reins_memory::Result<()> {
        tell_parent("STORE-BEGIN finish");
        jitter().await;
        let r = self.0.finish(session, tool_use_id, result).await;
        tell_parent("STORE-END finish");
        r
    }
    async fn ledger_entry(
        &self,
        session: &str,
        tool_use_id: &str,
    ) -> reins_memory::Result<Option<LedgerEntry>> {
        self.0.ledger_entry(session, tool_use_id).await
    }
    async fn try_lock_session(
        &self,
        session: &str,
        owner: &str,
        lease: Duration,
    ) -> reins_memory::Result<bool> {
        self.0.try_lock_session(session, owner, lease).await
    }
    async fn unlock_session(&self, session: &str, owner: &str) -> reins_memory::Result<()> {
        self.0.unlock_session(session, owner).await
    }
    async fn session_version(&self, id: &str) -> reins_memory::Result<Option<u64>> {
        self.0.session_version(id).await
    }
    // The run lock rides in the run's first and last commits, as on the store itself.
    fn commit_releases_lock(&self) -> bool {
        self.0.commit_releases_lock()
    }
    fn commit_takes_lock(&self) -> bool {
        self.0.commit_takes_lock()
    }
    async fn append_decisions(
        &self,
        session: &str,
        entries: Vec<reins_memory::DecisionEntry>,
    ) -> reins_memory::Result<()> {
        self.0.append_decisions(session, entries).await
    }
    async fn decisions(
        &self,
        session: &str,
    ) -> reins_memory::Result<Vec<reins_memory::DecisionEntry>> {
        self.0.decisions(session).await
    }
    async fn request_interrupt(&self, session: &str) -> reins_memory::Result<bool> {
        self.0.request_interrupt(session).await
    }
    async fn interrupt_requests(&self, owner: &str) -> reins_memory::Result<Vec<String>> {
        self.0.interrupt_requests(owner).await
    }
    async fn changes(&self) -> reins_memory::Result<reins_memory::ChangeFeed> {
        self.0.changes().await
    }
    async fn interrupt_notices(&self) -> reins_memory::Result<reins_memory::ChangeFeed> {
        self.0.interrupt_notices().await
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct NoteArgs {
    /// What to note.
    text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct DeployArgs {
    /// Where to deploy.
    target: String,
}

/// A tool body: log BEGIN, optionally sleep (telling the parent), log END.
pub(crate) async fn effect(log: &Path, ctx: &ToolContext, name: &str, sleep_ms: u64) -> String {
    log_effect(log, &format!("BEGIN {} {name}", ctx.tool_use_id));
    if sleep_ms > 0 {
        tell_parent(&format!("TOOL-BEGIN {name} {}", ctx.tool_use_id));
        tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
    }
    log_effect(log, &format!("END {} {name}", ctx.tool_use_id));
    format!("{name} done")
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct MailArgs {
    /// Who to write to.
    to: String,
}

/// `send_mail`: the API call either before the marker the parent may kill at (the
/// effect happened before the kill) or after it and a pause (it has not happened yet).
pub(crate) async fn send_mail(
    log: &Path,
    client: &MailClient,
    ctx: &ToolContext,
    to: &str,
) -> Result<String, ToolError> {
    log_effect(log, &format!("BEGIN {} {MAIL}", ctx.tool_use_id));
    let marker = format!("TOOL-BEGIN {MAIL} {}", ctx.tool_use_id);
    let pause = Duration::from_millis(60);
    let sent = if fastrand::bool() {
        let sent = client.send(ctx, to).await?;
        tell_parent(&marker);
        tokio::time::sleep(pause).await;
        sent
    } else {
        tell_parent(&marker);
        tokio::time::sleep(pause).await;
        client.send(ctx, to).await?
    };
    log_effect(log, &format!("END {} {MAIL}", ctx.tool_use_id));
    Ok(sent)
}

pub(crate) fn crash_toolkit(log: &Path, mail_url: &str) -> Toolkit {
    let mut t = Toolkit::new();
    let (l, client) = (log.to_owned(), MailClient::new(mail_url));
    let lookup = client.clone();
    t.add(
        Toolkit::function(
            MAIL,
            "Send an email (the mail API dedupes by idempotency key)",
            move |a: MailArgs, ctx: ToolContext| {
                let (l, client) = (l.clone(), client.clone());
                async move { send_mail(&l, &client, &ctx, &a.to).await }
            },
        )
        .reconcile(move |ctx: ToolContext| {
            let client = lookup.clone();
            async move { client.lookup(&ctx).await }
        }),
    )
    .unwrap();
    let l = log.to_owned();
    t.add(Toolkit::function(
        "note",
        "Append a note",
        move |a: NoteArgs, ctx: ToolContext| {
            let l = l.clone();
            async move {
                let _ = a.text;
                Ok::<_, ToolError>(effect(&l, &ctx, "note", 0).await)
            }
        },
    ))
    .unwrap();
    let l = log.to_owned();
    t.add(Toolkit::function(
        "slow_write",
        "Write slowly (not idempotent)",
        move |a: SleepArgs, ctx: ToolContext| {
            let l = l.clone();
            async move { Ok::<_, ToolError>(effect(&l, &ctx, "slow_write", a.ms).await) }
        },
    ))
    .unwrap();
    let l = log.to_owned();
    t.add(
        Toolkit::function(
            IDEMPOTENT,
            "Fetch slowly (idempotent)",
            move |a: SleepArgs, ctx: ToolContext| {
                let l = l.clone();
                async move { Ok::<_, ToolError>(effect(&l, &ctx, IDEMPOTENT, a.ms).await) }
            },
        )
        .policy(ToolPolicy::auto().idempotent(true)),
    )
    .unwrap();
    let l = log.to_owned();
    t.add(
        Toolkit::function(
            "deploy",
            "Deploy (needs approval)",
            move |a: DeployArgs, ctx: ToolContext| {
                let l = l.clone();
                async move {
                    let name = format!("deploy:{}", a.target);
                    let _ = name;
                    Ok::<_, ToolError>(effect(&l, &ctx, "deploy", 0).await)
                }
            },
        )
        .policy(ToolPolicy::confirm()),
    )
    .unwrap();
    t
}

pub(crate) fn run_phase(state: &SessionState) -> Option<Phase> {
    state
        .run_state
        .clone()
        .filter(|v| !v.is_null())
        .map(|v| serde_json::from_value::<RunState>(v).unwrap().phase())
}
