//! `notifications.sweep_interval` on tokio's paused clock: waiting calls are looked at
//! when the file says. (Escalation and expiry themselves: main.rs and channels.rs.)

use reins_agent::RunStatus;

use super::*;

/// `sweep_interval = "1h"`: a call past its `expire_after` (a millisecond) is not
/// rejected 59 minutes after the last look (the default, 15 s, would have), and is at
/// the hour, with the file's note. The store is in memory and the run in this process:
/// nothing but the test moves the clock.
#[tokio::test(start_paused = true)]
async fn sweep_interval_from_the_file_on_a_paused_clock() {
    let text = r#"
[notifications]
sweep_interval = "1h"

[notifications.waiting.delete_file]
expire_after = "1ms"
expiry_note = "swept at the hour"
"#;
    let config = Config::from_str_with_env(text, "", vars(&[])).unwrap();
    let setup = config.setup().await.unwrap();
    let store: Arc<dyn reins_memory::MemoryStore> = Arc::new(reins_memory::InMemoryStore::new());
    let agent = agent_with(Arc::clone(&store), &Ran::default(), |b| setup.agent(b));
    let _app = setup.server(agent.clone()).await.unwrap().router();
    // The first look happens at once, before there is a call.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let session = agent.session("alice/swept").await.unwrap();
    let out = session.send(user("delete a.txt")).await.unwrap();
    assert_eq!(out.status, RunStatus::Paused);
    // Real time, which the expiry is measured in: the call is past its millisecond.
    std::thread::sleep(Duration::from_millis(20));
    tokio::time::sleep(Duration::from_secs(59 * 60)).await;
    assert!(store.decisions("alice/swept").await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_secs(2 * 60)).await;
    let decisions = store.decisions("alice/swept").await.unwrap();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    let record = decisions[0].record.to_string();
    assert!(record.contains("swept at the hour"), "{record}");
}
