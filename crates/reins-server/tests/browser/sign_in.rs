//! Signing in, in a real Chromium: before a token is accepted only the sign-in form
//! shows; a token (typed, or from a link's `#token=`) is kept only once the server
//! accepted it, so a bad link never replaces a good stored token.

use serde_json::Value;

use super::*;

/// Whether the element shows (an element that is not there does not).
async fn displayed(c: &Client, css: &str) -> bool {
    match c.find(Locator::Css(css)).await {
        Ok(el) => el.is_displayed().await.unwrap(),
        Err(_) => false,
    }
}

async fn stored_token(c: &Client) -> Value {
    c.execute("return localStorage.getItem('reins-token')", vec![])
        .await
        .unwrap()
}

async fn wait_displayed(c: &Client, css: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if displayed(c, css).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("`{css}` never showed");
}

/// Only the sign-in form before sign-in; a bad token typed in is refused and not
/// kept; a good one opens the inbox. A link with a bad token keeps the good stored one
/// and says so (on a fresh load and on a link opened in the open page); a link with a
/// good token replaces it; a bad link with nothing stored leaves the sign-in form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_in_a_real_browser() {
    let Some((chromium, chromedriver)) = chromium_or_skip("signing_in_in_a_real_browser") else {
        return;
    };
    let shots = Shots::new();
    let s = start().await;
    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;

    // Before sign-in: the form, and nothing of the inbox.
    c.goto(&format!("{}/", s.base)).await.unwrap();
    wait_displayed(&c, "#login").await;
    for hidden in [
        "#app",
        "#nav",
        "#pane-pending h2",
        "#session-pane",
        "#notice",
    ] {
        assert!(
            !displayed(&c, hidden).await,
            "{hidden} shows before sign-in"
        );
    }
    shots.take(&c, "sign-in.png").await;

    // A bad token typed in: refused, nothing kept.
    c.find(Locator::Css("#token-input"))
        .await
        .unwrap()
        .send_keys("not-a-token")
        .await
        .unwrap();
    c.find(Locator::Css("#token-save"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "#login-status", |t| {
        t.contains("That token was not accepted by this server (401)")
    })
    .await;
    assert_eq!(stored_token(&c).await, Value::Null);
    assert!(!displayed(&c, "#app").await);

    // A good one opens the inbox, and is kept.
    let input = c.find(Locator::Css("#token-input")).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys(ANA).await.unwrap();
    c.find(Locator::Css("#token-save"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "#who", |t| t.starts_with("ana")).await;
    assert!(displayed(&c, "#pane-pending h2").await);
    assert!(!displayed(&c, "#login").await);
    assert_eq!(stored_token(&c).await, ANA);

    // A link with a bad token (a new page load): the stored token stays, and the page
    // says why the link's was not taken.
    c.goto(&format!("{}/inbox#token=stale-token", s.base))
        .await
        .unwrap();
    wait_text(&c, "#who", |t| t.starts_with("ana")).await;
    assert_eq!(stored_token(&c).await, ANA);
    let notice = wait_text(&c, "#notice", |t| t.contains("The token in the link")).await;
    assert!(
        notice.contains("not accepted by this server (401)")
            && notice.contains("still signed in as ana"),
        "{notice}"
    );
    let url = c.current_url().await.unwrap();
    assert!(
        !url.as_str().contains("token="),
        "the token left the URL: {url}"
    );
    shots.take(&c, "bad-link.png").await;

    // The same in the open page (only the fragment changes: no new load).
    c.find(Locator::Css("#notice-close"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(!displayed(&c, "#notice").await);
    c.goto(&format!("{}/inbox#token=another-stale-token", s.base))
        .await
        .unwrap();
    wait_text(&c, "#notice", |t| {
        t.contains("not accepted") && t.contains("still signed in as ana")
    })
    .await;
    assert_eq!(stored_token(&c).await, ANA);

    // A link with a good token replaces the stored one, in the open page too.
    c.goto(&format!("{}/inbox#token={ALICE}", s.base))
        .await
        .unwrap();
    wait_text(&c, "#who", |t| t.starts_with("alice")).await;
    assert_eq!(stored_token(&c).await, ALICE);
    assert!(!displayed(&c, "#notice").await);
    c.goto(&format!("{}/?view=sessions#token={ANA}", s.base))
        .await
        .unwrap();
    wait_text(&c, "#who", |t| t.starts_with("ana")).await;
    assert_eq!(stored_token(&c).await, ANA);

    // A bad link with nothing stored: the sign-in form says why.
    c.execute("localStorage.clear()", vec![]).await.unwrap();
    c.goto(&format!("{}/#token=stale-token", s.base))
        .await
        .unwrap();
    wait_text(&c, "#login-status", |t| {
        t.contains("The token in the link was not accepted")
    })
    .await;
    assert!(!displayed(&c, "#app").await);
    assert_eq!(stored_token(&c).await, Value::Null);

    let err: Value = c
        .execute("return window.__err || null", vec![])
        .await
        .unwrap();
    assert_eq!(err, Value::Null, "no script errors");
    c.close().await.unwrap();
}
