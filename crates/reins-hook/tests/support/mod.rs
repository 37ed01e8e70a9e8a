//! A mockall mock of `Hook`, shared by the reins-hook integration tests.

use async_trait::async_trait;
use mockall::mock;
use reins_hook::{Control, Hook, HookContext, HookError, HookEvent, HookEventKind};

mock! {
    pub Hook {}

    #[async_trait]
    impl Hook for Hook {
        fn name(&self) -> &str;
        fn priority(&self) -> i32;
        fn interested(&self, kind: HookEventKind) -> bool;
        async fn on_event(
            &self,
            event: &mut HookEvent,
            ctx: &HookContext,
            control: &mut Control,
        ) -> Result<(), HookError>;
    }
}

/// A mock with this name and priority, interested in everything.
pub fn mock_hook(name: &str, priority: i32) -> MockHook {
    let mut m = MockHook::new();
    m.expect_name().return_const(name.to_owned());
    m.expect_priority().return_const(priority);
    m.expect_interested().return_const(true);
    m
}

/// A context for tests.
pub fn ctx() -> HookContext {
    HookContext::new("tester", "s1").with_iteration(2)
}
