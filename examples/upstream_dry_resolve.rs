//! Dry-resolves every `*.json` in a folder of RCCL `test_runner` configs and
//! prints a Markdown table: tests, how many a 1-node / 8-GPU machine would
//! ignore and why, and every warning. Used to fill `docs/upstream-configs.md`.
//!
//! ```sh
//! cargo run --example upstream_dry_resolve -- /tmp/upstream-configs
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)] // a bench or test prints what it measured or why it failed

use ccl_coverage::upstream::{self, Machine};
use std::collections::BTreeMap;
use std::path::Path;

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: upstream_dry_resolve <folder of test_runner configs>");
        std::process::exit(2);
    };
    let mut files: Vec<_> = match std::fs::read_dir(&dir) {
        Ok(entries) => {
            entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "json")).collect()
        }
        Err(e) => {
            eprintln!("cannot list {dir}: {e}");
            std::process::exit(2);
        }
    };
    files.sort();
    // A fixed environment, so the table does not depend on this machine.
    let env = |name: &str| match name {
        "PWD" | "WORKDIR" => Some("/work/rccl".to_string()),
        "HOME" => Some("/home/dev".to_string()),
        _ => None,
    };
    let machine = Machine { nodes: 1, gpus_per_node: Some(8) };
    println!("| config | suites | tests | ignored on 1 node × 8 GPUs | warnings |");
    println!("|---|---|---|---|---|");
    let mut details = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap_or_default().to_string_lossy().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                println!("| {name} | – | – | – | cannot read: {e} |");
                continue;
            }
        };
        match upstream::resolve(Path::new(&name), &text, &env) {
            Ok(r) => {
                let mut why: BTreeMap<String, usize> = BTreeMap::new();
                for t in &r.tests {
                    if let Some(reason) = t.ignore_reason(&machine) {
                        let reason = if reason.starts_with("suite `") { "suite disabled".to_string() } else { reason };
                        *why.entry(reason).or_default() += 1;
                    }
                }
                let suites = r.tests.iter().map(|t| &t.suite).collect::<std::collections::BTreeSet<_>>().len();
                let ignored: usize = why.values().sum();
                let reasons: Vec<String> = why.iter().map(|(r, n)| format!("{n}: {r}")).collect();
                println!(
                    "| {name} | {suites} | {} | {ignored} ({}) | {} |",
                    r.tests.len(),
                    if reasons.is_empty() { "none".into() } else { reasons.join("; ") },
                    r.warnings.len()
                );
                details.push((
                    name,
                    r.warnings.iter().map(|w| format!("`{}`: {}", w.json_path, w.message)).collect::<Vec<_>>(),
                ));
            }
            Err(e) => println!("| {name} | – | – | – | error: {e} |"),
        }
    }
    for (name, warnings) in details.into_iter().filter(|(_, w)| !w.is_empty()) {
        println!("\n### {name}\n");
        for w in warnings {
            println!("- {w}");
        }
    }
}
