//! Secrets never reach a record. Trials and build steps get the real
//! environment and arguments; every place that *writes them down* (trial logs'
//! command line, `results/<trial>.json`, `run.json`, JUnit, the dry run, error
//! messages) goes through these functions first.
//!
//! What counts as a secret:
//! - the value of a variable (or option) whose name matches one of
//!   [`SECRET_PATTERNS`] or of the patterns in `CCL_COV_REDACT`: key-like
//!   names, not every name that contains KEY (`NCCL_IB_PKEY` is InfiniBand's
//!   partition key, and a dry run that shows `***` where the trial gets `0`
//!   hides what matters). The one exception is the harness's own trial marker
//!   ([`crate::env_names::TRIAL_TOKEN`]): it is no secret, and tools find a
//!   trial's processes by it, so records must show it;
//! - the password of a URL or DSN, anywhere in a value or argument:
//!   `postgres://user:pw@host/db` becomes `postgres://user:***@host/db`.
//!
//! In argv, the launcher forms that carry values are understood: `NAME=VALUE`
//! (also `-x NAME=VALUE`, `--password=VALUE`), MPICH's `-genv NAME VALUE` /
//! `-env NAME VALUE`, and srun's `--export=A=1,B=2`.

use crate::env_names::{REDACT, TRIAL_TOKEN};
use crate::error::{Context, Result};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use std::sync::OnceLock;

/// What a secret is replaced with.
pub(crate) const MASK: &str = "***";

/// Glob patterns (any case) of the names whose values are secrets. A name
/// is matched as it is and with `-` and `.` read as `_`, so `--api-key` is
/// `API_KEY`.
/// A name *ending* in `_KEY` is masked (`SSH_KEY`, `AWS_SECRET_ACCESS_KEY`),
/// as are the usual key words anywhere (`OPENAI_API_KEY_2`,
/// `AWS_ACCESS_KEY_ID`); `PKEY` and `KEYBOARD` are not keys.
pub(crate) const SECRET_PATTERNS: &[&str] = &[
    "*TOKEN*",
    "*PASSWORD*",
    "*PASSWD*",
    "*PASSPHRASE*",
    "*SECRET*",
    "*CREDENTIAL*",
    "KEY",
    "KEY_*",
    "*_KEY",
    "*_KEY_*",
    "*_KEYS",
    "*API_KEY*",
    "*APIKEY*",
    "*PRIVATE_KEY*",
    "*PRIVATEKEY*",
    "*ACCESS_KEY*",
    "*ACCESSKEY*",
    "*AUTH_KEY*",
    "*_AUTH",
];

/// Which names are secret: [`SECRET_PATTERNS`] and a user's own.
#[derive(Debug)]
pub(crate) struct Rules(GlobSet);

impl Rules {
    /// The default patterns and the comma-separated `extra` ones (the form
    /// of `CCL_COV_REDACT`).
    pub(crate) fn with(extra: &str) -> Result<Rules> {
        let mut set = GlobSetBuilder::new();
        let extra = extra.split(',').map(str::trim).filter(|p| !p.is_empty());
        for pattern in SECRET_PATTERNS.iter().copied().chain(extra) {
            let glob = GlobBuilder::new(pattern)
                .case_insensitive(true)
                .build()
                .with_context(|| format!("{REDACT}: {pattern:?} is not a glob pattern"))?;
            set.add(glob);
        }
        set.build().map(Rules).context(REDACT)
    }

    /// Whether the value of variable (or option) `name` is a secret.
    pub(crate) fn is_secret(&self, name: &str) -> bool {
        name != TRIAL_TOKEN && (self.0.is_match(name) || self.0.is_match(name.replace(['-', '.'], "_")))
    }
}

/// The rules of this process: the defaults and `CCL_COV_REDACT`. The context
/// refuses a pattern that does not parse before anything is recorded; should
/// one reach here, the defaults still hold.
fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| {
        Rules::with(&std::env::var(REDACT).unwrap_or_default())
            .unwrap_or_else(|_| Rules::with("").expect("the default patterns parse"))
    })
}

/// Whether the value of variable (or option) `name` is a secret.
pub(crate) fn is_secret_name(name: &str) -> bool {
    rules().is_secret(name)
}

/// The value of variable `name` as it may be recorded. An empty value stays
/// empty: it hides nothing and "set but empty" is worth seeing.
/// An already masked value (bare or shell-quoted) is kept as it is, so
/// redacting a record twice changes nothing.
pub(crate) fn value(name: &str, value: &str) -> String {
    let masked = value == MASK || value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) == Some(MASK);
    if is_secret_name(name) && !value.is_empty() && !masked { MASK.to_string() } else { urls(value) }
}

/// An environment list as it may be recorded.
pub fn env(vars: &[(String, String)]) -> Vec<(String, String)> {
    vars.iter().map(|(k, v)| (k.clone(), value(k, v))).collect()
}

/// Every `scheme://user:password@host` in `text` with the password masked.
pub(crate) fn urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let authority_start = at + 3;
        out.push_str(&rest[..authority_start]);
        let after = &rest[authority_start..];
        let authority_len =
            after.find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace() || c == '\'' || c == '"');
        let authority = &after[..authority_len.unwrap_or(after.len())];
        match authority.rfind('@').and_then(|end| authority[..end].find(':').map(|colon| (colon, end))) {
            Some((colon, end)) if colon + 1 < end => {
                out.push_str(&authority[..=colon]);
                out.push_str(MASK);
                // Scanning goes on from the '@': a list may hold more URLs.
                rest = &after[end..];
            }
            _ => rest = after,
        }
    }
    out.push_str(rest);
    out
}

/// One argument that may hold `NAME=VALUE` (a variable or `--option=value`).
fn assignment(arg: &str) -> String {
    if let Some((name, val)) = arg.split_once('=') {
        let bare = name.trim_start_matches('-');
        let plausible = !bare.is_empty() && bare.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if plausible {
            if is_secret_name(bare) {
                return format!("{name}={}", value(bare, val));
            }
            // srun --export=A=1,B=2: a list of assignments.
            if name == "--export" {
                return format!("{name}={}", val.split(',').map(assignment).collect::<Vec<_>>().join(","));
            }
        }
    }
    urls(arg)
}

/// An argv vector as it may be recorded.
pub(crate) fn argv<S: AsRef<str>>(args: &[S]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_ref();
        out.push(assignment(arg));
        // MPICH/Hydra: -genv NAME VALUE, -env NAME VALUE.
        if matches!(arg, "-genv" | "-env" | "--genv" | "--env") && i + 2 < args.len() {
            let name = args[i + 1].as_ref();
            out.push(name.to_string());
            out.push(value(name, args[i + 2].as_ref()));
            i += 3;
            continue;
        }
        i += 1;
    }
    out
}

/// A recorded shell line (`Cmd::display`'s form) redacted word by word, for
/// records whose argv is no longer at hand. Words are split on single spaces
/// and joined back the same way, so an already redacted line is unchanged;
/// prefer redacting the argv, as a quoted value with spaces is not one word.
pub(crate) fn shell_line(line: &str) -> String {
    argv(&line.split(' ').collect::<Vec<_>>()).join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(args: &[&str]) -> Vec<String> {
        argv(args)
    }

    #[test]
    fn secret_names_are_masked_case_insensitively_but_not_the_trial_marker() {
        for name in [
            "MY_API_TOKEN",
            "db_password",
            "PASSWD",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY_ID",
            "ssh_key",
            "SSH_PRIVATE_KEY",
            "GH_CREDENTIALS",
            "API_KEY",
            "OPENAI_API_KEY",
            "apikey",
            "HF_TOKEN",
            "GITHUB_TOKEN",
            "SECRET_KEY",
            "KEY",
            "NPM_AUTH",
            "ENCRYPTION_KEY_B64",
            "DEPLOY_KEY_PEM",
            "KEY_FILE_PASSPHRASE",
            "PRIVATEKEY",
            "AWS_ACCESSKEY",
        ] {
            assert_eq!(value(name, "hunter2"), MASK, "{name}");
        }
        for name in ["NCCL_IB_PKEY", "UCX_IB_PKEY", "KEYBOARD", "MONKEY_COUNT", "CCL_ALGO", "AUTHOR"] {
            assert_eq!(value(name, "0"), "0", "{name} is not a key");
        }
        assert_eq!(value(TRIAL_TOKEN, "123-abc-0"), "123-abc-0");
        assert_eq!(value("CCL_ALGO", "ring"), "ring");
        assert_eq!(value("MY_TOKEN", ""), "", "an empty value hides nothing");
    }

    #[test]
    fn url_passwords_are_masked_and_the_rest_kept() {
        assert_eq!(urls("postgres://u:pw@h:5432/db?x=1"), "postgres://u:***@h:5432/db?x=1");
        assert_eq!(urls("a=redis://:pw@h,b=https://x:y@z/p"), "a=redis://:***@h,b=https://x:***@z/p");
        assert_eq!(urls("https://user@host/path"), "https://user@host/path", "no password, nothing to hide");
        assert_eq!(urls("https://host/a:b@c"), "https://host/a:b@c", "an @ in the path is not userinfo");
        assert_eq!(urls("file:///tmp/x"), "file:///tmp/x");
        assert_eq!(urls("no url at all"), "no url at all");
        assert_eq!(urls("amqp://u:p@ss@h/v"), "amqp://u:***@h/v", "the last @ ends the userinfo");
        assert_eq!(value("DB_URL", "postgres://u:pw-secret@h/db"), "postgres://u:***@h/db");
    }

    #[test]
    fn launcher_forms_that_carry_values_are_understood() {
        assert_eq!(
            v(&["mpirun", "-np", "2", "-genv", "MY_TOKEN", "s3cr3t", "-genv", "CCL_ALGO", "ring", "/b/x"]),
            ["mpirun", "-np", "2", "-genv", "MY_TOKEN", MASK, "-genv", "CCL_ALGO", "ring", "/b/x"]
        );
        assert_eq!(v(&["-env", "DB_URL", "mysql://a:b@h"]), ["-env", "DB_URL", "mysql://a:***@h"]);
        assert_eq!(v(&["-x", "API_KEY=abc", "-x", "API_KEY"]), ["-x", "API_KEY=***", "-x", "API_KEY"]);
        assert_eq!(v(&["--password=abc", "--size=1K"]), ["--password=***", "--size=1K"]);
        assert_eq!(v(&["--api-key=abc", "--pkey=0x8001"]), ["--api-key=***", "--pkey=0x8001"]);
        assert_eq!(
            v(&["srun", "--export=ALL,MY_SECRET=abc,CCL_ALGO=ring"]),
            ["srun", "--export=ALL,MY_SECRET=***,CCL_ALGO=ring"]
        );
        assert_eq!(v(&["--db=postgres://u:pw@h/db"]), ["--db=postgres://u:***@h/db"]);
        // Not an assignment: a path with '=' or a value that merely mentions a word.
        assert_eq!(v(&["/tmp/a b=TOKEN"]), ["/tmp/a b=TOKEN"]);
        assert_eq!(v(&["-genv", "ONLY_NAME"]), ["-genv", "ONLY_NAME"], "a short -genv is kept as it is");
    }

    #[test]
    fn users_add_their_own_patterns() {
        let rules = Rules::with(" site_*_id , *.cookie ,").unwrap();
        assert!(rules.is_secret("SITE_ORG_ID") && rules.is_secret("session.cookie"), "any case, spaces trimmed");
        assert!(rules.is_secret("HF_TOKEN"), "the defaults stay");
        assert!(!rules.is_secret("NCCL_IB_PKEY") && !rules.is_secret(TRIAL_TOKEN));
        let err = Rules::with("A_*,[unclosed").unwrap_err().to_string();
        assert!(err.starts_with("CCL_COV_REDACT: \"[unclosed\" is not a glob pattern"), "{err}");
    }

    #[test]
    fn the_trial_marker_stays_visible_in_argv() {
        let marker = format!("{TRIAL_TOKEN}=1-2-3");
        assert_eq!(v(&["-genv", TRIAL_TOKEN, "1-2-3", &marker]), ["-genv", TRIAL_TOKEN, "1-2-3", &marker]);
    }

    #[test]
    fn shell_lines_are_redacted_word_by_word_and_redaction_is_idempotent() {
        let line = "cd /w && MY_TOKEN=abc mpirun -genv DB_PASSWORD pw /b/x --url=https://u:p@h";
        let once = shell_line(line);
        assert_eq!(once, "cd /w && MY_TOKEN=*** mpirun -genv DB_PASSWORD *** /b/x --url=https://u:***@h");
        assert_eq!(shell_line(&once), once);
    }
}
