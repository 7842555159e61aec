//! `{placeholder}` substitution: the values only the harness knows (the build
//! directory, the compiler it resolved, the coverage flags it decided on, a
//! trial's rank count). Environment variables are expanded once at load time
//! (`expand.rs`); placeholders are filled in when a build step or a trial runs.
//! `{{` and `}}` stand for literal braces.

use crate::bail;
use crate::error::Result;
use std::collections::BTreeMap;

/// Placeholders a build step may use.
pub(crate) const BUILD_PLACEHOLDERS: &[&str] = &[
    "build_dir",
    "cc",
    "config_dir",
    "coverage_flags",
    "coverage_link_flags",
    "cxx",
    "jobs",
    "library_src",
    "llvm_bin",
    "tests_src",
];

/// Placeholders a trial's arguments and environment may use: the build ones
/// plus what is known per trial.
pub(crate) const TRIAL_PLACEHOLDERS: &[&str] = &[
    "bin_dir",
    "build_dir",
    "bytes",
    "cc",
    "config_dir",
    "cxx",
    "library_src",
    "llvm_bin",
    "ranks",
    "size",
    "slots",
    "tests_src",
    "workspace",
];

/// The placeholders only a trial with a size has a value for.
pub(crate) const SIZE_PLACEHOLDERS: &[&str] = &["bytes", "size"];

/// Splits `text` into literal text and placeholder names.
fn parse(text: &str) -> Result<Vec<Piece<'_>>> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(pos) = rest.find(['{', '}']) {
        literal.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            literal.push(tail.as_bytes()[0] as char);
            rest = &tail[2..];
            continue;
        }
        if tail.starts_with('}') {
            bail!("unmatched `}}` in {text:?} (write `}}}}` for a literal brace)");
        }
        let Some(end) = tail.find('}') else {
            bail!("unclosed `{{` in {text:?} (write `{{{{` for a literal brace)");
        };
        let name = &tail[1..end];
        if name.is_empty() || !name.bytes().all(|b| b == b'_' || b.is_ascii_lowercase()) {
            bail!("`{{{name}}}` in {text:?} is not a placeholder (write `{{{{` for a literal brace)");
        }
        if !literal.is_empty() {
            pieces.push(Piece::Literal(std::mem::take(&mut literal)));
        }
        pieces.push(Piece::Name(name));
        rest = &tail[end + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    Ok(pieces)
}

enum Piece<'a> {
    Literal(String),
    Name(&'a str),
}

/// Checks that `text` only uses placeholders from `allowed`.
pub(crate) fn check(text: &str, allowed: &[&str]) -> Result<()> {
    for piece in parse(text)? {
        if let Piece::Name(name) = piece
            && !allowed.contains(&name)
        {
            bail!("unknown placeholder `{{{name}}}`; known here: {}", braced(allowed));
        }
    }
    Ok(())
}

/// The first of `names` that `text` uses, if any.
pub(crate) fn first_use<'n>(text: &str, names: &[&'n str]) -> Option<&'n str> {
    let used: Vec<&str> = parse(text)
        .ok()?
        .into_iter()
        .filter_map(|p| match p {
            Piece::Name(n) => Some(n),
            Piece::Literal(_) => None,
        })
        .collect();
    names.iter().copied().find(|n| used.contains(n))
}

fn braced(names: &[&str]) -> String {
    names.iter().map(|n| format!("{{{n}}}")).collect::<Vec<_>>().join(", ")
}

/// Values for the placeholders of one build or trial.
#[derive(Debug, Clone, Default)]
pub(crate) struct Vars(BTreeMap<&'static str, String>);

impl Vars {
    pub(crate) fn set(&mut self, name: &'static str, value: impl Into<String>) -> &mut Self {
        self.0.insert(name, value.into());
        self
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Fills in every placeholder of `text`.
    pub(crate) fn render(&self, text: &str) -> Result<String> {
        let mut out = String::with_capacity(text.len());
        for piece in parse(text)? {
            match piece {
                Piece::Literal(s) => out.push_str(&s),
                Piece::Name(name) => match self.0.get(name) {
                    Some(value) => out.push_str(value),
                    None => bail!("placeholder `{{{name}}}` in {text:?} has no value here"),
                },
            }
        }
        Ok(out)
    }

    pub(crate) fn render_all<T: AsRef<str>>(&self, texts: &[T]) -> Result<Vec<String>> {
        texts.iter().map(|t| self.render(t.as_ref())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_placeholders_and_escapes() {
        let mut vars = Vars::default();
        vars.set("build_dir", "/b").set("ranks", "4");
        assert_eq!(vars.render("-B{build_dir}/x").unwrap(), "-B/b/x");
        assert_eq!(vars.render("{ranks}{{json}}").unwrap(), "4{json}");
        assert_eq!(vars.render("plain").unwrap(), "plain");
    }

    #[test]
    fn missing_value_is_an_error() {
        let err = Vars::default().render("{ranks}").unwrap_err();
        assert!(err.to_string().contains("{ranks}"), "{err}");
    }

    #[test]
    fn check_rejects_unknown_and_malformed() {
        assert!(check("{build_dir}/lib", BUILD_PLACEHOLDERS).is_ok());
        let err = check("{ranks}", BUILD_PLACEHOLDERS).unwrap_err();
        assert!(err.to_string().contains("unknown placeholder `{ranks}`"), "{err}");
        assert!(err.to_string().contains("{build_dir}"), "lists known names: {err}");
        assert!(check("{\"a\": 1}", BUILD_PLACEHOLDERS).is_err());
        assert!(check("{build_dir", BUILD_PLACEHOLDERS).is_err());
        assert!(check("a}", BUILD_PLACEHOLDERS).is_err());
        assert!(check("{{\"a\": 1}}", BUILD_PLACEHOLDERS).is_ok());
    }
}
