//! Upstream's text rules, reproduced exactly so that the same strings come
//! out: its `${VAR}` expander (`lib/test_config.py::expand_env_vars`),
//! Python's `os.path.expandvars` and `expanduser` (used for pytest paths and
//! custom build dirs), and the shell's word splitting of `command_args`
//! (upstream runs the command line through `sh -c`).
//!
//! These differ from the crate's own `expand.rs` on purpose: an unset
//! variable stays literal text here, as upstream leaves it, and the caller
//! turns that into a warning.

use crate::env_names::Lookup;

/// How many passes upstream makes before giving up on reaching a fixed point.
const PASSES: usize = 10;

fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_name(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Length of the `[A-Za-z_][A-Za-z0-9_]*` name at the start of `s`.
fn name_len(s: &[u8]) -> usize {
    if s.first().is_some_and(|&b| is_name_start(b)) { s.iter().take_while(|&&b| is_name(b)).count() } else { 0 }
}

/// Upstream's `expand_env_vars`, PR version (`2789a78d`): up to 10 passes,
/// each replacing `${NAME:-DEFAULT}` (DEFAULT without braces; used when NAME
/// is unset *or empty*, and itself expanded), then `${NAME}`, then `$NAME`;
/// an unset `${NAME}` / `$NAME` stays as it is. Nested defaults resolve
/// inside-out over several passes.
pub(super) fn expand(value: &str, env: Lookup<'_>) -> String {
    expand_depth(value, env, 0)
}

fn expand_depth(value: &str, env: Lookup<'_>, depth: usize) -> String {
    let mut value = value.to_string();
    for _ in 0..PASSES {
        let next = bare_pass(&braced_pass(&default_pass(&value, env, depth), env), env);
        if next == value {
            break;
        }
        value = next;
    }
    value
}

/// `${NAME:-DEFAULT}` with DEFAULT free of `{` and `}`.
fn default_pass(s: &str, env: Lookup<'_>, depth: usize) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        if b[i] == b'$' && b.get(i + 1) == Some(&b'{') {
            let n = name_len(&b[i + 2..]);
            let after = i + 2 + n;
            if n > 0 && b[after..].starts_with(b":-") {
                let start = after + 2;
                let end = b[start..].iter().position(|&c| c == b'{' || c == b'}').map(|p| start + p);
                if let Some(end) = end.filter(|&e| b[e] == b'}') {
                    out.push_str(&s[copied..i]);
                    let name = &s[i + 2..after];
                    match env(name).filter(|v| !v.is_empty()) {
                        Some(v) => out.push_str(&v),
                        // Upstream recurses without a bound; a default has no
                        // braces, so one level of `$NAME` is all it can hold.
                        None if depth < PASSES => out.push_str(&expand_depth(&s[start..end], env, depth + 1)),
                        None => out.push_str(&s[start..end]),
                    }
                    i = end + 1;
                    copied = i;
                    continue;
                }
            }
        }
        i += 1;
    }
    out.push_str(&s[copied..]);
    out
}

/// `${NAME}`: the value when set (even empty), else unchanged.
fn braced_pass(s: &str, env: Lookup<'_>) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        if b[i] == b'$' && b.get(i + 1) == Some(&b'{') {
            let n = name_len(&b[i + 2..]);
            if n > 0 && b.get(i + 2 + n) == Some(&b'}') {
                if let Some(v) = env(&s[i + 2..i + 2 + n]) {
                    out.push_str(&s[copied..i]);
                    out.push_str(&v);
                    copied = i + 3 + n;
                }
                i += 3 + n;
                continue;
            }
        }
        i += 1;
    }
    out.push_str(&s[copied..]);
    out
}

/// `$NAME`, greedy: the value when set (even empty), else unchanged.
fn bare_pass(s: &str, env: Lookup<'_>) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        if b[i] == b'$' {
            let n = name_len(&b[i + 1..]);
            if n > 0 {
                if let Some(v) = env(&s[i + 1..i + 1 + n]) {
                    out.push_str(&s[copied..i]);
                    out.push_str(&v);
                    copied = i + 1 + n;
                }
                i += 1 + n;
                continue;
            }
        }
        i += 1;
    }
    out.push_str(&s[copied..]);
    out
}

/// Whether `s` still holds a `$NAME` or `${...}` reference: upstream left
/// it as literal text because the variable is unset.
pub(super) fn has_reference(s: &str) -> bool {
    let b = s.as_bytes();
    (0..b.len()).any(|i| b[i] == b'$' && (b.get(i + 1) == Some(&b'{') || name_len(&b[i + 1..]) > 0))
}

/// Python's `os.path.expandvars`: one pass over `$NAME` (`\w+`, so it may
/// start with a digit) and `${anything}`; unknown names stay as they are,
/// and there are no defaults.
pub(super) fn python_expandvars(s: &str, env: Lookup<'_>) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        if b[i] == b'$' {
            let (name, end) = if b.get(i + 1) == Some(&b'{') {
                match b[i + 2..].iter().position(|&c| c == b'}') {
                    Some(p) => (&s[i + 2..i + 2 + p], i + 3 + p),
                    None => ("", i + 1),
                }
            } else {
                let n = b[i + 1..].iter().take_while(|&&c| is_name(c)).count();
                (&s[i + 1..i + 1 + n], i + 1 + n)
            };
            if !name.is_empty() {
                if let Some(v) = env(name) {
                    out.push_str(&s[copied..i]);
                    out.push_str(&v);
                    copied = end;
                }
                i = end;
                continue;
            }
        }
        i += 1;
    }
    out.push_str(&s[copied..]);
    out
}

/// Python's `os.path.expanduser` for `~` and `~/...` (from `HOME`); `~user`
/// forms are left alone.
pub(super) fn expanduser(s: &str, env: Lookup<'_>) -> String {
    match (s.strip_prefix('~'), env("HOME")) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            let out = format!("{}{rest}", home.trim_end_matches('/'));
            if out.is_empty() { "/".to_string() } else { out }
        }
        _ => s.to_string(),
    }
}

/// Splits a command line into words as `sh` does before expanding them
/// (POSIX quoting, `shell-words`): blanks separate, `'...'` is literal,
/// `"..."` allows `\"`, `\\`, `\$` and `` \` ``, a backslash outside quotes
/// escapes the next character, and a word that starts with `#` starts a
/// comment. Returns `None` on an unterminated quote (the shell would fail the test).
pub(super) fn shell_words(s: &str) -> Option<Vec<String>> {
    shell_words::split(s).ok()
}

/// Characters a shell would act on rather than pass along: upstream's
/// command line goes through `sh -c`, ccl-coverage passes words literally.
pub(super) fn shell_active(s: &str) -> bool {
    s.contains(['$', '`', ';', '|', '&', '<', '>', '(', ')'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "A" => Some("/a".into()),
            "B" => Some("/b".into()),
            "EMPTY" => Some(String::new()),
            "HOME" => Some("/home/u".into()),
            "HOME_x" => Some("greedy".into()),
            _ => None,
        }
    }

    #[test]
    fn defaults_apply_when_unset_or_empty() {
        assert_eq!(expand("${A:-d}", &env), "/a");
        assert_eq!(expand("${UNSET:-d}/x", &env), "d/x");
        assert_eq!(expand("${EMPTY:-/workspace/rccl-tests}/build", &env), "/workspace/rccl-tests/build");
    }

    #[test]
    fn unset_references_stay_literal() {
        assert_eq!(expand("${UNSET}/$UNSET", &env), "${UNSET}/$UNSET");
        assert_eq!(expand("${EMPTY}x", &env), "x");
        assert_eq!(expand("$HOME_x", &env), "greedy");
        assert!(has_reference(&expand("${UNSET}", &env)));
        assert!(!has_reference("a$ b $1"));
    }

    #[test]
    fn nested_defaults_resolve_inside_out_and_keep_upstream_quirks() {
        assert_eq!(expand("${UNSET:-${B}/x}", &env), "/b/x");
        assert_eq!(expand("${UNSET:-${WORK:-${B}}/build}", &env), "/b/build");
        // With the inner variable unset the whole expression stays, even with A set.
        assert_eq!(expand("${A:-${UNSET2}/x}", &env), "${A:-${UNSET2}/x}");
        assert_eq!(expand("${UNSET:-$UNSET2}", &env), "$UNSET2");
        assert_eq!(expand("${UNSET:-$A}", &env), "/a");
    }

    #[test]
    fn python_expandvars_has_no_defaults() {
        assert_eq!(python_expandvars("$A/${B}/${UNSET:-d}/$1x", &env), "/a//b/${UNSET:-d}/$1x");
        assert_eq!(python_expandvars("${A", &env), "${A");
    }

    #[test]
    fn expanduser_only_for_the_current_user() {
        assert_eq!(expanduser("~/x", &env), "/home/u/x");
        assert_eq!(expanduser("~", &env), "/home/u");
        assert_eq!(expanduser("~bob/x", &env), "~bob/x");
        assert_eq!(expanduser("a/~", &env), "a/~");
    }

    #[test]
    fn shell_words_split_like_sh() {
        assert_eq!(
            shell_words(r#" -b 8  -e "1 G" 'a\b' c\ d "\$x" "#).unwrap(),
            ["-b", "8", "-e", "1 G", "a\\b", "c d", "$x"]
        );
        assert_eq!(shell_words("''").unwrap(), [""]);
        assert_eq!(shell_words("-x 'open"), None);
        // As dash does it (`sh -c 'printf "[%s]" …'`): a comment, a trailing
        // backslash kept, and a carriage return inside a word.
        assert_eq!(shell_words("-b 8 #-e 1G").unwrap(), ["-b", "8"]);
        assert_eq!(shell_words("a a#b").unwrap(), ["a", "a#b"]);
        assert_eq!(shell_words("a\\").unwrap(), ["a\\"]);
        assert_eq!(shell_words("a\rb").unwrap(), ["a\rb"]);
        assert!(shell_active("-o $OP") && !shell_active("-d all -o sum"));
    }
}
