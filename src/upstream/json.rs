//! The JSON tree the upstream resolver works on.
//!
//! Upstream reads configs with Python's `json.load`: objects keep their keys in
//! file order and a repeated key silently keeps the last value, in the first
//! key's place. `serde_json`'s `Map` (without `preserve_order`) sorts keys and
//! hides duplicates, so this small tree keeps objects as ordered pairs and the
//! parser reports every duplicate's JSON path.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Number;
use std::cell::RefCell;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum J {
    Null,
    Bool(bool),
    Num(Number),
    Str(String),
    Arr(Vec<J>),
    Obj(Obj),
}

/// An object in file order, with Python `dict` semantics: assigning an
/// existing key replaces its value in place.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Obj(Vec<(String, J)>);

impl Obj {
    pub(super) fn get(&self, key: &str) -> Option<&J> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub(super) fn contains(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Returns whether the key was already there.
    pub(super) fn insert(&mut self, key: String, value: J) -> bool {
        if let Some((_, v)) = self.0.iter_mut().find(|(k, _)| *k == key) {
            *v = value;
            true
        } else {
            self.0.push((key, value));
            false
        }
    }

    pub(super) fn remove(&mut self, key: &str) -> Option<J> {
        let at = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(at).1)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &J)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

impl J {
    /// What the value is, for "expected X, got Y" messages.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            J::Null => "null",
            J::Bool(_) => "a boolean",
            J::Num(_) => "a number",
            J::Str(_) => "a string",
            J::Arr(_) => "an array",
            J::Obj(_) => "an object",
        }
    }

    pub(super) fn as_str(&self) -> Option<&str> {
        if let J::Str(s) = self { Some(s) } else { None }
    }

    pub(super) fn as_obj(&self) -> Option<&Obj> {
        if let J::Obj(o) = self { Some(o) } else { None }
    }

    /// The value as Python's `str()` writes it, for `cmake_options` values.
    pub(super) fn python_str(&self) -> String {
        match self {
            J::Bool(true) => "True".into(),
            J::Bool(false) => "False".into(),
            J::Num(n) => match n.as_f64() {
                Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e16 => format!("{f:.1}"),
                _ => n.to_string(),
            },
            J::Str(s) => s.clone(),
            J::Null => "None".into(),
            J::Arr(_) | J::Obj(_) => String::new(),
        }
    }
}

/// `parent.key`, the JSON path style of the crate's config errors.
pub(super) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() { key.to_string() } else { format!("{parent}.{key}") }
}

/// Parses `text`; returns the tree and the JSON path of every repeated key.
pub(super) fn parse(text: &str) -> Result<(J, Vec<String>), serde_json::Error> {
    let duplicates = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Seed { path: String::new(), duplicates: &duplicates }.deserialize(&mut de)?;
    de.end()?;
    Ok((value, duplicates.into_inner()))
}

struct Seed<'a> {
    path: String,
    duplicates: &'a RefCell<Vec<String>>,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = J;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<J, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = J;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<J, E> {
        Ok(J::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<J, E> {
        Ok(J::Num(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<J, E> {
        Ok(J::Num(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<J, E> {
        Number::from_f64(v).map(J::Num).ok_or_else(|| E::custom("a number JSON cannot hold"))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<J, E> {
        Ok(J::Str(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<J, E> {
        Ok(J::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
        let mut items = Vec::new();
        loop {
            let path = format!("{}[{}]", self.path, items.len());
            match seq.next_element_seed(Seed { path, duplicates: self.duplicates })? {
                Some(item) => items.push(item),
                None => return Ok(J::Arr(items)),
            }
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
        let mut obj = Obj::default();
        while let Some(key) = map.next_key::<String>()? {
            let path = join(&self.path, &key);
            let value = map.next_value_seed(Seed { path: path.clone(), duplicates: self.duplicates })?;
            if obj.insert(key, value) {
                self.duplicates.borrow_mut().push(path);
            }
        }
        Ok(J::Obj(obj))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_keep_the_last_value_in_the_first_place_and_are_reported() {
        let (v, dups) = parse(r#"{"a": 1, "b": {"x": [{"k": 1, "k": 2}]}, "a": 3}"#).unwrap();
        let obj = v.as_obj().unwrap();
        assert_eq!(obj.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(obj.get("a"), Some(&J::Num(3.into())));
        assert_eq!(dups, ["b.x[0].k", "a"]);
    }

    #[test]
    fn python_str_of_cmake_values() {
        assert_eq!(J::Bool(true).python_str(), "True");
        assert_eq!(J::Num(Number::from_f64(2.0).unwrap()).python_str(), "2.0");
        assert_eq!(J::Num(7.into()).python_str(), "7");
    }
}
