//! The strings of a config that are more than text: names, sizes,
//! environment variable names and `{placeholder}` templates. Each checks
//! itself while it is deserialized, so its error carries the JSON path, and a
//! loaded config cannot hold a malformed one.

use super::limits;
use crate::config::template::{self, BUILD_PLACEHOLDERS, TRIAL_PLACEHOLDERS};
use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;

/// Read-only string access, so that call sites keep using them as `&str`;
/// `Debug` shows the text alone, as error messages quote it.
macro_rules! string_value {
    ($(impl$(<$k:ident: $bound:path>)? for $ty:ty;)*) => {$(
        impl$(<$k: $bound>)? $ty {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl$(<$k: $bound>)? Deref for $ty {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl$(<$k: $bound>)? AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl$(<$k: $bound>)? fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl$(<$k: $bound>)? fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl$(<$k: $bound>)? From<$ty> for String {
            fn from(value: $ty) -> String {
                value.0
            }
        }
    )*};
}

string_value! {
    impl for Name;
    impl for EnvName;
    impl for Size;
    impl for HostName;
    impl<K: Placeholders> for Template<K>;
}

/// A collective's, variant's, launcher's or the config's own name. It becomes
/// part of trial names (`Collective::size::variant`) and file names
/// (`Collective.size.variant.profdata`, `target/ccl-coverage/<config>`): no
/// `/`, `::`, control characters or leading dot, and short enough that a
/// trial's file name stays under the file system's limit.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct Name(String);

impl TryFrom<String> for Name {
    type Error = String;

    fn try_from(name: String) -> Result<Name, String> {
        let usable = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            && !name.starts_with('.');
        if !usable {
            return Err(format!(
                "{name:?} is not a usable name: expected ASCII letters, digits, '_', '-' or '.', not starting with '.' \
                 (it becomes part of trial and file names)"
            ));
        }
        if name.len() > limits::NAME_BYTES {
            return Err(format!(
                "a name of {} bytes is too long: expected at most {} (it becomes part of file names)",
                name.len(),
                limits::NAME_BYTES
            ));
        }
        Ok(Name(name))
    }
}

/// Map keys are looked up by `&str` (`config.launchers["mpi"]`).
impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// The name of an environment variable a trial or build step sets: one a
/// process can be given (`NAME=value`), so not empty and without `=`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct EnvName(String);

impl TryFrom<String> for EnvName {
    type Error = String;

    fn try_from(name: String) -> Result<EnvName, String> {
        if name.is_empty() || name.contains('=') {
            return Err(format!("{name:?} is not an environment variable name: expected a non-empty name without '='"));
        }
        Ok(EnvName(name))
    }
}

impl Borrow<str> for EnvName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// A message size as nccl-tests reads it (`-b`/`-e`): digits with an optional
/// K, M or G suffix, powers of 1024, within [`limits::SIZE_BYTES`]. The text
/// is what trial names and the test binary get; the byte count tells `1K`
/// and `1024` apart from two different sizes.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct Size(String, u64);

impl Size {
    pub fn bytes(&self) -> u64 {
        self.1
    }
}

impl TryFrom<String> for Size {
    type Error = String;

    fn try_from(size: String) -> Result<Size, String> {
        let digits = size.trim_end_matches(['K', 'M', 'G']);
        let well_formed =
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && size.len() - digits.len() <= 1;
        if !well_formed {
            return Err(format!("{size:?} is not a size: expected digits with an optional K, M or G suffix"));
        }
        let shift = match size.as_bytes().last() {
            Some(b'K') => 10,
            Some(b'M') => 20,
            Some(b'G') => 30,
            _ => 0,
        };
        let bound = limits::SIZE_BYTES;
        let Some(bytes) = digits.parse::<u64>().ok().and_then(|n| n.checked_mul(1 << shift)) else {
            return Err(format!("{size:?} is too large: expected {bound}"));
        };
        if !(bound.min..=bound.max).contains(&bytes) {
            return Err(format!("{size:?} is {bytes} bytes: expected {bound}"));
        }
        Ok(Size(size, bytes))
    }
}

/// A node's name as a launcher is given it (`mpirun --host NAME:4`, `srun
/// --nodelist=NAME`, a hostfile line): a host name, so letters, digits, `.`,
/// `-` and `_`, not starting with `-` (it would read as an option), at most
/// 253 bytes (DNS's limit).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostName(String);

impl TryFrom<String> for HostName {
    type Error = String;

    fn try_from(name: String) -> Result<HostName, String> {
        let usable = !name.is_empty()
            && name.len() <= 253
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
            && !name.starts_with(['-', '.']);
        if !usable {
            return Err(format!(
                "{name:?} is not a host name: expected 1 to 253 ASCII letters, digits, '.', '-' or '_', not starting \
                 with '-' or '.' (launchers are given it as `--host NAME:SLOTS`)"
            ));
        }
        Ok(HostName(name))
    }
}

/// Which `{placeholders}` a kind of template may use.
pub trait Placeholders {
    const ALLOWED: &'static [&'static str];
    /// Names its templates' schema (`BuildTemplate`, `TrialTemplate`).
    const SCHEMA_NAME: &'static str;
}

/// Build steps, objects and the test-binary folder: filled in before
/// anything runs, when no trial (and so no `{ranks}`) exists yet.
#[derive(Clone)]
pub enum AtBuild {}

impl Placeholders for AtBuild {
    const ALLOWED: &'static [&'static str] = BUILD_PLACEHOLDERS;
    const SCHEMA_NAME: &'static str = "BuildTemplate";
}

/// Launcher and test-binary arguments and environments: filled in per trial.
#[derive(Clone)]
pub enum AtTrial {}

impl Placeholders for AtTrial {
    const ALLOWED: &'static [&'static str] = TRIAL_PLACEHOLDERS;
    const SCHEMA_NAME: &'static str = "TrialTemplate";
}

/// Text with `{placeholders}` (`template.rs`), checked when the config loads
/// so that a typo fails at once with its JSON path, not when the step or
/// trial finally runs.
#[derive(Clone, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String", bound = "K: Placeholders + Clone")]
pub struct Template<K: Placeholders>(String, PhantomData<K>);

pub type BuildTemplate = Template<AtBuild>;
pub type TrialTemplate = Template<AtTrial>;

impl<K: Placeholders> TryFrom<String> for Template<K> {
    type Error = String;

    fn try_from(text: String) -> Result<Template<K>, String> {
        template::check(&text, K::ALLOWED).map_err(|e| e.to_string())?;
        Ok(Template(text, PhantomData))
    }
}

/// The strings' schemas: what each accepts, in JSON Schema's words where
/// it has them (`pattern`) and in the description where it has not.
mod schema {
    use super::*;
    use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
    use std::borrow::Cow;

    macro_rules! string_schema {
        ($($ty:ty => $name:literal, $schema:expr;)*) => {$(
            impl JsonSchema for $ty {
                fn schema_name() -> Cow<'static, str> {
                    $name.into()
                }
                fn json_schema(_: &mut SchemaGenerator) -> Schema {
                    $schema
                }
            }
        )*};
    }

    string_schema! {
        Name => "Name", json_schema!({
            "type": "string",
            "pattern": "^[A-Za-z0-9_-][A-Za-z0-9_.-]*$",
            "maxLength": limits::NAME_BYTES,
        });
        EnvName => "EnvName", json_schema!({ "type": "string", "pattern": "^[^=]+$" });
        Size => "Size", json_schema!({ "type": "string", "pattern": "^[0-9]+[KMG]?$" });
        HostName => "HostName", json_schema!({
            "type": "string",
            "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
            "maxLength": 253,
        });
    }

    impl<K: Placeholders> JsonSchema for Template<K> {
        fn schema_name() -> Cow<'static, str> {
            K::SCHEMA_NAME.into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            let allowed: Vec<String> = K::ALLOWED.iter().map(|p| format!("{{{p}}}")).collect();
            json_schema!({ "type": "string", "x-placeholders": allowed })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deserialized as the loader does, so the message is the one users see.
    fn parse<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, String> {
        serde_json::from_value(serde_json::Value::String(text.into())).map_err(|e| e.to_string())
    }

    #[test]
    fn names_are_file_name_safe_and_short() {
        for good in ["AllReduce", "ring", "1K.direct", "a-b_c", &"n".repeat(limits::NAME_BYTES)] {
            assert_eq!(parse::<Name>(good).unwrap().as_str(), good);
        }
        for bad in ["", ".", "..", ".hidden", "a/b", "All::Reduce", "my launcher", "All\u{7}Reduce", "é"] {
            let err = parse::<Name>(bad).unwrap_err();
            assert_eq!(
                err,
                format!(
                    "{bad:?} is not a usable name: expected ASCII letters, digits, '_', '-' or '.', not starting \
                     with '.' (it becomes part of trial and file names)"
                )
            );
        }
        let err = parse::<Name>(&"n".repeat(limits::NAME_BYTES + 1)).unwrap_err();
        assert_eq!(err, "a name of 101 bytes is too long: expected at most 100 (it becomes part of file names)");
    }

    #[test]
    fn host_names_cannot_read_as_options_or_lists() {
        for good in ["node1", "n1.cluster.example", "gpu-01", "a_b"] {
            assert_eq!(parse::<HostName>(good).unwrap().as_str(), good);
        }
        for bad in ["", "-np", ".n", "a,b", "a:4", "a b", "a=b", &"n".repeat(254)] {
            let err = parse::<HostName>(bad).unwrap_err();
            assert!(err.starts_with(&format!("{bad:?} is not a host name: expected 1 to 253")), "{err}");
        }
    }

    #[test]
    fn env_names_can_be_given_to_a_process() {
        assert_eq!(parse::<EnvName>("NCCL_ALGO").unwrap().as_str(), "NCCL_ALGO");
        assert_eq!(parse::<EnvName>("lower.dots-ok").unwrap().as_str(), "lower.dots-ok");
        for bad in ["", "A=B", "="] {
            let err = parse::<EnvName>(bad).unwrap_err();
            assert_eq!(
                err,
                format!("{bad:?} is not an environment variable name: expected a non-empty name without '='")
            );
        }
    }

    #[test]
    fn sizes_know_their_bytes() {
        for (text, bytes) in [("0", 0), ("1024", 1024), ("1K", 1024), ("64M", 64 << 20), ("1024G", 1 << 40)] {
            let size = parse::<Size>(text).unwrap();
            assert_eq!((size.as_str(), size.bytes()), (text, bytes));
        }
        for bad in ["", "K", "1KB", "1k", "1T", "-1", "1.5K", " 1K", "1KK"] {
            let err = parse::<Size>(bad).unwrap_err();
            assert_eq!(err, format!("{bad:?} is not a size: expected digits with an optional K, M or G suffix"));
        }
        assert_eq!(
            parse::<Size>("1025G").unwrap_err(),
            "\"1025G\" is 1100585369600 bytes: expected an integer in 0..=1099511627776 (bytes, at most 1024G)"
        );
        assert_eq!(
            parse::<Size>("99999999999999999999K").unwrap_err(),
            "\"99999999999999999999K\" is too large: expected an integer in 0..=1099511627776 (bytes, at most 1024G)"
        );
    }

    #[test]
    fn build_templates_take_build_placeholders_only() {
        let t = parse::<BuildTemplate>("{build_dir}/lib/{{x}}").unwrap();
        assert_eq!(t.as_str(), "{build_dir}/lib/{{x}}");
        let err = parse::<BuildTemplate>("-np {ranks}").unwrap_err();
        assert!(err.starts_with("unknown placeholder `{ranks}`; known here: {build_dir}, {cc}"), "{err}");
        assert!(parse::<BuildTemplate>("{build_dir").unwrap_err().starts_with("unclosed `{`"));
    }

    #[test]
    fn trial_templates_take_trial_placeholders_only() {
        assert_eq!(parse::<TrialTemplate>("-t {ranks}").unwrap().as_str(), "-t {ranks}");
        let err = parse::<TrialTemplate>("{coverage_flags}").unwrap_err();
        assert!(err.starts_with("unknown placeholder `{coverage_flags}`; known here: {bin_dir}"), "{err}");
        assert!(parse::<TrialTemplate>("a}").unwrap_err().starts_with("unmatched `}`"));
    }

    #[test]
    fn values_serialize_as_their_text() {
        let size = parse::<Size>("1K").unwrap();
        assert_eq!(serde_json::to_value(&size).unwrap(), "1K");
        assert_eq!(format!("{size} {size:?}"), "1K \"1K\"");
    }
}
