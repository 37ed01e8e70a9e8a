//! The webhooks view, in a real Chromium: an admin sees each subscriber with its
//! deliveries and the outcome of every attempt (a 500 retried then delivered; a
//! subscriber that is down, dead after its attempts), and redelivers the dead one.
//! Its screenshot is `webhook-deliveries.png`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::StatusCode;
use reins_memory::DeliveryFilter;
use reins_server::notify::NotifyOptions;

use super::*;

/// A receiver on a loopback port answering 500 to its first request, then 200.
async fn flaky_receiver() -> (String, tokio::task::JoinHandle<()>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let hits = Arc::clone(&hits);
            async move {
                if hits.fetch_add(1, Ordering::SeqCst) == 0 {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_delivery_log_in_a_real_browser() {
    let Some((chromium, chromedriver)) =
        chromium_or_skip("the_webhook_delivery_log_in_a_real_browser")
    else {
        return;
    };
    let shots = Shots::new();
    let s = start_with(|s| {
        s.notify_options(
            NotifyOptions::default()
                .max_attempts(2)
                .backoff(Duration::from_millis(50), Duration::from_millis(100))
                .poll_interval(Duration::from_millis(100)),
        )
    })
    .await;
    let (good, receiver) = flaky_receiver().await;
    // Nothing listens on a port just freed.
    let down = format!("http://127.0.0.1:{}/hook", free_port());
    for (url, what) in [
        (&good, "the team's approvals bot"),
        (&down, "an old endpoint"),
    ] {
        let (st, out) = s
            .post(
                ADMIN,
                "/v1/webhooks",
                json!({"url": url, "event_types": ["requirement.waiting"], "description": what}),
            )
            .await;
        assert_eq!(st, 201, "{out}");
    }
    pause(&s, "alice/hooks-1", "delete report.txt").await;
    let store = s.agent.store().clone();
    let settled = || async {
        let ds = store.deliveries(&DeliveryFilter::all()).await.unwrap();
        ds.len() == 2
            && ds
                .iter()
                .all(|d| d.state != reins_memory::DeliveryState::Pending)
    };
    let started = Instant::now();
    while !settled().await {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "deliveries never settled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    c.goto(&format!("{}/?view=webhooks#token={ADMIN}", s.base))
        .await
        .unwrap();
    let delivered = ".wh-delivery[data-state=\"delivered\"]";
    let dead = ".wh-delivery[data-state=\"dead\"]";
    c.wait().for_element(Locator::Css(delivered)).await.unwrap();
    c.wait().for_element(Locator::Css(dead)).await.unwrap();
    let text = wait_text(&c, delivered, |t| t.contains("#2")).await;
    assert!(text.contains("#1") && text.contains("HTTP 500"), "{text}");
    let text = wait_text(&c, dead, |t| t.contains("could not connect")).await;
    assert!(text.contains("gave up after 2 attempts"), "{text}");
    shots.take(&c, "webhook-deliveries.png").await;

    // Redeliver the dead one: a third attempt is made (and fails the same way).
    c.find(Locator::Css(&format!("{dead} button.redeliver")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, &format!("{dead} .status"), |t| {
        t.contains("Queued again")
    })
    .await;
    let started = Instant::now();
    loop {
        let ds = store
            .deliveries(&DeliveryFilter::all().destination_prefix("webhook:"))
            .await
            .unwrap();
        if ds
            .iter()
            .any(|d| d.attempts == 3 && d.state == reins_memory::DeliveryState::Dead)
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no third attempt: {ds:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The nav link shows for admins only.
    let c2 = c;
    c2.goto(&format!("{}/#token={ANA}", s.base)).await.unwrap();
    wait_text(&c2, "#who", |t| t.contains("ana")).await;
    let shown = c2
        .find(Locator::Css("#nav-webhooks"))
        .await
        .unwrap()
        .is_displayed()
        .await
        .unwrap();
    assert!(!shown);
    c2.close().await.unwrap();
    receiver.abort();
}
