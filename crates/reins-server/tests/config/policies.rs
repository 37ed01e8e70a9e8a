//! `[policies]`' reload triggers from the file: `watch` and `watch_interval` on a
//! paused clock (the directories are looked at when the file says, and not at all
//! when it says not to), and `reload_on_sighup` with a real SIGHUP to this process.

use reins_policy::PolicyDir;

use super::*;

/// The policy directory of a server set up by `[policies] dir = "policies"` and
/// `extra`, with the server's triggers started (kept while the router lives).
async fn policies(extra: &str) -> (tempfile::TempDir, Arc<PolicyDir>, axum::Router) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policies")).unwrap();
    std::fs::write(dir.path().join("policies/deletes.cedar"), DELETES).unwrap();
    let text = format!("[policies]\ndir = \"policies\"\n{extra}\n");
    let config = Config::from_str_with_env(&text, dir.path(), vars(&[])).unwrap();
    let setup = config.setup().await.unwrap();
    let store: Arc<dyn reins_memory::MemoryStore> = Arc::new(reins_memory::InMemoryStore::new());
    let agent = agent_with(store, &Ran::default(), |b| setup.agent(b));
    let app = setup.server(agent).await.unwrap().router();
    let policies = Arc::clone(setup.policies().unwrap());
    (dir, policies, app)
}

fn add_policy(dir: &tempfile::TempDir) {
    std::fs::write(dir.path().join("policies/scratch.cedar"), SHADOW_DELETES).unwrap();
}

/// `watch_interval = "1h"`: a file added after the first look is not seen 59 minutes
/// later (the default, two seconds, would have seen it), and is at the hour.
/// `watch = false`: never. Time is tokio's paused clock: the test moves it.
#[tokio::test(start_paused = true)]
async fn watch_and_watch_interval_from_the_file() {
    let (hourly_dir, hourly, _a) =
        policies("reload_on_sighup = false\nwatch_interval = \"1h\"").await;
    let (unwatched_dir, unwatched, _b) = policies("reload_on_sighup = false\nwatch = false").await;
    // The first look happens at once, before the change.
    tokio::time::sleep(Duration::from_secs(1)).await;
    add_policy(&hourly_dir);
    add_policy(&unwatched_dir);
    tokio::time::sleep(Duration::from_secs(59 * 60)).await;
    assert_eq!(hourly.status().reloads, 0);
    tokio::time::sleep(Duration::from_secs(2 * 60)).await;
    let status = hourly.status();
    assert_eq!(status.reloads, 1);
    assert_eq!(status.active.policies.len(), 2, "{:?}", status.active);
    tokio::time::sleep(Duration::from_secs(2 * 3600)).await;
    assert_eq!(unwatched.status().reloads, 0);
    assert_eq!(hourly.status().reloads, 1, "nothing changed since");
}

/// `reload_on_sighup`: a SIGHUP sent to this process reloads the server that says
/// `true` and not the one that says `false` (neither looks at its files).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_on_sighup_from_the_file() {
    let (on_dir, on, _a) = policies("reload_on_sighup = true\nwatch = false").await;
    let (off_dir, off, _b) = policies("reload_on_sighup = false\nwatch = false").await;
    add_policy(&on_dir);
    add_policy(&off_dir);
    let sent = Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    for _ in 0..200 {
        if on.status().reloads == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = on.status();
    assert_eq!(status.reloads, 1, "SIGHUP did not reload");
    assert!(status.last_error.is_none(), "{:?}", status.last_error);
    assert_eq!(status.active.policies.len(), 2);
    assert_eq!(off.status().reloads, 0);
    assert_eq!(off.status().active.policies.len(), 1);
}
