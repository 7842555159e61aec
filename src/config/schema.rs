//! The config's JSON Schema, derived from its types (`types.rs`, `values.rs`)
//! by schemars: `ccl-coverage config-schema` prints it for editors, and
//! docs/config.md's key reference is generated from it and checked against
//! it by a test, so neither can drift from what the loader accepts.

use super::Config;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// The schema of a ccl-coverage config (not of an upstream `test_runner`
/// config), every sub-schema inline.
pub fn json_schema() -> Value {
    let generator = SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true).into_generator();
    let mut schema = generator.into_root_schema_for::<Config>().to_value();
    if let Some(map) = schema.as_object_mut() {
        map.insert("title".into(), "ccl-coverage config".into());
    }
    schema
}

/// docs/config.md's key reference, made from the schema: only its test
/// writes and reads it.
#[cfg(test)]
mod reference {
    use super::*;

    /// One key of the config as the reference lists it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct Key {
        /// `library.steps[].argv`, `launchers.<name>.kind`, `env.<NAME>`.
        pub(crate) path: String,
        pub(crate) kind: String,
        /// `required`, or the default as JSON.
        pub(crate) default: String,
        /// Ranges, patterns, accepted values and the placeholders a template takes.
        pub(crate) accepts: String,
        pub(crate) description: String,
    }

    /// Every key the schema describes, depth first, each object's keys in the
    /// schema's (alphabetical) order.
    pub(crate) fn keys(schema: &Value) -> Vec<Key> {
        let mut out = Vec::new();
        walk(schema, "", &mut out);
        out
    }

    fn walk(schema: &Value, path: &str, out: &mut Vec<Key>) {
        let join = |child: &str| if path.is_empty() { child.to_string() } else { format!("{path}.{child}") };
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for (name, sub) in props {
                let child = join(name);
                // A key a section needs, when the section itself has a default.
                let in_default = schema.get("default").and_then(|d| d.get(name));
                out.push(describe(&child, sub, required.contains(&name.as_str()), in_default));
                walk(sub, &child, out);
            }
        }
        // A map: `launchers.<name>`, `env.<NAME>`.
        if let Some(sub) = schema.get("patternProperties").and_then(Value::as_object).and_then(|m| m.values().next()) {
            let child = join(if path.ends_with("env") { "<NAME>" } else { "<name>" });
            walk(sub, &child, out);
        }
        if let Some(items) = schema.get("items") {
            walk(items, &format!("{path}[]"), out);
        }
    }

    fn describe(path: &str, sub: &Value, required: bool, in_default: Option<&Value>) -> Key {
        let default = match sub.get("default") {
            _ if required => in_default
                .map_or_else(|| "required".to_string(), |d| format!("`{d}` without the section; required in it")),
            Some(Value::Object(_)) => "each key's".to_string(),
            Some(Value::Null) | None => "unset".to_string(),
            Some(v) => format!("`{v}`"),
        };
        Key {
            path: path.to_string(),
            kind: kind(sub),
            default,
            accepts: accepts(sub),
            description: sub.get("description").and_then(Value::as_str).map(one_line).unwrap_or_default(),
        }
    }

    /// `string`, `integer`, `array of string`, `map of object`, …
    fn kind(sub: &Value) -> String {
        if sub.get("oneOf").is_some() || sub.get("enum").is_some() {
            return "string".into();
        }
        let types: Vec<&str> = match sub.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect(),
            _ => Vec::new(),
        };
        match types.as_slice() {
            ["array"] => format!("array of {}", sub.get("items").map_or_else(|| "any".into(), kind)),
            ["object"] if sub.get("properties").is_none() => {
                let value = sub.get("patternProperties").and_then(Value::as_object).and_then(|m| m.values().next());
                format!("map of {}", value.map_or_else(|| "any".into(), kind))
            }
            [t] => (*t).to_string(),
            _ => types.join(" or "),
        }
    }

    /// What the value may be, beyond its type.
    fn accepts(sub: &Value) -> String {
        let mut parts = Vec::new();
        // A documented variant is a `oneOf` entry of its own (`const`), the rest
        // share one (`enum`).
        let alternatives =
            sub.get("oneOf").and_then(Value::as_array).map_or_else(|| vec![sub], |vs| vs.iter().collect());
        let values: Vec<String> = alternatives
            .into_iter()
            .flat_map(|v| {
                v.get("const").into_iter().chain(v.get("enum").and_then(Value::as_array).into_iter().flatten())
            })
            .map(|v| format!("`{v}`"))
            .collect();
        if !values.is_empty() {
            parts.push(values.join(", "));
        }
        let num = |k: &str| sub.get(k).and_then(Value::as_u64);
        match (num("minimum"), num("maximum")) {
            (Some(lo), Some(hi)) => parts.push(format!("{lo}..={hi}")),
            (Some(lo), None) => parts.push(format!("at least {lo}")),
            _ => {}
        }
        if num("minItems") == Some(1) {
            parts.push("not empty".into());
        }
        if num("minLength") == Some(1) {
            parts.push("not empty".into());
        }
        let inner = sub.get("items").unwrap_or(sub);
        if let Some(p) = inner.get("pattern").and_then(Value::as_str) {
            parts.push(format!("`{p}`"));
        }
        if let Some(n) = inner.get("maxLength").and_then(Value::as_u64) {
            parts.push(format!("at most {n} bytes"));
        }
        let template = sub.get("patternProperties").and_then(Value::as_object).and_then(|m| m.values().next());
        let template =
            [Some(sub), sub.get("items"), template].into_iter().flatten().find_map(|s| s.get("x-placeholders"));
        if let Some(Value::Array(names)) = template {
            let kind = if names.iter().any(|n| n == "{ranks}") { "trial" } else { "build" };
            parts.push(format!("{kind} placeholders"));
        }
        parts.join("; ")
    }

    /// A doc comment's first paragraph on one line, rustdoc links unwrapped.
    fn one_line(text: &str) -> String {
        let first = text.split("\n\n").next().unwrap_or_default();
        first.split_whitespace().collect::<Vec<_>>().join(" ").replace("[`Default`]'s", "the default")
    }

    /// The reference table of docs/config.md, as the schema has it.
    pub(crate) fn reference_table() -> String {
        let mut out = String::from("| key | type | default | accepts | what it is |\n|---|---|---|---|---|\n");
        for k in keys(&json_schema()) {
            let cells = [format!("`{}`", k.path), k.kind, k.default, k.accepts, k.description];
            let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::reference::{Key, keys, reference_table};
    use super::*;
    use crate::config::template::{BUILD_PLACEHOLDERS, TRIAL_PLACEHOLDERS};
    use std::path::Path;

    const DOCS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/config.md");
    const START: &str = "<!-- key-reference:start -->\n";
    const END: &str = "<!-- key-reference:end -->";

    /// The reference is the schema's, key for key. `UPDATE_DOCS=1` writes it.
    #[test]
    fn docs_config_md_lists_every_key_of_the_config_types() {
        let docs = std::fs::read_to_string(DOCS).unwrap();
        let (Some(start), Some(end)) = (docs.find(START), docs.find(END)) else {
            panic!("docs/config.md has no {START:?} … {END:?} block")
        };
        let table = reference_table();
        if std::env::var_os("UPDATE_DOCS").is_some() {
            let updated = format!("{}{table}{}", &docs[..start + START.len()], &docs[end..]);
            std::fs::write(DOCS, updated).unwrap();
            return;
        }
        let written = &docs[start + START.len()..end];
        let missing: Vec<Key> = keys(&json_schema())
            .into_iter()
            .filter(|k| !written.contains(&format!("| `{}` |", k.path.replace('|', "\\|"))))
            .collect();
        assert!(missing.is_empty(), "docs/config.md lacks these keys: {missing:#?}\n(UPDATE_DOCS=1 rewrites it)");
        assert_eq!(written, table, "docs/config.md's key reference is not the types': UPDATE_DOCS=1 rewrites it");
    }

    /// Every placeholder the expander knows has its row, in the right
    /// columns, and no row names one it does not know.
    #[test]
    fn docs_config_md_lists_every_placeholder() {
        let docs = std::fs::read_to_string(DOCS).unwrap();
        let section = docs.split("<!-- placeholders:").nth(1).expect("docs/config.md has no placeholders table");
        let rows: Vec<(String, bool, bool)> = section
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                (cells[1].trim_matches(['`', '{', '}']).to_string(), cells[2] == "yes", cells[3] == "yes")
            })
            .collect();
        let mut known: Vec<&str> = BUILD_PLACEHOLDERS.iter().chain(TRIAL_PLACEHOLDERS).copied().collect();
        known.sort_unstable();
        known.dedup();
        let listed: Vec<&str> = rows.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(listed, known, "docs/config.md's placeholders are not the expander's (alphabetical)");
        for (name, build, trial) in &rows {
            assert_eq!(*build, BUILD_PLACEHOLDERS.contains(&name.as_str()), "{{{name}}} in build steps");
            assert_eq!(*trial, TRIAL_PLACEHOLDERS.contains(&name.as_str()), "{{{name}}} in trials");
        }
    }

    /// The schema knows every key the shipped configs use: serde and
    /// schemars read the same attributes, and this holds them to it.
    #[test]
    fn every_key_of_the_shipped_configs_is_in_the_schema() {
        fn check(value: &Value, schema: &Value, path: &str, unknown: &mut Vec<String>) {
            match value {
                Value::Object(map) => {
                    let props = schema.get("properties").and_then(Value::as_object);
                    let pattern =
                        schema.get("patternProperties").and_then(Value::as_object).and_then(|m| m.values().next());
                    for (key, item) in map {
                        match props.and_then(|p| p.get(key)).or(pattern) {
                            Some(sub) => check(item, sub, &format!("{path}.{key}"), unknown),
                            None => unknown.push(format!("{path}.{key}")),
                        }
                    }
                }
                Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        check(item, schema.get("items").unwrap_or(&Value::Null), &format!("{path}[{i}]"), unknown);
                    }
                }
                _ => {}
            }
        }
        let schema = json_schema();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let value: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            // Upstream configs and their overlays are other formats.
            if crate::upstream::is_upstream(&value) || name.contains("overlay") {
                continue;
            }
            let mut unknown = Vec::new();
            check(&value, &schema, "", &mut unknown);
            assert!(unknown.is_empty(), "{name}: keys the schema lacks: {unknown:?}");
            checked += 1;
        }
        assert!(checked >= 4, "only {checked} configs checked");
    }

    #[test]
    fn a_config_may_name_its_schema_and_stays_strict() {
        let mut v: Value = serde_json::from_str(crate::config::DEFAULT_CONFIG_TEXT).unwrap();
        v["$schema"] = "./ccl-coverage.schema.json".into();
        let loaded = crate::config::load_str(&v.to_string(), Path::new("/p/c.json"), &|_| None);
        assert!(loaded.is_ok(), "{:?}", loaded.err());
        v["$schemas"] = "x".into();
        let err = crate::config::load_str(&v.to_string(), Path::new("/p/c.json"), &|_| None).unwrap_err();
        assert!(err.to_string().contains("unknown field `$schemas`"), "{err}");
        let schema = json_schema();
        assert_eq!(schema["additionalProperties"], false, "strict at the top");
        assert_eq!(schema["properties"]["library"]["additionalProperties"], false, "and inside");
    }
}
