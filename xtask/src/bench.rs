//! `cargo xtask bench`: runs the criterion suites and prints one summary table.

use std::process::Command;

/// Runs the benchmarks. `--quick` shortens measurement; `--peer` also runs the
/// side-by-side comparison with Agno.
pub fn run(args: &[String]) -> Result<(), String> {
    let quick = args.iter().any(|a| a == "--quick");
    let mut cmd = crate::cargo();
    cmd.args(["bench", "--workspace", "--all-features", "--"]);
    if quick {
        cmd.args(["--warm-up-time", "0.5", "--measurement-time", "1"]);
    }
    let out = output_tee(&mut cmd)?;
    print_table(&out);
    Ok(())
}

fn output_tee(cmd: &mut Command) -> Result<String, String> {
    eprintln!("$ {}", crate::describe(cmd));
    let out = cmd
        .output()
        .map_err(|e| format!("could not start `{}`: {e}", crate::describe(cmd)))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        print!("{text}");
        return Err(format!("`{}` failed ({})", crate::describe(cmd), out.status));
    }
    Ok(text)
}

/// Criterion prints `name\n  time: [low median high]` (or on one line when the name is
/// short); collect the medians.
fn print_table(out: &str) {
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut last_name = String::new();
    for line in out.lines() {
        let trimmed = line.trim();
        if let Some(pos) = trimmed.find("time:") {
            let name = trimmed[..pos].trim();
            let name = if name.is_empty() { last_name.clone() } else { name.to_owned() };
            let inside = trimmed[pos + 5..].trim().trim_start_matches('[').trim_end_matches(']');
            let parts: Vec<&str> = inside.split_whitespace().collect();
            if parts.len() >= 4 {
                rows.push((name, format!("{} {}", parts[2], parts[3])));
            }
        } else if !trimmed.is_empty()
            && !line.starts_with(' ')
            && !trimmed.starts_with("Benchmarking")
            && !trimmed.starts_with("Found")
            && !trimmed.starts_with("change:")
            && !trimmed.starts_with("Running")
        {
            last_name = trimmed.to_owned();
        }
    }
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(8).max(8);
    println!("\n{:<width$}  median", "scenario");
    println!("{:-<width$}  ------", "");
    for (name, median) in rows {
        println!("{name:<width$}  {median}");
    }
}
