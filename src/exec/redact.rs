//! Secrets never reach a record. Trials and build steps get the real
//! environment and arguments; every place that *writes them down* (trial logs'
//! command line, `results/<trial>.json`, `run.json`, JUnit, the dry run, error
//! messages) goes through these functions first.
//!
//! What counts as a secret:
//! - the value of a variable whose name contains (case-insensitively) one of
//!   [`SECRET_WORDS`]; conservative on purpose: `KEYBOARD` is masked too, since
//!   a false positive costs a little readability and a false negative leaks.
//!   The one exception is the harness's own trial marker
//!   ([`crate::env_names::TRIAL_TOKEN`]): it is no secret, and tools find a
//!   trial's processes by it, so records must show it;
//! - the password of a URL or DSN, anywhere in a value or argument:
//!   `postgres://user:pw@host/db` becomes `postgres://user:***@host/db`.
//!
//! In argv, the launcher forms that carry values are understood: `NAME=VALUE`
//! (also `-x NAME=VALUE`, `--password=VALUE`), MPICH's `-genv NAME VALUE` /
//! `-env NAME VALUE`, and srun's `--export=A=1,B=2`.

use crate::env_names::TRIAL_TOKEN;

/// What a secret is replaced with.
pub(crate) const MASK: &str = "***";

/// Parts of a variable (or option) name that mark its value as secret.
pub(crate) const SECRET_WORDS: &[&str] = &["TOKEN", "PASSWORD", "PASSWD", "SECRET", "KEY", "CREDENTIAL"];

/// Whether the value of variable (or option) `name` is a secret.
pub(crate) fn is_secret_name(name: &str) -> bool {
    if name == TRIAL_TOKEN {
        return false;
    }
    let upper = name.to_ascii_uppercase();
    SECRET_WORDS.iter().any(|w| upper.contains(w))
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
        for name in ["MY_API_TOKEN", "db_password", "PASSWD", "AWS_SECRET_ACCESS_KEY", "ssh_key", "GH_CREDENTIALS"] {
            assert_eq!(value(name, "hunter2"), MASK, "{name}");
        }
        // Conservative: a name that merely contains KEY is masked as well.
        assert_eq!(value("KEYBOARD", "us"), MASK);
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
