//! The browser harness: Debian's Chromium and chromium-driver found (or the test
//! skipped outside CI), a WebDriver session, waits on the page, screenshots, and the
//! API calls the browser tests start from.

use super::*;

pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

pub(crate) fn find(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([
            PathBuf::from("/usr/bin"),
            PathBuf::from("/usr/lib/chromium"),
        ])
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

/// Chromium and chromedriver, or `None` after reporting `test` SKIPPED (a failure
/// under `CI=true`, which requires them).
pub(crate) fn chromium_or_skip(test: &str) -> Option<(PathBuf, PathBuf)> {
    let (Some(chromium), Some(chromedriver)) = (
        find(&["chromium", "chromium-browser", "google-chrome"]),
        find(&["chromedriver"]),
    ) else {
        let msg =
            "Chromium or chromedriver is not installed (apt-get install chromium chromium-driver)";
        if in_ci() {
            panic!("{msg}; CI requires them");
        }
        eprintln!("\n!!! SKIPPED {test}: {msg}\n");
        return None;
    };
    Some((chromium, chromedriver))
}

/// chromedriver on a loopback port, killed when dropped.
pub(crate) struct Driver {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn start_driver(driver: &Path) -> Driver {
    let port = free_port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "chromedriver did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Driver {
        child,
        port,
        _profile: tempfile::tempdir().unwrap(),
    }
}

pub(crate) async fn browser(driver: &Driver, chromium: &Path) -> Client {
    let profile = driver._profile.path().display().to_string();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "binary": chromium.display().to_string(),
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--disable-breakpad", "--disable-crash-reporter",
                "--window-size=1280,900",
                format!("--user-data-dir={profile}"),
            ]
        }),
    );
    // Plain HTTP to chromedriver on loopback: no TLS needed.
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a Chromium session")
}

/// Polls until the element's text satisfies `f` (30 s, then fails with what it saw).
pub(crate) async fn wait_text(c: &Client, css: &str, f: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(el) = c.find(Locator::Css(css)).await
            && let Ok(t) = el.text().await
        {
            if f(&t) {
                return t;
            }
            last = t;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = c
        .execute(
            "const e = document.querySelector(arguments[0]); \
             return (e ? e.outerHTML : 'missing') + ' | page errors: ' + (window.__err || 'none')",
            vec![json!(css)],
        )
        .await;
    panic!("`{css}` never showed the expected text; last: {last:?}; {page:?}");
}

pub(crate) async fn wait_enabled(c: &Client, css: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(el) = c.find(Locator::Css(css)).await
            && el.is_enabled().await.unwrap_or(false)
            && el.is_displayed().await.unwrap_or(false)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("`{css}` never became enabled");
}

/// Where the screenshots go: `docs/screenshots/` (the ones docs/server.md shows) when
/// `REINS_WRITE_SCREENSHOTS` is set to anything but `0` or empty, a temporary directory
/// otherwise.
pub(crate) struct Shots {
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Shots {
    pub(crate) fn new() -> Self {
        let write =
            std::env::var("REINS_WRITE_SCREENSHOTS").is_ok_and(|v| !v.is_empty() && v != "0");
        if write {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots");
            std::fs::create_dir_all(&dir).unwrap();
            eprintln!("browser: writing the screenshots to {}", dir.display());
            Self { dir, _tmp: None }
        } else {
            let tmp = tempfile::tempdir().unwrap();
            Self {
                dir: tmp.path().to_path_buf(),
                _tmp: Some(tmp),
            }
        }
    }

    /// Takes a screenshot of the page and writes it as `name`.
    pub(crate) async fn take(&self, c: &Client, name: &str) {
        let png = c.screenshot().await.unwrap();
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{name}: the screenshot is not a PNG ({} bytes)",
            png.len()
        );
        std::fs::write(self.dir.join(name), png).unwrap();
    }
}

pub(crate) fn card(rid: &str) -> String {
    format!(".req-card[data-req=\"{rid}\"]")
}

pub(crate) async fn pause(s: &TestServer, session: &str, text: &str) -> String {
    let (st, out) = s
        .post(
            ALICE,
            &format!("/v1/sessions/{}/runs", enc(session)),
            json!({"message": text}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    out["requirements"][0]["id"].as_str().unwrap().to_owned()
}
