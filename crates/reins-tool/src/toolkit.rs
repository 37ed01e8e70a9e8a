//! [`Toolkit`]: the registry of tools and tool groups.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use reins_message::{ToolSpec, ToolUse};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::context::ToolContext;
use crate::error::{Error, Result, ToolError};
use crate::output::IntoToolOutput;
use crate::policy::{GateDecision, ToolPolicy};
use crate::reconcile::Reconciler;
use crate::schema::schema_for;
use crate::spec::LazySpec;
use crate::tool::{DynamicTool, FunctionTool, Runner, Tool, TypedRunner};

/// How a tool runs, and how it reconciles (if it can).
type Runners = (Arc<dyn Runner>, Option<Arc<Reconciler>>);

/// One registered tool.
pub(crate) struct Entry {
    pub(crate) spec: LazySpec,
    pub(crate) policy: ToolPolicy,
    pub(crate) group: Option<String>,
    pub(crate) runner: Arc<dyn Runner>,
    pub(crate) reconciler: Option<Arc<Reconciler>>,
}

#[derive(Clone)]
struct Group {
    name: String,
    description: String,
    /// Shared by every clone of the toolkit.
    active: Arc<AtomicBool>,
}

#[derive(Clone, Default)]
struct Registry {
    entries: Vec<Arc<Entry>>,
    index: HashMap<String, usize>,
    groups: Vec<Group>,
}

/// A description of one tool group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolGroup {
    /// The group's name.
    pub name: String,
    /// What the tools of the group are for.
    pub description: String,
    /// Whether its tools are offered to the model and may run.
    pub active: bool,
    /// Its tools, in registration order.
    pub tools: Vec<String>,
}

/// The registry of tools an agent may call.
///
/// Tools registered without a group are always active. Tools in a group are offered
/// to the model (and may run) only while the group is active; a call to an inactive
/// tool gets an error result instead of an execution.
///
/// Cloning is cheap. Registration on a clone does not affect the original (the
/// registry is copied on write), but group activation is shared between clones, so
/// a tool that switches groups on and off is seen by the agent that holds the toolkit.
///
/// ```
/// use reins_tool::{NoArgs, ToolPolicy, Toolkit};
///
/// let mut tk = Toolkit::new();
/// tk.add(Toolkit::function("now", "The current time", |_: NoArgs, _ctx| async {
///     Ok::<_, reins_tool::ToolError>("12:00")
/// }))?;
/// tk.create_group("browser", "Browse the web", false)?;
/// tk.add_in_group(
///     "browser",
///     Toolkit::function("open_page", "Open a page", |_: NoArgs, _ctx| async {
///         Ok::<_, reins_tool::ToolError>("<html/>")
///     })
///     .policy(ToolPolicy::confirm()),
/// )?;
/// assert_eq!(tk.names(), ["now", "open_page"]);
/// assert_eq!(tk.specs().len(), 1); // `browser` is not active
/// tk.set_group_active("browser", true)?;
/// assert_eq!(tk.specs().len(), 2);
/// # Ok::<(), reins_tool::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Toolkit {
    reg: Arc<Registry>,
}

fn check_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        Some("it is empty".to_owned())
    } else if name.len() > 64 {
        Some(format!("it is {} characters long", name.len()))
    } else {
        name.chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
            .map(|c| format!("it contains {c:?}"))
    };
    match reason {
        Some(reason) => Err(Error::InvalidName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

impl Toolkit {
    /// An empty toolkit.
    pub fn new() -> Self {
        Self::default()
    }

    /// A closure tool: `f` receives the deserialized arguments and the context. Add it
    /// with [`Toolkit::add`]; set its policy with [`FunctionTool::policy`].
    pub fn function<A, O, F, Fut>(name: &str, description: &str, f: F) -> FunctionTool
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        O: IntoToolOutput,
        F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
    {
        FunctionTool::new(name, description, f)
    }

    fn insert(
        &mut self,
        spec: LazySpec,
        policy: ToolPolicy,
        group: Option<&str>,
        (runner, reconciler): (Arc<dyn Runner>, Option<Arc<Reconciler>>),
    ) -> Result<&mut Self> {
        check_name(spec.name())?;
        spec.check()?;
        if self.reg.index.contains_key(spec.name()) {
            return Err(Error::DuplicateTool {
                name: spec.name().to_owned(),
            });
        }
        if let Some(g) = group {
            if !self.reg.groups.iter().any(|x| x.name == g) {
                return Err(Error::UnknownGroup {
                    group: g.to_owned(),
                    known: self.group_list(),
                });
            }
        }
        let reg = Arc::make_mut(&mut self.reg);
        reg.index.insert(spec.name().to_owned(), reg.entries.len());
        reg.entries.push(Arc::new(Entry {
            spec,
            policy,
            group: group.map(str::to_owned),
            runner,
            reconciler,
        }));
        Ok(self)
    }

    fn typed<T: Tool>(tool: T) -> (LazySpec, ToolPolicy, Runners) {
        // `T::Args` need not be `'static`, so it cannot key the schema cache.
        let spec = LazySpec::ready(ToolSpec::new(
            T::NAME,
            tool.description(),
            schema_for::<T::Args>(),
        ));
        let policy = tool.policy();
        let runner = Arc::new(TypedRunner(tool));
        let reconciler = runner.reconciler();
        (spec, policy, (runner, Some(reconciler)))
    }

    /// Registers a typed tool (always active). Refuses a name already taken.
    pub fn register<T: Tool>(&mut self, tool: T) -> Result<&mut Self> {
        let (spec, policy, runner) = Self::typed(tool);
        self.insert(spec, policy, None, runner)
    }

    /// Registers a typed tool into a group made with [`Toolkit::create_group`].
    pub fn register_in_group<T: Tool>(&mut self, group: &str, tool: T) -> Result<&mut Self> {
        let (spec, policy, runner) = Self::typed(tool);
        self.insert(spec, policy, Some(group), runner)
    }

    /// Registers a typed tool, builder style.
    pub fn with<T: Tool>(mut self, tool: T) -> Result<Self> {
        self.register(tool)?;
        Ok(self)
    }

    /// Registers a closure tool (always active).
    pub fn add(&mut self, tool: FunctionTool) -> Result<&mut Self> {
        self.insert(tool.spec, tool.policy, None, (tool.runner, tool.reconciler))
    }

    /// Registers a closure tool into a group.
    pub fn add_in_group(&mut self, group: &str, tool: FunctionTool) -> Result<&mut Self> {
        self.insert(
            tool.spec,
            tool.policy,
            Some(group),
            (tool.runner, tool.reconciler),
        )
    }

    /// Registers a tool described by a JSON Schema (always active). The schema must
    /// describe an object.
    pub fn add_dynamic(&mut self, tool: DynamicTool) -> Result<&mut Self> {
        self.insert(tool.spec, tool.policy, None, (tool.runner, tool.reconciler))
    }

    /// Registers a tool described by a JSON Schema into a group.
    pub fn add_dynamic_in_group(&mut self, group: &str, tool: DynamicTool) -> Result<&mut Self> {
        self.insert(
            tool.spec,
            tool.policy,
            Some(group),
            (tool.runner, tool.reconciler),
        )
    }

    pub(crate) fn entry(&self, name: &str) -> Option<&Arc<Entry>> {
        self.reg
            .index
            .get(name)
            .and_then(|i| self.reg.entries.get(*i))
    }

    fn group(&self, name: &str) -> Option<&Group> {
        self.reg.groups.iter().find(|g| g.name == name)
    }

    fn group_list(&self) -> String {
        if self.reg.groups.is_empty() {
            "none".to_owned()
        } else {
            let names: Vec<&str> = self.reg.groups.iter().map(|g| g.name.as_str()).collect();
            names.join(", ")
        }
    }

    pub(crate) fn entry_is_active(&self, entry: &Entry) -> bool {
        entry.group.as_deref().is_none_or(|g| {
            self.group(g)
                .is_some_and(|g| g.active.load(Ordering::Acquire))
        })
    }

    /// The specs of the active tools, in registration order: what the model is shown.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.reg
            .entries
            .iter()
            .filter(|e| self.entry_is_active(e))
            .map(|e| e.spec.get().clone())
            .collect()
    }

    /// Which groups are active, in creation order: what [`Toolkit::specs`] depends on
    /// besides registration (empty, and allocation-free, without groups). A caller that
    /// caches the specs compares it to decide whether they are still current.
    pub fn group_activity(&self) -> Vec<bool> {
        self.reg
            .groups
            .iter()
            .map(|g| g.active.load(Ordering::Acquire))
            .collect()
    }

    /// The spec of a registered tool, active or not.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.entry(name).map(|e| e.spec.get())
    }

    /// Whether a tool with this name is registered (active or not).
    pub fn contains(&self, name: &str) -> bool {
        self.reg.index.contains_key(name)
    }

    /// Whether the tool is registered and its group (if any) is active.
    pub fn is_active(&self, name: &str) -> bool {
        self.entry(name).is_some_and(|e| self.entry_is_active(e))
    }

    /// The names of all registered tools, in registration order.
    pub fn names(&self) -> Vec<String> {
        self.reg
            .entries
            .iter()
            .map(|e| e.spec.name().to_owned())
            .collect()
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.reg.entries.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.reg.entries.is_empty()
    }

    /// A tool's policy.
    pub fn policy(&self, name: &str) -> Option<&ToolPolicy> {
        self.entry(name).map(|e| &e.policy)
    }

    /// Whether a tool is declared idempotent (`false` for unknown tools).
    pub fn is_idempotent(&self, name: &str) -> bool {
        self.policy(name).is_some_and(|p| p.idempotent)
    }

    /// What the tool's policy says about this call. Calls that cannot run anyway
    /// (unknown or inactive tool, arguments that are not JSON) are [`GateDecision::Run`]:
    /// executing them produces the error result the model needs to see.
    pub fn gate(&self, tool_use: &ToolUse) -> GateDecision {
        match self.entry(&tool_use.name) {
            Some(e) if self.entry_is_active(e) && !tool_use.has_malformed_input() => {
                e.policy.decide(&tool_use.name, &tool_use.input)
            }
            _ => GateDecision::Run,
        }
    }

    /// Creates a tool group, active or not.
    pub fn create_group(
        &mut self,
        group: &str,
        description: &str,
        active: bool,
    ) -> Result<&mut Self> {
        if self.group(group).is_some() {
            return Err(Error::DuplicateGroup {
                group: group.to_owned(),
            });
        }
        Arc::make_mut(&mut self.reg).groups.push(Group {
            name: group.to_owned(),
            description: description.to_owned(),
            active: Arc::new(AtomicBool::new(active)),
        });
        Ok(self)
    }

    /// Activates or deactivates a group. Takes `&self`: activation is shared by every
    /// clone of this toolkit.
    pub fn set_group_active(&self, group: &str, active: bool) -> Result<()> {
        match self.group(group) {
            Some(g) => {
                g.active.store(active, Ordering::Release);
                Ok(())
            }
            None => Err(Error::UnknownGroup {
                group: group.to_owned(),
                known: self.group_list(),
            }),
        }
    }

    /// The names of the active groups, in creation order.
    pub fn active_groups(&self) -> Vec<String> {
        self.reg
            .groups
            .iter()
            .filter(|g| g.active.load(Ordering::Acquire))
            .map(|g| g.name.clone())
            .collect()
    }

    /// Every group, in creation order, with its tools.
    pub fn groups(&self) -> Vec<ToolGroup> {
        self.reg
            .groups
            .iter()
            .map(|g| ToolGroup {
                name: g.name.clone(),
                description: g.description.clone(),
                active: g.active.load(Ordering::Acquire),
                tools: self
                    .reg
                    .entries
                    .iter()
                    .filter(|e| e.group.as_deref() == Some(g.name.as_str()))
                    .map(|e| e.spec.name().to_owned())
                    .collect(),
            })
            .collect()
    }

    /// The group a tool belongs to (`None` for ungrouped or unknown tools).
    pub fn group_of(&self, name: &str) -> Option<&str> {
        self.entry(name).and_then(|e| e.group.as_deref())
    }

    /// `tool `x` is not registered; registered: a, b` — the text an unknown call gets.
    pub(crate) fn unknown_tool_message(&self, name: &str) -> String {
        let names = self.names();
        let list = if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        };
        format!("tool `{name}` is not registered; registered: {list}")
    }
}

impl std::fmt::Debug for Toolkit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolkit")
            .field("tools", &self.names())
            .field("active_groups", &self.active_groups())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::NoArgs;
    use serde_json::json;

    fn noop(name: &str) -> FunctionTool {
        Toolkit::function(name, "does nothing", |_: NoArgs, _ctx| async {
            Ok::<_, ToolError>(())
        })
    }

    #[test]
    fn duplicate_and_invalid_names_are_refused() {
        let mut tk = Toolkit::new();
        tk.add(noop("a")).unwrap();
        assert_eq!(
            tk.add(noop("a")).unwrap_err(),
            Error::DuplicateTool { name: "a".into() }
        );
        assert!(matches!(
            tk.add(noop("has space")),
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(tk.add(noop("")), Err(Error::InvalidName { .. })));
        assert!(matches!(
            tk.add(noop(&"x".repeat(65))),
            Err(Error::InvalidName { .. })
        ));
        assert_eq!(tk.names(), ["a"]);
    }

    #[test]
    fn dynamic_tools_need_an_object_schema() {
        let mut tk = Toolkit::new();
        let bad = DynamicTool::new("d", "d", json!({ "type": "string" }), |_, _| async {
            Ok(crate::ToolOutput::text("x"))
        });
        assert!(matches!(
            tk.add_dynamic(bad),
            Err(Error::InvalidSchema { .. })
        ));
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct NotAnObject(#[allow(dead_code)] String);
        let bad = Toolkit::function("f", "f", |_: NotAnObject, _ctx| async {
            Ok::<_, ToolError>(())
        });
        assert!(matches!(tk.add(bad), Err(Error::InvalidSchema { .. })));
        assert!(tk.is_empty());
    }

    #[test]
    fn groups_control_what_is_offered() {
        let mut tk = Toolkit::new();
        tk.add(noop("base")).unwrap();
        assert!(matches!(
            tk.add_in_group("web", noop("fetch")),
            Err(Error::UnknownGroup { .. })
        ));
        tk.create_group("web", "web access", false).unwrap();
        tk.create_group("fs", "files", true).unwrap();
        assert_eq!(
            tk.create_group("fs", "again", true).unwrap_err(),
            Error::DuplicateGroup { group: "fs".into() }
        );
        tk.add_in_group("web", noop("fetch")).unwrap();
        tk.add_in_group("fs", noop("read")).unwrap();

        let names = |specs: Vec<ToolSpec>| specs.into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(names(tk.specs()), ["base", "read"]);
        assert_eq!(tk.active_groups(), ["fs"]);
        assert!(!tk.is_active("fetch") && tk.contains("fetch"));
        assert_eq!(tk.group_of("fetch"), Some("web"));

        let clone = tk.clone();
        clone.set_group_active("web", true).unwrap();
        tk.set_group_active("fs", false).unwrap();
        assert_eq!(names(tk.specs()), ["base", "fetch"]);
        assert_eq!(names(clone.specs()), ["base", "fetch"]);
        assert!(tk.set_group_active("nope", true).is_err());
        assert_eq!(
            tk.groups()[0],
            ToolGroup {
                name: "web".into(),
                description: "web access".into(),
                active: true,
                tools: vec!["fetch".into()],
            }
        );

        // Registration on a clone stays on the clone.
        let mut other = tk.clone();
        other.add(noop("extra")).unwrap();
        assert!(!tk.contains("extra"));
    }

    #[test]
    fn gate_follows_the_policy_and_lets_broken_calls_through() {
        let mut tk = Toolkit::new();
        tk.add(noop("rm").policy(ToolPolicy::confirm().idempotent(false)))
            .unwrap();
        tk.add(noop("ls").policy(ToolPolicy::auto().idempotent(true)))
            .unwrap();
        tk.create_group("off", "inactive", false).unwrap();
        tk.add_in_group("off", noop("hidden").policy(ToolPolicy::external()))
            .unwrap();

        let call = |name: &str| ToolUse::new("1", name, json!({}));
        assert!(matches!(tk.gate(&call("rm")), GateDecision::Confirm { .. }));
        assert_eq!(tk.gate(&call("ls")), GateDecision::Run);
        assert_eq!(tk.gate(&call("hidden")), GateDecision::Run);
        assert_eq!(tk.gate(&call("missing")), GateDecision::Run);
        let mut broken = call("rm");
        broken.raw_input = Some("{oops".into());
        assert_eq!(tk.gate(&broken), GateDecision::Run);
        assert!(tk.is_idempotent("ls") && !tk.is_idempotent("rm") && !tk.is_idempotent("missing"));
        assert_eq!(
            tk.unknown_tool_message("x"),
            "tool `x` is not registered; registered: rm, ls, hidden"
        );
    }
}
