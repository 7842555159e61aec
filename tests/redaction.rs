//! Secrets given to trials (secret-looking variables, URL passwords, values
//! on the launcher's command line) reach the trial but no record: no file of
//! the workspace (logs, results, `run.json`, `junit.xml`, profiles), no
//! harness output, no dry run. The trial's "perf binary" is
//! `tests/fixtures/record-env.sh`, which writes what it received to a folder
//! outside the workspace and then runs the real perf binary.

mod support;

use serde_json::{Value, json};
use std::fs;
use std::time::Duration;
use support::{files_under, harness, only, processes_mentioning, result, root, setup};

/// Every secret of the config below; none may be recorded.
const SECRETS: &[&str] = &["hunter2-secret", "pw-secret", "pw-arg-secret", "argkey-secret", "pw2-secret"];
const LIMIT: Duration = Duration::from_secs(600);

fn config(v: &mut Value, record_dir: &str) {
    let env = json!({"MY_API_TOKEN": "hunter2-secret", "DB_URL": "postgres://u:pw-secret@h/db"});
    let args = json!(["--db-url=postgres://u:pw-arg-secret@h/db", "API_KEY=argkey-secret"]);
    only(
        v,
        "AllReduce",
        &["1K"],
        json!([
            {"name": "threads", "ranks": 2, "env": env, "args": args},
            {"name": "crash", "ranks": 2, "env": {"MY_API_TOKEN": "hunter2-secret", "CCL_FAULT": "crash"}, "args": args},
            {"name": "mpi", "launcher": "mpisecret", "ranks": 3, "env": env},
            {"name": "mpich", "launcher": "mpich", "ranks": 2, "env": env}
        ]),
    );
    v["collectives"][0]["binary"] = json!(root().join("tests/fixtures/record-env.sh").display().to_string());
    v["collectives"][0]["env"] = json!({"CCL_E2E_PERF": "{bin_dir}/all_reduce_perf", "CCL_E2E_RECORD_DIR": record_dir});
    // Open MPI's -x NAME=VALUE puts a value on the launcher's command line.
    v["launchers"]["mpisecret"] = json!({
        "kind": "mpirun", "flavor": "openmpi",
        "args": ["--oversubscribe", "--bind-to", "none", "-x", "EXTRA_PASSWORD=pw2-secret"],
        "program_args": ["-t", "1", "-g", "1"]
    });
    // MPICH forwards every variable as `-genv NAME VALUE` (dry run only: no MPICH here).
    v["launchers"]["mpich"] = json!({
        "kind": "mpirun", "flavor": "mpich", "program": "mpiexec.hydra", "program_args": ["-t", "1", "-g", "1"]
    });
    v["timeouts"] = json!({"default": 60, "grace": 2});
}

fn assert_no_secret(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} shows the secret {secret:?}:\n{text}");
    }
}

#[test]
fn secrets_reach_the_trial_but_no_record() {
    let records = tempfile::tempdir().unwrap();
    let mut s = setup(|v| config(v, &records.path().display().to_string()));

    let ran = harness(&s, "collectives", &["--skip", "::mpich", "--test-threads", "1"], LIMIT);
    let out = ran.text();
    assert!(!ran.success, "the crash trial fails: {out}");
    assert_eq!(result(&s, "AllReduce.1K.threads")["status"], "PASSED", "{out}");
    assert_eq!(result(&s, "AllReduce.1K.mpi")["status"], "PASSED", "{out}");
    assert_eq!(result(&s, "AllReduce.1K.crash")["status"], "FAILED", "{out}");
    // The failure message shows the command line, redacted.
    assert!(out.contains("command: cd ") && out.contains("MY_API_TOKEN='***'"), "{out}");
    assert_no_secret("the harness's output", &out);

    // The trials really received every secret.
    let received: Vec<String> = files_under(records.path()).iter().map(|p| fs::read_to_string(p).unwrap()).collect();
    assert_eq!(received.len(), 1 + 1 + 3, "one record per process (threads, crash, 3 MPI ranks): {received:?}");
    for r in &received {
        assert!(r.contains("MY_API_TOKEN=hunter2-secret\n"), "{r}");
    }
    let with = |needle: &str| received.iter().filter(|r| r.contains(needle)).count();
    assert_eq!(with("DB_URL=postgres://u:pw-secret@h/db\n"), 4, "{received:?}");
    assert_eq!(with("EXTRA_PASSWORD=pw2-secret\n"), 3, "launcher argv reaches the ranks: {received:?}");
    assert_eq!(with("--db-url=postgres://u:pw-arg-secret@h/db API_KEY=argkey-secret"), 2, "{received:?}");

    // No file of the workspace holds any of them.
    let files = files_under(&s.ws);
    for name in ["results/run.json", "results/junit.xml", "logs/AllReduce.1K.mpi.log", "results/AllReduce.1K.mpi.json"]
    {
        assert!(files.contains(&s.ws.join(name)), "{name} missing: {files:?}");
    }
    for file in &files {
        let bytes = fs::read(file).unwrap();
        for secret in SECRETS {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds the secret {secret:?}:\n{}",
                file.display(),
                String::from_utf8_lossy(&bytes)
            );
        }
    }

    // What is recorded is still useful: masked values, the rest as it was.
    let threads = result(&s, "AllReduce.1K.threads");
    let env = threads["env"].as_array().unwrap();
    assert!(env.contains(&json!(["MY_API_TOKEN", "***"])), "{threads}");
    assert!(env.contains(&json!(["DB_URL", "postgres://u:***@h/db"])), "{threads}");
    assert!(env.iter().any(|kv| kv[0] == "CCL_COV_TRIAL_TOKEN" && kv[1] != "***"), "the trial marker stays: {threads}");
    let argv = threads["argv"].as_array().unwrap();
    assert!(
        argv.contains(&json!("--db-url=postgres://u:***@h/db")) && argv.contains(&json!("API_KEY=***")),
        "{threads}"
    );
    assert!(result(&s, "AllReduce.1K.mpi")["argv"].as_array().unwrap().contains(&json!("EXTRA_PASSWORD=***")));
    let log = fs::read_to_string(s.ws.join("logs/AllReduce.1K.threads.log")).unwrap();
    assert!(log.starts_with("$ cd ") && log.lines().next().unwrap().contains("MY_API_TOKEN='***'"), "{log}");
    let junit = fs::read_to_string(s.ws.join("results/junit.xml")).unwrap();
    assert!(junit.contains("MY_API_TOKEN=&apos;***&apos;") || junit.contains("MY_API_TOKEN='***'"), "{junit}");

    let survivors = processes_mentioning(&s.ws.display().to_string());
    assert!(survivors.is_empty(), "processes of the trials survive: {survivors:?}");

    // The dry run, MPICH included (values on the command line), shows no secret.
    s.env.push(("CCL_COV_DRY_RUN".into(), "1".into()));
    let dry = harness(&s, "collectives", &[], LIMIT);
    assert!(dry.success, "{}", dry.text());
    assert_no_secret("the dry run", &dry.text());
    assert!(dry.stdout.contains("-genv MY_API_TOKEN '***'"), "{}", dry.stdout);
    assert!(dry.stdout.contains("-genv DB_URL 'postgres://u:***@h/db'"), "{}", dry.stdout);
    assert!(dry.stdout.contains("env: MY_API_TOKEN='***'"), "{}", dry.stdout);
}

/// Key-like names are masked, not every name that contains KEY; users add
/// their own patterns with `CCL_COV_REDACT`. Seen in the dry run, text and JSON.
#[test]
fn key_like_names_are_masked_and_a_partition_key_is_not() {
    let mut s = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "keys", "ranks": 1}]));
        v["env"] = json!({
            "NCCL_IB_PKEY": "0x8001",
            "AWS_SECRET_ACCESS_KEY": "aws-secret",
            "HF_TOKEN": "hf-secret",
            "DATABASE_DSN": "postgres://user:dsn-secret@db.example/ci",
            "SITE_ORG_ID": "org-secret",
            "KEYBOARD": "us"
        });
    });
    s.env.push(("CCL_COV_REDACT".into(), "site_*_id".into()));
    s.env.push(("CCL_COV_DRY_RUN".into(), "1".into()));
    let dry = harness(&s, "collectives", &[], LIMIT);
    assert!(dry.success, "{}", dry.text());
    for secret in ["aws-secret", "hf-secret", "dsn-secret", "org-secret"] {
        assert!(!dry.text().contains(secret), "the dry run shows {secret:?}:\n{}", dry.text());
    }
    for line in [
        "env: NCCL_IB_PKEY=0x8001",
        "env: KEYBOARD=us",
        "env: AWS_SECRET_ACCESS_KEY='***'",
        "env: HF_TOKEN='***'",
        "env: SITE_ORG_ID='***'",
        "env: DATABASE_DSN='postgres://user:***@db.example/ci'",
    ] {
        assert!(dry.stdout.contains(line), "{line}:\n{}", dry.stdout);
    }
    s.env.push(("CCL_COV_DRY_RUN".into(), "json".into()));
    let json_run = harness(&s, "collectives", &[], LIMIT);
    let plan: Value = serde_json::from_str(&json_run.stdout).unwrap_or_else(|e| panic!("{e}: {}", json_run.text()));
    let env = &plan["trials"][0]["env"];
    assert_eq!(env["NCCL_IB_PKEY"], "0x8001", "{env}");
    assert_eq!(env["HF_TOKEN"], "***", "{env}");
}
