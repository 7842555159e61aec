//! No name can drive the terminal (issue #40, item 7): a workspace path and a
//! config `env` value holding escape sequences (an OSC title, a screen clear,
//! BEL, a carriage return) reach the screen only as visible `\u{…}` text,
//! through the one reporter (`src/reporter.rs`), in `show-env`, the dry run,
//! a real run with `-v` (each trial's command line) and its report, libtest's failure block,
//! and a source file's name in the totals' "least covered files".

mod support;

use serde_json::json;
use std::time::Duration;

/// An OSC window title ended by BEL, a clear screen and a carriage return.
const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\r";
const SHOWN: &str = "\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{d}";

/// What a person's terminal would get: no byte that starts a sequence or rings.
fn assert_clean(what: &str, text: &str) {
    let bad: Vec<_> = text.char_indices().filter(|(_, c)| matches!(c, '\u{1b}' | '\u{7}' | '\r' | '\u{9b}')).collect();
    assert!(bad.is_empty(), "{what} sent control bytes at {bad:?}:\n{text}");
}

#[test]
fn escape_sequences_in_names_reach_the_terminal_only_as_text() {
    let mut s = support::setup(|v| {
        support::only(
            v,
            "AllReduce",
            &["1K"],
            json!([
                { "name": "ring", "env": { "CCL_ALGO": "ring" } },
                { "name": "bad", "env": { "CCL_FAULT": "exit-nonzero" } }
            ]),
        );
        v["env"]["CCL_COV_TEST_TITLE"] = json!(HOSTILE);
    });
    s.ws = s.dir.path().join(format!("ws{HOSTILE}x"));

    let env = support::output_within(support::command(&s, "show-env", &[]), Duration::from_secs(60));
    let env_text = String::from_utf8_lossy(&env.stdout).into_owned() + &String::from_utf8_lossy(&env.stderr);
    assert!(env.status.success(), "{env_text}");
    assert_clean("show-env", &env_text);
    assert!(env_text.contains(&format!("ws{SHOWN}x")), "the workspace is named, shown: {env_text}");

    let mut dry = support::command(&s, "run", &[]);
    dry.env("CCL_COV_DRY_RUN", "1");
    let dry = support::output_within(dry, Duration::from_secs(60));
    let dry_text = String::from_utf8_lossy(&dry.stdout).into_owned() + &String::from_utf8_lossy(&dry.stderr);
    assert!(dry.status.success(), "{dry_text}");
    assert_clean("the dry run", &dry_text);
    assert!(dry_text.contains(SHOWN), "the env value is shown: {dry_text}");

    // libtest's failure block of a failed trial names the workspace: shown, not sent.
    let mut failing = support::command(&s, "collectives", &["AllReduce::1K::bad"]);
    failing.env("CCL_COV_TRIAL_FILTER", "1");
    let failed = support::output_within(failing, Duration::from_secs(600));
    let failed_text = String::from_utf8_lossy(&failed.stdout).into_owned() + &String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "{failed_text}");
    assert!(failed_text.contains("---- AllReduce::1K::bad ----"), "libtest's failure block: {failed_text}");
    assert_clean("a failed trial's message", &failed_text);
    assert!(failed_text.contains(&format!("ws{SHOWN}x/")), "the workspace is named, shown: {failed_text}");

    let run =
        support::output_within(support::command(&s, "run", &["-v", "AllReduce::1K::ring"]), Duration::from_secs(600));
    let run_text = String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{run_text}");
    assert_clean("run -v", &run_text);
    assert!(run_text.contains(&format!("CCL_COV_TEST_TITLE='{SHOWN}'")), "-v shows the command line: {run_text}");
    assert!(run_text.contains(&format!("ws{SHOWN}x/report")), "the report's paths are shown: {run_text}");
}

/// The third place of issue #40: a source file's name in the totals' "least covered files".
/// A copy of the fixture library includes a header whose name holds the escape sequences,
/// with a function no trial calls, so it is among the least covered.
#[test]
fn a_source_file_name_reaches_least_covered_files_only_as_text() {
    let copy = tempfile::tempdir().unwrap();
    let fixtures = support::root().join("tests/fixtures");
    for lib in ["ccl", "ccl-tuner"] {
        let cp = std::process::Command::new("cp")
            .args(["-R", "--no-preserve=mode"])
            .arg(fixtures.join(lib))
            .arg(copy.path())
            .status()
            .unwrap();
        assert!(cp.success());
    }
    // No CR: it ends a line of C, so no #include can name it.
    let (hostile, shown) = ("\u{1b}]0;owned\u{7}\u{1b}[2J", "\\u{1b}]0;owned\\u{7}\\u{1b}[2J");
    let header = format!("0{hostile}.h");
    let src = copy.path().join("ccl/src");
    std::fs::write(
        src.join(&header),
        "inline int neverCalled(int x) {\n  if (x > 1) return x * 2;\n  return x + 1;\n}\n",
    )
    .unwrap();
    let debug = std::fs::read_to_string(src.join("debug.cc")).unwrap();
    std::fs::write(src.join("debug.cc"), format!("#include \"{header}\"\nint (*keepIt)(int) = neverCalled;\n{debug}"))
        .unwrap();
    let s = support::setup(|v| {
        support::only(v, "AllReduce", &["1K"], json!([{ "name": "ring", "env": { "CCL_ALGO": "ring" } }]));
        v["library"]["source_dir"] = json!(copy.path().display().to_string());
    });
    let run = support::output_within(support::command(&s, "run", &[]), Duration::from_secs(600));
    let run_text = String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{run_text}");
    assert_clean("the totals", &run_text);
    let least = &run_text[run_text.find("least covered files").expect("the totals list files")..];
    assert!(least.contains(&format!("ccl/src/0{shown}.h")), "the file is named, shown: {least}");
}
