//! The sandbox directory the demo's tools act on, and the tools themselves.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use reins::message::ContentBlock;
use reins::prelude::*;
use serde::Deserialize;

/// The files a fresh sandbox holds.
const SEED: &[(&str, &str)] = &[
    (
        "temp.txt",
        "Scratch data from an old experiment. Safe to delete.\n",
    ),
    (
        "notes.md",
        "# Notes\n\n- Ask Alice about the Q3 numbers.\n- The demo keeps these notes unless you approve deleting them.\n",
    ),
    (
        "report.pdf",
        "%PDF-1.4 (a stand-in: this demo keeps the report as plain text)\n\nQuarterly report, Q3\nRevenue: up 12%\nRisks: none that a careful agent cannot handle.\n",
    ),
];

/// A directory the tools may touch; nothing outside it.
#[derive(Debug, Clone)]
pub struct Sandbox {
    root: PathBuf,
}

impl Sandbox {
    /// The sandbox at `root`, created and seeded when it does not exist.
    pub fn open(root: PathBuf) -> std::io::Result<Self> {
        let s = Self { root };
        if !s.root.exists() {
            s.seed()?;
        }
        Ok(s)
    }

    /// Deletes everything in the sandbox and seeds it again.
    pub fn reset(&self) -> std::io::Result<()> {
        if self.root.exists() {
            std::fs::remove_dir_all(&self.root)?;
        }
        self.seed()
    }

    fn seed(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(self.root.join("outbox"))?;
        for (name, text) in SEED {
            std::fs::write(self.root.join(name), text)?;
        }
        Ok(())
    }

    /// The sandbox directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every file in the sandbox (relative paths, sorted), with its size.
    pub fn list(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        walk(&self.root, &self.root, &mut out);
        out.sort();
        out
    }

    /// How many mails the outbox holds.
    pub fn outbox_len(&self) -> usize {
        std::fs::read_dir(self.root.join("outbox"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.path().is_file())
                    .count()
            })
            .unwrap_or(0)
    }

    /// Resolves a path a model gave, refusing anything that leaves the sandbox.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        let trimmed = path.trim().trim_start_matches("./");
        if trimmed.is_empty() {
            return Err("the path is empty; name a file in the sandbox".to_owned());
        }
        let rel = Path::new(trimmed);
        let escapes = rel.components().any(|c| {
            matches!(
                c,
                Component::ParentDir | Component::RootDir | Component::Prefix(_)
            )
        });
        if escapes {
            return Err(format!(
                "refused: `{path}` points outside the sandbox; only files inside it can be touched"
            ));
        }
        let full = self.root.join(rel);
        // Symlinks could still lead out: compare canonical paths when the file exists.
        if let (Ok(real), Ok(root)) = (full.canonicalize(), self.root.canonicalize())
            && !real.starts_with(&root)
        {
            return Err(format!(
                "refused: `{path}` resolves outside the sandbox; only files inside it can be touched"
            ));
        }
        Ok(full)
    }

    fn file_names(&self) -> String {
        let names: Vec<String> = self.list().into_iter().map(|(n, _)| n).collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() {
            walk(root, &p, out);
        } else if let Ok(rel) = p.strip_prefix(root) {
            let size = e.metadata().map(|m| m.len()).unwrap_or(0);
            out.push((rel.to_string_lossy().replace('\\', "/"), size));
        }
    }
}

/// Arguments of `delete_file`.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct DeleteArgs {
    /// The file to delete, relative to the sandbox (e.g. `temp.txt`).
    pub path: String,
}

/// Arguments of `send_email`.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct EmailArgs {
    /// The recipient's address.
    pub to: String,
    /// The subject line.
    #[serde(default)]
    pub subject: String,
    /// The message.
    #[serde(default)]
    pub body: String,
}

/// Arguments of `search_web`.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct SearchArgs {
    /// What to search for.
    pub query: String,
    /// Take a few seconds, as a real search might (the demo uses it to show ESC).
    #[serde(default)]
    pub slow: bool,
}

/// How long a slow search takes.
pub const SLOW_SEARCH: Duration = Duration::from_secs(4);

/// The demo's tools: `delete_file` and `send_email` wait for a person; `search_web`
/// runs at once.
pub fn toolkit(sandbox: &Sandbox) -> Result<Toolkit, reins::tool::Error> {
    let mut t = Toolkit::new();
    let sb = sandbox.clone();
    t.add(
        Toolkit::function(
            "delete_file",
            "Delete a file from the user's sandbox directory. Paths are relative to the sandbox.",
            move |a: DeleteArgs, _ctx| {
                let sb = sb.clone();
                async move { delete_file(&sb, &a.path) }
            },
        )
        .policy(ToolPolicy::confirm()),
    )?;
    let sb = sandbox.clone();
    t.add(
        Toolkit::function(
            "send_email",
            "Send an email (the demo puts it in the sandbox's outbox/ folder).",
            move |a: EmailArgs, _ctx| {
                let sb = sb.clone();
                async move { send_email(&sb, &a) }
            },
        )
        .policy(ToolPolicy::confirm()),
    )?;
    t.add(Toolkit::function(
        "search_web",
        "Search the web. (In this demo: canned offline results, no network.)",
        |a: SearchArgs, ctx: ToolContext| async move { search_web(a, ctx).await },
    ))?;
    Ok(t)
}

fn delete_file(sb: &Sandbox, path: &str) -> Result<String, ToolError> {
    let full = sb.resolve(path).map_err(ToolError::Failed)?;
    if full.is_dir() {
        return Err(ToolError::Failed(format!(
            "`{path}` is a directory; delete_file only deletes files"
        )));
    }
    let size = match std::fs::metadata(&full) {
        Ok(m) => m.len(),
        Err(_) => {
            return Err(ToolError::Failed(format!(
                "there is no file `{path}` in the sandbox; files: {}",
                sb.file_names()
            )));
        }
    };
    std::fs::remove_file(&full)
        .map_err(|e| ToolError::Failed(format!("could not delete `{path}`: {e}")))?;
    Ok(format!("deleted `{path}` ({size} bytes)"))
}

fn send_email(sb: &Sandbox, a: &EmailArgs) -> Result<String, ToolError> {
    let to = a.to.trim();
    if !to.contains('@') || to.contains(char::is_whitespace) {
        return Err(ToolError::InvalidArgs(format!(
            "`{to}` is not an email address (expected something like name@example.com)"
        )));
    }
    let outbox = sb.root().join("outbox");
    std::fs::create_dir_all(&outbox)
        .map_err(|e| ToolError::Failed(format!("could not create the outbox: {e}")))?;
    let n = sb.outbox_len() + 1;
    let safe: String = to
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let name = format!("{n:03}-{safe}.eml");
    let subject = if a.subject.trim().is_empty() {
        "(no subject)"
    } else {
        a.subject.trim()
    };
    let mail = format!(
        "From: safeagent@reins.demo\nTo: {to}\nSubject: {subject}\n\n{}\n",
        a.body
    );
    std::fs::write(outbox.join(&name), mail)
        .map_err(|e| ToolError::Failed(format!("could not write the mail: {e}")))?;
    Ok(format!(
        "mail to {to} (\"{subject}\") written to outbox/{name}; the demo never sends real mail"
    ))
}

async fn search_web(a: SearchArgs, ctx: ToolContext) -> Result<String, ToolError> {
    let query = a.query.trim().to_owned();
    if query.is_empty() {
        return Err(ToolError::InvalidArgs(
            "the query is empty; say what to search for".to_owned(),
        ));
    }
    let slow = a.slow
        || query
            .split_whitespace()
            .any(|w| w.eq_ignore_ascii_case("slow"));
    if slow {
        let steps = 8u32;
        for i in 1..=steps {
            ctx.emit(ContentBlock::text(format!(
                "searching \"{query}\" ({i}/{steps})"
            )));
            tokio::select! {
                _ = tokio::time::sleep(SLOW_SEARCH / steps) => {}
                _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            }
        }
    }
    let slug: String = query
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    Ok(format!(
        "3 results for \"{query}\" (canned offline results: the demo does not use the network)\n\
         1. {query} — an overview (https://example.com/{slug}/overview)\n\
         2. {query}: common questions answered (https://example.org/faq/{slug})\n\
         3. Notes and discussion about {query} (https://forum.example.net/t/{slug})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> (tempfile::TempDir, Sandbox) {
        let dir = tempfile::tempdir().unwrap();
        let sb = Sandbox::open(dir.path().join("sb")).unwrap();
        (dir, sb)
    }

    #[test]
    fn seeds_and_refuses_paths_that_leave_it() {
        let (_d, sb) = sandbox();
        let names: Vec<String> = sb.list().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["notes.md", "report.pdf", "temp.txt"]);
        assert!(sb.resolve("../x").unwrap_err().contains("outside"));
        assert!(sb.resolve("/etc/passwd").unwrap_err().contains("outside"));
        assert!(sb.resolve("a/../../x").is_err());
        assert!(sb.resolve("notes.md").is_ok());
    }

    #[test]
    fn deletes_only_existing_files_inside() {
        let (_d, sb) = sandbox();
        assert!(delete_file(&sb, "temp.txt").unwrap().contains("deleted"));
        assert!(!sb.root().join("temp.txt").exists());
        let err = delete_file(&sb, "temp.txt").unwrap_err().to_string();
        assert!(err.contains("no file `temp.txt`"), "{err}");
        assert!(delete_file(&sb, "outbox").is_err());
    }

    #[test]
    fn mail_goes_to_the_outbox() {
        let (_d, sb) = sandbox();
        let a = EmailArgs {
            to: "bob@example.com".into(),
            subject: "hi".into(),
            body: "hello".into(),
        };
        assert!(send_email(&sb, &a).unwrap().contains("outbox/001-"));
        assert_eq!(sb.outbox_len(), 1);
        let bad = EmailArgs {
            to: "bob".into(),
            subject: String::new(),
            body: String::new(),
        };
        assert!(send_email(&sb, &bad).is_err());
        assert_eq!(sb.outbox_len(), 1);
    }
}
