//! The policy shadow view, in a real Chromium: an admin sees where the shadow Cedar set
//! would have answered differently (the session, the call's arguments, the active
//! verdict beside the shadow one, with the policy ids) and filters by tool; the nav
//! link is for admins only. Its screenshot is `policy-shadow.png`.

use std::sync::Arc;

use reins_policy::{CedarPolicy, PolicySet, ShadowLog};

use super::*;

const ACTIVE: &str = r#"@id("tmp-deletes")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/tmp/*" };
"#;

const SHADOW: &str = r#"@id("all-deletes")
permit (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file");

@id("etc-deletes")
@reason("system files are not deleted by agents")
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"delete_file")
when { resource.hasTag("path") && resource.getTag("path") like "/etc/*" };

@id("mail-asks")
@ask
forbid (principal, action == Reins::Action::"call", resource in Reins::Tool::"send_email");
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_shadow_view_in_a_real_browser() {
    let Some((chromium, chromedriver)) =
        chromium_or_skip("the_policy_shadow_view_in_a_real_browser")
    else {
        return;
    };
    let shots = Shots::new();
    let dir = tempfile::tempdir().unwrap();
    let p = CedarPolicy::with_log(
        PolicySet::from_source("policies/deletes.cedar", ACTIVE).unwrap(),
        ShadowLog::open(dir.path().join("shadow.jsonl")).unwrap(),
    );
    p.set_shadow(Some(
        PolicySet::from_source("policies-next/deletes.cedar", SHADOW).unwrap(),
    ));
    let store = reins_memory::SqliteStore::open(dir.path().join("s.db"))
        .await
        .unwrap();
    let ran: Ran = Arc::default();
    let agent = agent_with(Arc::new(store), &ran, |b| b.approval_policy(p.clone()));
    let policy = p.clone();
    let s = serve(agent, ran, Some(dir), move |s| s.policy(policy)).await;
    for (session, text) in [
        ("alice/cleanup-1", "delete /tmp/build.log"),
        ("alice/cleanup-2", "delete report.txt"),
        ("alice/cleanup-3", "delete /etc/hosts"),
    ] {
        let (st, out) = s
            .post(
                ALICE,
                &format!("/v1/sessions/{}/runs", enc(session)),
                json!({"message": text}),
            )
            .await;
        assert_eq!(st, 200, "{out}");
    }
    assert_eq!(s.ran(), ["delete:/tmp/build.log"]);

    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    c.goto(&format!("{}/?view=shadow#token={ADMIN}", s.base))
        .await
        .unwrap();
    let etc = ".shadow-diff[data-session=\"alice/cleanup-3\"]";
    c.wait().for_element(Locator::Css(etc)).await.unwrap();
    let text = wait_text(&c, etc, |t| t.contains("etc-deletes")).await;
    assert!(
        text.contains("/etc/hosts") && text.contains("deny") && text.contains("ask"),
        "{text}"
    );
    let text = wait_text(&c, ".shadow-diff[data-session=\"alice/cleanup-1\"]", |t| {
        t.contains("tmp-deletes")
    })
    .await;
    assert!(text.contains("all-deletes"), "{text}");
    wait_text(&c, "#shadow-sets", |t| t.contains("mail-asks")).await;
    shots.take(&c, "policy-shadow.png").await;

    // Filtering by a tool nothing differed on empties the list.
    c.find(Locator::Css("#s-tool"))
        .await
        .unwrap()
        .send_keys("send_email")
        .await
        .unwrap();
    c.find(Locator::Css("#shadow-filters button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        let empty = c
            .find(Locator::Css("#shadow-empty"))
            .await
            .unwrap()
            .is_displayed()
            .await
            .unwrap();
        if empty {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the filter did not apply"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        c.current_url()
            .await
            .unwrap()
            .as_str()
            .contains("stool=send_email")
    );

    // The nav link shows for admins only.
    c.goto(&format!("{}/#token={ANA}", s.base)).await.unwrap();
    wait_text(&c, "#who", |t| t.contains("ana")).await;
    let shown = c
        .find(Locator::Css("#nav-shadow"))
        .await
        .unwrap()
        .is_displayed()
        .await
        .unwrap();
    assert!(!shown);
    c.close().await.unwrap();
}
