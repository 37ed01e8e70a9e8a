//! The [`Tool`] trait, closure tools ([`FunctionTool`]) and schema-described tools
//! ([`DynamicTool`]).

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use futures::FutureExt;
use futures::future::BoxFuture;
use reins_message::ToolSpec;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::output::{IntoToolOutput, ToolOutput};
use crate::policy::ToolPolicy;
use crate::reconcile::{ReconcileFuture, Reconciler, Reconciliation};
use crate::schema::validate;
use crate::spec::LazySpec;

/// A tool with typed arguments.
///
/// The JSON Schema the model sees is generated from `Args` (doc comments become
/// descriptions) when the tool is registered. The model's arguments are deserialized
/// into `Args` before `call` runs; arguments that do not fit never reach the tool.
///
/// ```
/// use reins_tool::{Tool, ToolContext, ToolError, ToolPolicy};
///
/// /// Arguments of `delete_file`.
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct DeleteArgs {
///     /// The path of the file to delete.
///     path: String,
/// }
///
/// struct DeleteFile;
///
/// #[async_trait::async_trait]
/// impl Tool for DeleteFile {
///     const NAME: &'static str = "delete_file";
///     type Args = DeleteArgs;
///     type Output = String;
///
///     fn description(&self) -> String {
///         "Delete a file".into()
///     }
///     fn policy(&self) -> ToolPolicy {
///         ToolPolicy::confirm()
///     }
///     async fn call(&self, args: DeleteArgs, _ctx: ToolContext) -> Result<String, ToolError> {
///         Ok(format!("deleted {}", args.path))
///     }
/// }
/// ```
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls the tool by (1–64 of `a-z A-Z 0-9 _ -`).
    const NAME: &'static str;
    /// The arguments; their JSON Schema is what the model is shown.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// What a successful call returns.
    type Output: IntoToolOutput;

    /// What the tool does, for the model.
    fn description(&self) -> String;

    /// How calls are gated, whether they are idempotent and how long they may take.
    /// Read once, at registration.
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::auto()
    }

    /// Runs the tool.
    async fn call(&self, args: Self::Args, ctx: ToolContext) -> Result<Self::Output, ToolError>;

    /// Finds out whether a call that was cut off mid-run (its process died) took
    /// effect, typically by looking [`ToolContext::idempotency_key`] up at the far end.
    /// The agent asks when it finds such a call, with a context that carries the same
    /// session, tool use id and idempotency key the call had. Answer
    /// [`Reconciliation::Happened`] with the call's result,
    /// [`Reconciliation::NotRun`] only when the effect certainly did not happen (the
    /// agent then runs the call again), and [`Reconciliation::CannotTell`] otherwise
    /// (the default): the call stays `Unknown`. An error counts as "cannot tell".
    async fn reconcile(&self, ctx: ToolContext) -> Result<Reconciliation, ToolError> {
        let _ = ctx;
        Ok(Reconciliation::CannotTell(None))
    }
}

/// Arguments of a tool that takes none: its schema is an object without properties,
/// and it accepts `{}` (or no arguments at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub struct NoArgs {}

impl JsonSchema for NoArgs {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NoArgs".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "object", "properties": {} })
    }
}

/// A started tool call.
pub(crate) type ToolFuture = BoxFuture<'static, Result<ToolOutput, ToolError>>;

/// A tool with its types erased: checks arguments, then hands back the call's future.
pub(crate) trait Runner: Send + Sync {
    /// `Err` holds what is wrong with the arguments (the tool is not run).
    fn prepare(self: Arc<Self>, input: Value, ctx: ToolContext) -> Result<ToolFuture, String>;
}

/// Deserializes `input`, naming the failing field when it is not the top level.
fn parse_args<A: DeserializeOwned>(input: Value) -> Result<A, String> {
    serde_path_to_error::deserialize(input).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}

pub(crate) struct TypedRunner<T>(pub(crate) T);

impl<T: Tool> TypedRunner<T> {
    /// The tool's [`Tool::reconcile`], with its type erased.
    pub(crate) fn reconciler(self: &Arc<Self>) -> Arc<Reconciler> {
        let this = Arc::clone(self);
        Arc::new(move |ctx| {
            let this = Arc::clone(&this);
            async move { this.0.reconcile(ctx).await }.boxed()
        })
    }
}

/// A closure reconciler, with its type erased.
fn reconciler<F, Fut>(f: F) -> Arc<Reconciler>
where
    F: Fn(ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Reconciliation, ToolError>> + Send + 'static,
{
    Arc::new(move |ctx| -> ReconcileFuture { f(ctx).boxed() })
}

impl<T: Tool> Runner for TypedRunner<T> {
    fn prepare(self: Arc<Self>, input: Value, ctx: ToolContext) -> Result<ToolFuture, String> {
        let args: T::Args = parse_args(input)?;
        Ok(async move { self.0.call(args, ctx).await?.into_tool_output() }.boxed())
    }
}

struct FnRunner<A, F> {
    f: F,
    _args: PhantomData<fn(A)>,
}

impl<A, O, F, Fut> Runner for FnRunner<A, F>
where
    A: DeserializeOwned + Send + 'static,
    O: IntoToolOutput,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
{
    fn prepare(self: Arc<Self>, input: Value, ctx: ToolContext) -> Result<ToolFuture, String> {
        let args: A = parse_args(input)?;
        let fut = (self.f)(args, ctx);
        Ok(async move { fut.await?.into_tool_output() }.boxed())
    }
}

type DynHandler = dyn Fn(Value, ToolContext) -> ToolFuture + Send + Sync;

struct DynRunner {
    schema: Value,
    handler: Arc<DynHandler>,
}

impl Runner for DynRunner {
    fn prepare(self: Arc<Self>, input: Value, ctx: ToolContext) -> Result<ToolFuture, String> {
        validate(&self.schema, &input).map_err(|problems| problems.join("; "))?;
        Ok((self.handler)(input, ctx))
    }
}

/// A tool made from a closure (see [`Toolkit::function`](crate::Toolkit::function));
/// register it with [`Toolkit::add`](crate::Toolkit::add).
#[must_use]
pub struct FunctionTool {
    pub(crate) spec: LazySpec,
    pub(crate) policy: ToolPolicy,
    pub(crate) runner: Arc<dyn Runner>,
    pub(crate) reconciler: Option<Arc<Reconciler>>,
}

impl FunctionTool {
    /// A tool named `name` that runs `f` with the deserialized arguments.
    pub fn new<A, O, F, Fut>(name: &str, description: &str, f: F) -> Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        O: IntoToolOutput,
        F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
    {
        Self {
            spec: LazySpec::typed::<A>(name, description),
            policy: ToolPolicy::auto(),
            runner: Arc::new(FnRunner {
                f,
                _args: PhantomData,
            }),
            reconciler: None,
        }
    }

    /// Sets the policy.
    pub fn policy(mut self, policy: ToolPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets how the tool reconciles a call whose outcome is unknown (see
    /// [`Tool::reconcile`]; without it the tool cannot tell).
    pub fn reconcile<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Reconciliation, ToolError>> + Send + 'static,
    {
        self.reconciler = Some(reconciler(f));
        self
    }

    /// The spec the model will see (its schema is made on the first call).
    pub fn spec(&self) -> &ToolSpec {
        self.spec.get()
    }
}

impl std::fmt::Debug for FunctionTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionTool")
            .field("spec", self.spec.get())
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// A tool described at run time by a name, a description and a JSON Schema (e.g. one
/// that comes from another process). Arguments are checked against the schema (see
/// [`validate`]) before the handler runs.
///
/// ```
/// use reins_tool::{DynamicTool, ToolOutput};
/// use serde_json::json;
///
/// let echo = DynamicTool::new(
///     "echo",
///     "Repeat the text",
///     json!({ "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"] }),
///     |args, _ctx| async move { Ok(ToolOutput::text(args["text"].as_str().unwrap_or_default())) },
/// );
/// assert_eq!(echo.spec().name, "echo");
/// ```
#[must_use]
pub struct DynamicTool {
    pub(crate) spec: LazySpec,
    pub(crate) policy: ToolPolicy,
    pub(crate) runner: Arc<dyn Runner>,
    pub(crate) reconciler: Option<Arc<Reconciler>>,
}

impl DynamicTool {
    /// A tool whose arguments `schema` describes, run by `handler`.
    pub fn new<F, Fut>(name: &str, description: &str, schema: Value, handler: F) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        let handler: Arc<DynHandler> = Arc::new(move |v, ctx| handler(v, ctx).boxed());
        Self {
            spec: LazySpec::ready(ToolSpec::new(name, description, schema.clone())),
            policy: ToolPolicy::auto(),
            runner: Arc::new(DynRunner { schema, handler }),
            reconciler: None,
        }
    }

    /// Sets the policy.
    pub fn policy(mut self, policy: ToolPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets how the tool reconciles a call whose outcome is unknown (see
    /// [`Tool::reconcile`]; without it the tool cannot tell).
    pub fn reconcile<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Reconciliation, ToolError>> + Send + 'static,
    {
        self.reconciler = Some(reconciler(f));
        self
    }

    /// The spec the model will see.
    pub fn spec(&self) -> &ToolSpec {
        self.spec.get()
    }
}

impl std::fmt::Debug for DynamicTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicTool")
            .field("spec", self.spec.get())
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    struct Args {
        #[allow(dead_code)]
        filename: String,
        #[allow(dead_code)]
        opts: Opts,
    }
    #[derive(Deserialize, JsonSchema)]
    struct Opts {
        #[allow(dead_code)]
        depth: u8,
    }

    #[test]
    fn parse_errors_name_the_field() {
        let e = parse_args::<Args>(json!({ "opts": { "depth": 1 } })).err();
        assert_eq!(e.as_deref(), Some("missing field `filename`"));
        let e = parse_args::<Args>(json!({ "filename": "a", "opts": { "depth": -1 } })).err();
        assert_eq!(
            e.as_deref(),
            Some("opts.depth: invalid value: integer `-1`, expected u8")
        );
        assert!(parse_args::<NoArgs>(json!({})).is_ok());
    }
}
