//! What no single value can check: references between sections, unique
//! names, ranks within the capacity, and trials whose files would collide.

use super::*;
use crate::error::Result;
use std::collections::{BTreeSet, HashMap};

pub(crate) type Invalid = (String, String);

pub(crate) fn invalid(path: impl Into<String>, msg: impl Into<String>) -> Invalid {
    (path.into(), msg.into())
}

/// What no single value can check: names that must be defined or unique,
/// ranks within the capacity, and trials whose files must not collide.
pub(super) fn validate(c: &Config) -> Result<(), Invalid> {
    check_launch(c)?;
    check_hosts(&c.hosts)?;
    let collectives = unique_names("collectives", c.collectives.iter().map(|x| &x.name))?;
    let sizes = unique_sizes("sizes", &c.sizes)?;
    let variants = check_variants(c)?;
    check_timeouts(&c.timeouts, &collectives, &sizes, &variants)?;
    check_programs(c)?;
    check_trial_count(c)
}

/// `programs`: unique names, launchers that exist, ranks that fit; and a
/// config with something to run (`collectives` with `sizes`, or `programs`).
pub(super) fn check_programs(c: &Config) -> Result<(), Invalid> {
    if c.upstream.is_none() && c.collectives.is_empty() && c.programs.is_empty() {
        return Err(invalid(
            "",
            "expected `collectives` (perf binaries, with `sizes`) or `programs` (plain test programs), or both",
        ));
    }
    if !c.collectives.is_empty() && c.sizes.is_empty() {
        return Err(invalid("sizes", "missing: `collectives` need at least one size such as \"1K\""));
    }
    unique_names("programs", c.programs.iter().map(|p| &p.name))?;
    for (i, p) in c.programs.iter().enumerate() {
        if let Some(l) = &p.launcher {
            launcher_known(c, format!("programs[{i}].launcher"), l)?;
        }
        if let Some(r) = p.ranks {
            ranks_fit(c, format!("programs[{i}].ranks"), r)?;
        }
        unique_sizes(&format!("programs[{i}].sizes"), &p.sizes)?;
        check_program_kind(c, i, p)?;
        if p.sizes.is_empty() {
            sizes_have_values(c, i, p)?;
        }
    }
    Ok(())
}

/// Options the harness gives a program of each kind itself: a second
/// filter or report in `args` would fight the harness's.
const OWN_OPTIONS: &[(ProgramKind, &[&str])] = &[
    (ProgramKind::Gtest, &["--gtest_filter", "--gtest_output"]),
    (ProgramKind::Ctest, &["-R", "--tests-regex", "--output-junit", "--no-tests"]),
];

/// What a program's kind needs: a binary to run (`plain`, `gtest`), a
/// filter only where the runner takes one, ctest without a launcher in front
/// of it, and no option in `args` that the harness sets itself.
fn check_program_kind(c: &Config, i: usize, p: &Program) -> Result<(), Invalid> {
    let kind = p.kind.as_str();
    if p.binary.is_none() && p.kind != ProgramKind::Ctest {
        return Err(invalid(
            format!("programs[{i}]"),
            format!(
                "missing field `binary`: a {kind} program needs its binary (relative to tests.bin_dir unless absolute)"
            ),
        ));
    }
    if p.filter.is_some() && p.kind == ProgramKind::Plain {
        return Err(invalid(
            format!("programs[{i}].filter"),
            "a plain program takes no filter: expected \"kind\": \"gtest\" (--gtest_filter) or \"ctest\" (ctest -R), or the filter in its args",
        ));
    }
    if p.kind == ProgramKind::Ctest {
        let name = p.launcher.as_deref().unwrap_or(&c.launch.launcher);
        if let Some(l) = c.launchers.get(name).filter(|l| l.kind != LauncherKind::Direct) {
            let at = if p.launcher.is_some() { format!("programs[{i}].launcher") } else { format!("programs[{i}]") };
            return Err(invalid(
                at,
                format!(
                    "a ctest program runs ctest, which starts each test itself: expected a launcher of kind direct, \
                     but {name:?} is {:?}{}",
                    l.kind,
                    if p.launcher.is_some() { "" } else { " (launch.launcher; set this program's own \"launcher\")" }
                ),
            ));
        }
    }
    let own = OWN_OPTIONS.iter().find(|(k, _)| *k == p.kind).map_or(&[][..], |(_, o)| o);
    for (j, arg) in p.args.iter().enumerate() {
        let option = arg.split('=').next().unwrap_or_default();
        if let Some(o) = own.iter().find(|o| **o == option) {
            return Err(invalid(
                format!("programs[{i}].args[{j}]"),
                format!(
                    "the harness gives a {kind} trial {o} itself (its filter comes from `filter`, its report goes to its cases folder): remove it from args"
                ),
            ));
        }
    }
    Ok(())
}

/// A program without `sizes` has no `{size}` or `{bytes}`: a template its
/// trial renders may not use them (its own args and env, the config's env,
/// its launcher's args), else it would fail only when the trial starts.
fn sizes_have_values(c: &Config, i: usize, p: &Program) -> Result<(), Invalid> {
    let launcher = p.launcher.as_deref().unwrap_or(&c.launch.launcher);
    let own = p.args.iter().enumerate().map(|(j, a)| (format!("programs[{i}].args[{j}]"), a));
    let own_env = p.env.iter().map(|(k, v)| (format!("programs[{i}].env.{k}"), v));
    let shared_env = c.env.iter().map(|(k, v)| (format!("env.{k}"), v));
    let launcher_args = c
        .launchers
        .get(launcher)
        .into_iter()
        .flat_map(|l| l.args.iter().enumerate().map(move |(j, a)| (format!("launchers.{launcher}.args[{j}]"), a)));
    for (path, text) in own.chain(own_env).chain(shared_env).chain(launcher_args) {
        if let Some(name) = template::first_use(text, template::SIZE_PLACEHOLDERS) {
            let whose = if path.starts_with("programs[") {
                String::new()
            } else {
                format!(" (programs[{i}] {:?} renders it)", p.name)
            };
            return Err(invalid(
                path,
                format!(
                    "`{{{name}}}` has no value: program {:?} has no sizes{whose}; expected \"sizes\": [\"1K\", …] in programs[{i}]",
                    p.name
                ),
            ));
        }
    }
    Ok(())
}

/// Listing the defined launchers says how to fix a typo.
pub(super) fn launcher_known(c: &Config, path: String, name: &str) -> Result<(), Invalid> {
    if c.launchers.contains_key(name) {
        return Ok(());
    }
    let known: Vec<&str> = c.launchers.keys().map(Name::as_str).collect();
    Err(invalid(path, format!("unknown launcher {name:?}; defined in `launchers`: {known:?}")))
}

/// A trial holds a slot per rank, and only `capacity` slots exist.
pub(super) fn ranks_fit(c: &Config, path: String, ranks: usize) -> Result<(), Invalid> {
    if ranks <= c.capacity {
        return Ok(());
    }
    Err(invalid(path, format!("expected 1..={} ranks (the config's capacity), got {ranks}", c.capacity)))
}

/// `launch`: the default launcher exists and its ranks fit.
pub(super) fn check_launch(c: &Config) -> Result<(), Invalid> {
    launcher_known(c, "launch.launcher".into(), &c.launch.launcher)?;
    ranks_fit(c, "launch.ranks".into(), c.launch.ranks)
}

/// `hosts`: each node once (a node named twice would be counted twice), and
/// a bounded list.
pub(super) fn check_hosts(hosts: &[HostConfig]) -> Result<(), Invalid> {
    if hosts.len() > limits::HOSTS {
        return Err(invalid("hosts", format!("{} hosts: expected at most {}", hosts.len(), limits::HOSTS)));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, host) in hosts.iter().enumerate() {
        if let Some(first) = seen.insert(host.name.as_str(), i) {
            return Err(invalid(
                format!("hosts[{i}].name"),
                format!("duplicate host {:?} (also hosts[{first}]): expected each node once", host.name),
            ));
        }
    }
    Ok(())
}

/// `collectives` and `variants`: a name names one entry.
pub(super) fn unique_names<'a>(
    path: &str,
    names: impl Iterator<Item = &'a Name>,
) -> Result<BTreeSet<&'a str>, Invalid> {
    let mut seen = BTreeSet::new();
    for (i, name) in names.enumerate() {
        if !seen.insert(name.as_str()) {
            return Err(invalid(format!("{path}[{i}].name"), format!("duplicate name {name:?}")));
        }
    }
    Ok(seen)
}

/// `sizes` (the config's or a program's, at `path`): each once, by bytes
/// too (`1K` and `1024` would be one trial twice).
pub(super) fn unique_sizes<'a>(path: &str, sizes: &'a [Size]) -> Result<BTreeSet<&'a str>, Invalid> {
    let mut by_bytes: HashMap<u64, usize> = HashMap::new();
    for (i, size) in sizes.iter().enumerate() {
        let Some(first) = by_bytes.insert(size.bytes(), i) else { continue };
        let msg = if sizes[first] == *size {
            format!("duplicate size {size:?}")
        } else {
            format!(
                "{size:?} is the same size as {path}[{first}] {:?} ({} bytes): a duplicate trial",
                sizes[first],
                size.bytes()
            )
        };
        return Err(invalid(format!("{path}[{i}]"), msg));
    }
    Ok(sizes.iter().map(Size::as_str).collect())
}

/// `variants`: unique names, launchers that exist, ranks that fit.
pub(super) fn check_variants(c: &Config) -> Result<BTreeSet<&str>, Invalid> {
    let names = unique_names("variants", c.variants.iter().map(|v| &v.name))?;
    for (i, v) in c.variants.iter().enumerate() {
        if let Some(l) = &v.launcher {
            launcher_known(c, format!("variants[{i}].launcher"), l)?;
        }
        if let Some(r) = v.ranks {
            ranks_fit(c, format!("variants[{i}].ranks"), r)?;
        }
    }
    Ok(names)
}

/// `timeouts`: a rule names only collectives, sizes and variants that exist,
/// else it silently never applies.
pub(super) fn check_timeouts(
    t: &Timeouts,
    collectives: &BTreeSet<&str>,
    sizes: &BTreeSet<&str>,
    variants: &BTreeSet<&str>,
) -> Result<(), Invalid> {
    for (table, rules) in [("overrides", &t.overrides), ("device_coverage", &t.device_coverage)] {
        for (i, rule) in rules.iter().enumerate() {
            for (field, value, known) in [
                ("collective", &rule.collective, collectives),
                ("size", &rule.size, sizes),
                ("variant", &rule.variant, variants),
            ] {
                if let Some(v) = value
                    && !known.contains(v.as_str())
                {
                    return Err(invalid(
                        format!("timeouts.{table}[{i}].{field}"),
                        format!("{v:?} names no {field} of this config; known: {known:?}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// At most `limits::TRIALS` trials: the plan is built in memory at every
/// start. (Whether the trials' files stay apart is the plan's check,
/// `plan::check`.)
pub(super) fn check_trial_count(c: &Config) -> Result<(), Invalid> {
    let variants = c.variants.len().max(1);
    let programs = c.programs.iter().map(|p| p.sizes.len().max(1)).sum::<usize>();
    let count = c
        .collectives
        .len()
        .checked_mul(c.sizes.len())
        .and_then(|n| n.checked_mul(variants))
        .and_then(|n| n.checked_add(programs));
    if count.is_none_or(|n| n > limits::TRIALS) {
        return Err(invalid(
            "collectives",
            format!(
                "{} collectives × {} sizes × {} variants{} is more than {} trials",
                c.collectives.len(),
                c.sizes.len(),
                variants,
                if c.programs.is_empty() { String::new() } else { format!(" + {programs} program trials") },
                limits::TRIALS
            ),
        ));
    }
    Ok(())
}
