//! `${VAR}` / `${VAR:-default}` expansion of config values.
//!
//! Bash-compatible where it matters and stricter where upstream was silently
//! wrong (docs/architecture.md, "Variable expansion"):
//! - `${VAR}` is the value (empty if set to empty); an **unset** `${VAR}` is an
//!   error naming the variable, never left as literal text.
//! - `${VAR:-default}` uses the default when VAR is unset **or empty**;
//!   `${VAR-default}` only when unset. Defaults may nest (`${A:-${B:-x}/y}`) and
//!   are expanded only when used, so `${A:-${UNSET}}` is fine while A is set.
//! - One pass: text substituted from a variable is never expanded again.
//! - `$$` is a literal `$`; a `$` not followed by `{` stays as it is, so
//!   linker arguments such as `-Wl,-rpath,$ORIGIN` survive untouched.

use crate::env_names::Lookup;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpandError {
    Unset { name: String },
    Unterminated { at: usize },
    BadName { text: String },
    Unsupported { text: String },
    TooDeep { at: usize },
}

/// How deeply defaults may nest (`${A:-${B:-...}}`): each level recurses, so
/// an unbounded depth could overflow the stack on a hostile config.
pub(crate) const MAX_DEPTH: usize = 16;

impl fmt::Display for ExpandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpandError::Unset { name } => write!(
                f,
                "environment variable {name} is not set and `${{{name}}}` has no default \
                 (set it, or write `${{{name}:-default}}`)"
            ),
            ExpandError::Unterminated { at } => {
                write!(f, "`${{` at byte {at} has no closing `}}`")
            }
            ExpandError::BadName { text } => {
                write!(f, "`${{{text}}}` is not a variable reference (names are [A-Za-z_][A-Za-z0-9_]*)")
            }
            ExpandError::TooDeep { at } => {
                write!(f, "`${{` at byte {at} nests defaults more than {MAX_DEPTH} deep")
            }
            ExpandError::Unsupported { text } => write!(
                f,
                "`${{{text}}}` uses an operator ccl-coverage does not support \
                 (only `${{VAR}}`, `${{VAR:-default}}` and `${{VAR-default}}`)"
            ),
        }
    }
}

/// Expands `input`, looking variables up with `lookup`.
pub fn expand(input: &str, lookup: Lookup<'_>) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(input.len());
    expand_into(input, 0, 0, lookup, &mut out)?;
    Ok(out)
}

/// Expands `text` (which starts at byte `base` of the original value, for
/// error positions) into `out`.
fn expand_into(text: &str, base: usize, depth: usize, lookup: Lookup<'_>, out: &mut String) -> Result<(), ExpandError> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'$', Some(b'$')) => {
                out.push('$');
                i += 2;
            }
            (b'$', Some(b'{')) => {
                if depth >= MAX_DEPTH {
                    return Err(ExpandError::TooDeep { at: base + i });
                }
                let close = matching_brace(text, i + 2).ok_or(ExpandError::Unterminated { at: base + i })?;
                substitute(&text[i + 2..close], base + i + 2, depth + 1, lookup, out)?;
                i = close + 1;
            }
            _ => {
                // `i` is always at a character boundary: it only moves past
                // ASCII bytes and whole characters.
                let Some(ch) = text[i..].chars().next() else { break };
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    Ok(())
}

/// Index of the `}` closing a `${` whose body starts at `start`.
fn matching_brace(text: &str, start: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 1;
    let mut i = start;
    while i < bytes.len() {
        match bytes[i] {
            b'$' if bytes.get(i + 1) == Some(&b'$') => i += 1,
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                depth += 1;
                i += 1;
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Handles the body of one `${...}`.
fn substitute(body: &str, base: usize, depth: usize, lookup: Lookup<'_>, out: &mut String) -> Result<(), ExpandError> {
    let name_len = body
        .bytes()
        .enumerate()
        .take_while(|&(k, b)| b == b'_' || b.is_ascii_alphabetic() || (k > 0 && b.is_ascii_digit()))
        .count();
    let (name, rest) = body.split_at(name_len);
    if name.is_empty() {
        return Err(ExpandError::BadName { text: body.to_string() });
    }
    let value = lookup(name);
    let (default, empty_is_unset) = if rest.is_empty() {
        (None, false)
    } else if let Some(d) = rest.strip_prefix(":-") {
        (Some((d, name_len + 2)), true)
    } else if let Some(d) = rest.strip_prefix('-') {
        (Some((d, name_len + 1)), false)
    } else if rest.starts_with([':', '=', '+', '?', '#', '%', '/']) {
        return Err(ExpandError::Unsupported { text: body.to_string() });
    } else {
        return Err(ExpandError::BadName { text: body.to_string() });
    };
    match (value, default) {
        (Some(v), Some((d, offset))) if empty_is_unset && v.is_empty() => {
            expand_into(d, base + offset, depth, lookup, out)
        }
        (Some(v), _) => {
            out.push_str(&v);
            Ok(())
        }
        (None, Some((d, offset))) => expand_into(d, base + offset, depth, lookup, out),
        (None, None) => Err(ExpandError::Unset { name: name.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn run(input: &str, vars: &[(&str, &str)]) -> Result<String, ExpandError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        expand(input, &|name| map.get(name).cloned())
    }

    #[test]
    fn colon_dash_uses_default_for_empty_variable() {
        // Upstream's one test (test_config_expansion.py).
        assert_eq!(
            run("${RCCL_TESTS_DIR:-/workspace/rccl-tests}/build", &[("RCCL_TESTS_DIR", "")]).unwrap(),
            "/workspace/rccl-tests/build"
        );
    }

    #[test]
    fn set_variable_wins_over_default() {
        assert_eq!(run("${A:-d}", &[("A", "a")]).unwrap(), "a");
        assert_eq!(run("${A:-d}", &[]).unwrap(), "d");
    }

    #[test]
    fn plain_reference_keeps_empty_value() {
        assert_eq!(run("x${E}y", &[("E", "")]).unwrap(), "xy");
    }

    #[test]
    fn unset_plain_reference_is_an_error_naming_it() {
        let err = run("a/${NOPE}/b", &[]).unwrap_err();
        assert_eq!(err, ExpandError::Unset { name: "NOPE".into() });
        assert!(err.to_string().contains("NOPE is not set"), "{err}");
    }

    #[test]
    fn nested_defaults_expand_lazily() {
        assert_eq!(run("${A:-${B}/x}", &[("B", "/b")]).unwrap(), "/b/x");
        // Upstream returns this literally when B is unset even though A is set.
        assert_eq!(run("${A:-${B}/x}", &[("A", "/a")]).unwrap(), "/a");
        assert_eq!(run("${A:-${B:-${C:-deep}}}", &[]).unwrap(), "deep");
        assert!(run("${A:-${B}/x}", &[]).is_err(), "B unset and needed");
    }

    #[test]
    fn bash_default_without_colon_keeps_empty() {
        assert_eq!(run("${A-d}", &[("A", "")]).unwrap(), "");
        assert_eq!(run("${A-d}", &[]).unwrap(), "d");
    }

    #[test]
    fn substituted_text_is_not_expanded_again() {
        assert_eq!(run("${A}", &[("A", "${B}"), ("B", "no")]).unwrap(), "${B}");
        assert_eq!(run("${X:-${A}}", &[("A", "$${B}")]).unwrap(), "$${B}");
    }

    #[test]
    fn dollar_escapes_and_bare_dollars() {
        assert_eq!(run("$${A}", &[("A", "x")]).unwrap(), "${A}");
        assert_eq!(run("-Wl,-rpath,$ORIGIN", &[]).unwrap(), "-Wl,-rpath,$ORIGIN");
        assert_eq!(run("cost: 5$", &[]).unwrap(), "cost: 5$");
    }

    #[test]
    fn malformed_references_are_errors() {
        assert_eq!(run("${A", &[]).unwrap_err(), ExpandError::Unterminated { at: 0 });
        assert!(matches!(run("${}", &[]).unwrap_err(), ExpandError::BadName { .. }));
        assert!(matches!(run("${1A}", &[]).unwrap_err(), ExpandError::BadName { .. }));
        assert!(matches!(run("${A:=x}", &[]).unwrap_err(), ExpandError::Unsupported { .. }));
        assert!(matches!(run("${A:+x}", &[]).unwrap_err(), ExpandError::Unsupported { .. }));
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = |n: usize| format!("{}x{}", "${A:-".repeat(n), "}".repeat(n));
        assert_eq!(run(&deep(MAX_DEPTH), &[]).unwrap(), "x");
        let err = run(&deep(MAX_DEPTH + 1), &[]).unwrap_err();
        assert!(matches!(err, ExpandError::TooDeep { .. }), "{err:?}");
        // Far beyond any stack: an error, not a crash.
        assert!(run(&deep(200_000), &[]).is_err());
    }

    #[test]
    fn non_ascii_text_passes_through() {
        assert_eq!(run("é${A:-ü}ß", &[]).unwrap(), "éüß");
    }
}
