//! The [`Hook`] trait, [`HookError`] and the ordered chain [`Hooks`].

use std::sync::Arc;

use async_trait::async_trait;

use crate::control::Control;
use crate::event::{HookContext, HookEvent, HookEventKind};

/// A hook failed; the run stops with this error. Says which hook failed, on which
/// event, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hook `{hook}` failed{}: {message}", .event.map(|k| format!(" on {k}")).unwrap_or_default())]
pub struct HookError {
    hook: String,
    event: Option<HookEventKind>,
    message: String,
}

impl HookError {
    /// An error with this message. The chain fills in the hook's name and the event.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            hook: String::new(),
            event: None,
            message: message.into(),
        }
    }

    /// An error made from any error, keeping its sources (`outer: inner`).
    pub fn from_error(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        Self::new(message)
    }

    /// Names the hook (the chain does this for errors that do not name one).
    #[must_use]
    pub fn with_hook(mut self, hook: impl Into<String>) -> Self {
        self.hook = hook.into();
        self
    }

    /// The name of the hook that failed.
    pub fn hook(&self) -> &str {
        &self.hook
    }

    /// The event it failed on, when known.
    pub fn event(&self) -> Option<HookEventKind> {
        self.event
    }

    /// Why it failed.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<String> for HookError {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for HookError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// The crate's result type.
pub type Result<T, E = HookError> = std::result::Result<T, E>;

/// Code that runs at points of an agent's run.
///
/// ```
/// use reins_hook::{Control, Hook, HookContext, HookError, HookEvent, HookEventKind};
/// use reins_message::Msg;
///
/// /// Adds a reminder to every model request.
/// struct Reminder;
///
/// #[async_trait::async_trait]
/// impl Hook for Reminder {
///     fn interested(&self, kind: HookEventKind) -> bool {
///         kind == HookEventKind::PreReasoning
///     }
///     async fn on_event(&self, event: &mut HookEvent, _: &HookContext, _: &mut Control) -> Result<(), HookError> {
///         if let HookEvent::PreReasoning { request } = event {
///             request.messages.push(Msg::system("Answer briefly."));
///         }
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait Hook: Send + Sync {
    /// A name for logs and errors (the type's name unless overridden).
    fn name(&self) -> &str {
        std::any::type_name::<Self>()
    }

    /// Where the hook runs in the chain: lower first, ties in registration order.
    /// Read once, when the hook is added.
    fn priority(&self) -> i32 {
        0
    }

    /// Whether the hook wants events of this kind. The chain skips hooks that do not,
    /// and the agent skips building chunk events nobody wants.
    fn interested(&self, kind: HookEventKind) -> bool {
        let _ = kind;
        true
    }

    /// Handles one event: mutate it (where its variant allows) and/or call `control`.
    async fn on_event(
        &self,
        event: &mut HookEvent,
        ctx: &HookContext,
        control: &mut Control,
    ) -> Result<(), HookError>;
}

#[async_trait]
impl<T: Hook + ?Sized> Hook for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn priority(&self) -> i32 {
        (**self).priority()
    }
    fn interested(&self, kind: HookEventKind) -> bool {
        (**self).interested(kind)
    }
    async fn on_event(
        &self,
        event: &mut HookEvent,
        ctx: &HookContext,
        control: &mut Control,
    ) -> Result<(), HookError> {
        (**self).on_event(event, ctx, control).await
    }
}

#[async_trait]
impl<T: Hook + ?Sized> Hook for Box<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn priority(&self) -> i32 {
        (**self).priority()
    }
    fn interested(&self, kind: HookEventKind) -> bool {
        (**self).interested(kind)
    }
    async fn on_event(
        &self,
        event: &mut HookEvent,
        ctx: &HookContext,
        control: &mut Control,
    ) -> Result<(), HookError> {
        (**self).on_event(event, ctx, control).await
    }
}

#[derive(Clone)]
struct Entry {
    priority: i32,
    hook: Arc<dyn Hook>,
}

/// An ordered chain of hooks: lower [`Hook::priority`] first, ties in the order they
/// were added. Cheap to clone; adding to a clone leaves the original as it was.
///
/// ```
/// use reins_hook::{HookContext, HookEvent, Hooks, ToolConfirmationHook};
/// use reins_message::{ContentBlock, Msg, ToolUse};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), reins_hook::HookError> {
/// let mut hooks = Hooks::new();
/// hooks.add(ToolConfirmationHook::new(["delete_file"]));
///
/// let message = Msg::assistant("Deleting.")
///     .with_block(ContentBlock::ToolUse(ToolUse::new("c1", "delete_file", serde_json::json!({}))));
/// let mut event = HookEvent::PostReasoning { message };
/// let control = hooks.run(&mut event, &HookContext::new("agent", "s1")).await?;
/// assert!(control.is_stopped());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Hooks {
    entries: Arc<Vec<Entry>>,
}

impl Hooks {
    /// An empty chain.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a hook at its priority's place (after hooks of equal priority).
    pub fn add(&mut self, hook: impl Hook + 'static) -> &mut Self {
        self.add_arc(Arc::new(hook))
    }

    /// Adds a shared hook.
    pub fn add_arc(&mut self, hook: Arc<dyn Hook>) -> &mut Self {
        let priority = hook.priority();
        let entries = Arc::make_mut(&mut self.entries);
        let at = entries.partition_point(|e| e.priority <= priority);
        entries.insert(at, Entry { priority, hook });
        self
    }

    /// Adds a hook, builder style.
    #[must_use]
    pub fn with(mut self, hook: impl Hook + 'static) -> Self {
        self.add(hook);
        self
    }

    /// How many hooks are in the chain.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the chain is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The hooks' names, in the order they run.
    pub fn names(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| e.hook.name().to_owned())
            .collect()
    }

    /// Whether any hook wants events of this kind.
    pub fn wants(&self, kind: HookEventKind) -> bool {
        self.entries.iter().any(|e| e.hook.interested(kind))
    }

    /// Runs the interested hooks in order and returns their merged [`Control`].
    ///
    /// Each hook sees the event as the hooks before it left it. For read-only kinds
    /// ([`HookEventKind::is_read_only`]) any change a hook makes is undone before the
    /// next hook runs. The first hook error stops the chain and is returned, naming
    /// the hook and the event.
    pub async fn run(&self, event: &mut HookEvent, ctx: &HookContext) -> Result<Control> {
        let kind = event.kind();
        let original = kind.is_read_only().then(|| event.clone());
        let mut merged = Control::default();
        for entry in self.entries.iter().filter(|e| e.hook.interested(kind)) {
            let mut control = Control::default();
            let outcome = entry.hook.on_event(event, ctx, &mut control).await;
            if let Some(original) = &original {
                if event != original {
                    *event = original.clone();
                }
            }
            if let Err(mut e) = outcome {
                if e.hook.is_empty() {
                    e.hook = entry.hook.name().to_owned();
                }
                e.event = Some(kind);
                tracing::warn!(hook = %e.hook, event = %kind, error = %e.message, "hook failed");
                return Err(e);
            }
            merged.merge(control);
        }
        Ok(merged)
    }
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_which_hook_and_event() {
        let mut e = HookError::new("quota exceeded").with_hook("Budget");
        assert_eq!(e.to_string(), "hook `Budget` failed: quota exceeded");
        e.event = Some(HookEventKind::PreReasoning);
        assert_eq!(
            e.to_string(),
            "hook `Budget` failed on pre_reasoning: quota exceeded"
        );
        assert_eq!((e.hook(), e.message()), ("Budget", "quota exceeded"));
        let io = std::io::Error::other("disk full");
        assert_eq!(HookError::from_error(&io).message(), "disk full");
    }
}
