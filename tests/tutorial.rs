//! docs/tutorial.md, run as written: its file blocks (```` ```c file=src/vec.c ````)
//! are written and its `sh` blocks run, in order, as one script in an empty
//! folder, with the real clang, make, CMake, googletest and LLVM tools and
//! this `ccl-coverage` on `PATH`; the totals each `text` block states must be
//! printed. A file block marked `fixture=<dir>` must be that file of
//! `tests/fixtures/<dir>/`, byte for byte. The workspaces it leaves hold only
//! what docs/layout.md names.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::{output_within, root, undocumented_workspace_entries};

const LIMIT: Duration = Duration::from_secs(540);

/// A fenced block: its info string and its text.
fn blocks(markdown: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```").filter(|i| !i.is_empty()) else { continue };
        let mut text = String::new();
        for body in lines.by_ref() {
            if body == "```" {
                break;
            }
            text.push_str(body);
            text.push('\n');
        }
        out.push((info.to_string(), text));
    }
    out
}

/// The tutorial as one bash script: a file block becomes a quoted heredoc
/// (its text written byte for byte), an `sh` block its own lines.
fn script(blocks: &[(String, String)]) -> String {
    let mut script = String::from("set -euo pipefail\n");
    for (info, text) in blocks {
        if let Some(file) = info.split_whitespace().find_map(|w| w.strip_prefix("file=")) {
            assert!(!text.contains("CCL_TUTORIAL_EOF"), "{file}");
            script.push_str(&format!("cat > {file} <<'CCL_TUTORIAL_EOF'\n{text}CCL_TUTORIAL_EOF\n"));
        } else if info == "sh" {
            script.push_str(text);
        }
    }
    script
}

#[test]
fn the_tutorial_runs_as_written_and_its_totals_hold() {
    let doc = std::fs::read_to_string(root().join("docs/tutorial.md")).unwrap();
    let blocks = blocks(&doc);
    let stated: Vec<String> = blocks
        .iter()
        .filter(|(info, _)| info == "text")
        .flat_map(|(_, text)| text.lines().filter(|l| l.starts_with("host ")).map(normalise).collect::<Vec<_>>())
        .collect();
    assert_eq!(stated.len(), 2, "the tutorial states its host totals once per project: {stated:?}");
    for (info, text) in &blocks {
        let word = |key: &str| info.split_whitespace().find_map(|w| w.strip_prefix(key)).map(str::to_string);
        if let (Some(file), Some(fixture)) = (word("file="), word("fixture=")) {
            let path = root().join("tests/fixtures").join(fixture).join(&file);
            let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(*text, on_disk, "the tutorial's {file} is not {}", path.display());
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_ccl-coverage")).parent().unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(script(&blocks)).current_dir(dir.path());
    for (key, _) in std::env::vars() {
        if key.starts_with("CCL_COV_") && key != "CCL_COV_CGROUP" || key == "GITHUB_STEP_SUMMARY" {
            cmd.env_remove(key);
        }
    }
    cmd.env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()));
    let out = output_within(cmd, LIMIT);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the tutorial's commands failed:\n{text}");
    let printed: Vec<String> = text.lines().filter(|l| l.starts_with("host ")).map(normalise).collect();
    for totals in &stated {
        assert!(printed.contains(totals), "the tutorial states {totals:?}; the run printed {printed:?}:\n{text}");
    }
    assert!(text.contains("3 of 3 trials ran: 3 passed, 0 failed"), "{text}");
    // The CMake project: no `tests` section, gtest, ctest, a plain and a sized program.
    assert!(text.contains("6 of 6 trials ran: 6 passed, 0 failed"), "{text}");
    let ring = dir.path().join("ring/target/ccl-coverage/ring");
    let push: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ring.join("results/push.json")).unwrap()).unwrap();
    assert_eq!(push["cases"].as_array().map(Vec::len), Some(3), "{push}");
    let undocumented = undocumented_workspace_entries(&ring);
    assert!(undocumented.is_empty(), "docs/layout.md names none of {undocumented:?}");

    // The workspace is beside the project, and documented file by file.
    let ws = dir.path().join("vec/target/ccl-coverage/vec");
    assert!(ws.join("report/html/index.html").is_file(), "no report in {}:\n{text}", ws.display());
    assert!(dir.path().join("vec/snapshots/coverage_summary-vec.snap").is_file());
    let undocumented = undocumented_workspace_entries(&ws);
    assert!(undocumented.is_empty(), "docs/layout.md names none of {undocumented:?}");
}

/// Totals lines compared as words: the columns' padding is the screen's.
fn normalise(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}
