//! The build's cache key: what changes the build's result, hashed. The
//! harness, the toolchain, the coverage mode, the resolved build commands and
//! the sources, or the identity of an existing build.

use super::BuildSetup;
use super::identity::{dir_identity, file_identity, hash_tree};
use super::manifest::ObjectRecord;
use super::steps::step_cmd;
use crate::bail;
use crate::config::template::Vars;
use crate::context::Context;
use crate::error::{Context as _, Error, Result};
use crate::toolchain::objects;
use crate::workspace::files;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Stands for the build directory in the cache key, which must not depend
/// on where the cache lives.
const BUILD_DIR_MARK: &str = "<build_dir>";

/// The build's cache key: a hash of labelled values, each ended by a NUL so
/// that no two sequences of values hash alike.
struct BuildKey(Sha256);

impl BuildKey {
    fn new() -> BuildKey {
        BuildKey(Sha256::new())
    }

    fn feed(&mut self, label: &str, value: &str) {
        self.0.update(label.as_bytes());
        self.0.update([0]);
        self.0.update(value.as_bytes());
        self.0.update([0]);
    }

    fn finish(self) -> String {
        files::hex(&self.0.finalize()[..8])
    }
}

/// The key covers what changes the result: the harness, the toolchain, the
/// coverage mode, the resolved build commands (with `{build_dir}` left as a
/// mark, so the key does not depend on where the cache lives) and the
/// sources, or the identity of existing builds. Existing objects are
/// inspected on the way and returned; why an existing build cannot be used
/// goes to `problems`.
pub(super) type KeyParts = (String, Option<Vec<ObjectRecord>>, (Option<String>, Option<String>));

pub(super) fn build_key(
    ctx: &Context,
    setup: &BuildSetup,
    vars: &mut Vars,
    problems: &mut Vec<Error>,
) -> Result<KeyParts> {
    let loaded = &ctx.loaded;
    let config = &loaded.config;
    let tc = &setup.toolchain;
    let mut key = BuildKey::new();
    key.feed("harness", env!("CARGO_PKG_VERSION"));
    key.feed("cc", &format!("{} {}", tc.cc.path.display(), tc.cc.version));
    key.feed("cxx", &format!("{} {}", tc.cxx.path.display(), tc.cxx.version));
    // The report runs only the llvm-profdata and llvm-cov the build records
    // (by version and checksum): another of them is another build, or a
    // changed `LLVM_COV` would be refused until the cache is cleaned.
    for tool in [&tc.llvm_profdata, &tc.llvm_cov] {
        key.feed(
            "llvm tool",
            &format!("{} {} {}", tool.path.display(), tool.version, tool.sha256.as_deref().unwrap_or("")),
        );
    }
    key.feed("coverage", &format!("{} {}", ctx.coverage, setup.coverage_flags.join(" ")));
    key.feed("device", &setup.device.enabled.to_string());
    let mut sums = (None, None);
    let existing_objects = if let Some(dir) = &ctx.existing_build {
        vars.set("build_dir", dir.display().to_string());
        let inspected = inspect_existing(ctx, vars, dir).and_then(|objects| {
            for object in &objects {
                key.feed("existing object", &file_identity(&object.path)?);
            }
            Ok(objects)
        });
        inspected.map_err(|e| problems.push(e)).ok()
    } else {
        vars.set("build_dir", BUILD_DIR_MARK);
        for step in &config.library.steps {
            key.feed("library step", &step_cmd(step, vars, setup.rccl)?.display());
        }
        for object in &config.library.objects {
            key.feed("object", &vars.render(object)?);
        }
        let sum = hash_tree(&loaded.library_src(), &config.library.hash_exclude)?;
        key.feed("library_src", &sum);
        sums.0 = Some(sum);
        None
    };
    if let Some(dir) = &ctx.existing_tests {
        match dir_identity(dir) {
            Ok(identity) => key.feed("existing tests", &identity),
            Err(e) => problems.push(e),
        }
    } else {
        for step in &config.tests.steps {
            key.feed("tests step", &step_cmd(step, vars, setup.rccl)?.display());
        }
        key.feed("bin_dir", &vars.render(&config.tests.bin_dir)?);
        let exclude = config.tests_hash_exclude();
        // One tree (one build makes both) is hashed once.
        let same_tree = loaded.tests_src() == loaded.library_src() && exclude == config.library.hash_exclude;
        let sum = match sums.0.clone().filter(|_| same_tree) {
            Some(sum) => sum,
            None => hash_tree(&loaded.tests_src(), &exclude)?,
        };
        key.feed("tests_src", &sum);
        sums.1 = Some(sum);
    }
    Ok((key.finish(), existing_objects, sums))
}

/// Inspects the objects of an existing build: each must exist and carry
/// coverage mapping, else the error says how to get one that does.
pub(super) fn inspect_existing(ctx: &Context, vars: &Vars, dir: &Path) -> Result<Vec<ObjectRecord>> {
    if !dir.is_dir() {
        bail!("the existing build {} (CCL_COV_BUILD_DIR or library.existing_build) does not exist", dir.display());
    }
    library_objects(
        ctx,
        vars,
        ctx.coverage,
        |_, path| {
            Error::new(format!("the existing build {} has no {} (library.objects)", dir.display(), path.display()))
        },
        |_, path| {
            Error::new(format!(
                "the existing build's {} carries no coverage mapping: it was built without coverage instrumentation. Rebuild it with {} (for RCCL: install.sh --debug --enable-code-coverage), or unset CCL_COV_BUILD_DIR so that ccl-coverage builds the library itself",
                path.display(),
                ctx.loaded.config.coverage.host_flags.join(" ")
            ))
        },
    )
}

/// Whether an object's path is a pattern (`*`, `?` or `[` in its file name).
fn is_pattern(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n.to_string_lossy().contains(['*', '?', '[']))
}

/// The instrumented ELF programs and libraries that `library.objects[i]`,
/// a pattern, matches (a folder's test programs: `{build_dir}/tests/*`);
/// what else it matches (CMake's files, scripts) is not an object and is
/// passed over. A pattern that matches no instrumented binary is an error
/// that names it, as a missing object is.
fn object_pattern(ctx: &Context, i: usize, pattern: &Path) -> Result<Vec<ObjectRecord>> {
    let mut records = Vec::new();
    let mut passed_over = 0;
    for path in super::manifest::glob_files(pattern)
        .with_context(|| format!("{}: library.objects[{i}]", ctx.loaded.path.display()))?
    {
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        match objects::inspect_with_id(&path) {
            Ok((instrumentation, build_id)) if instrumentation.is_instrumented() => {
                records.push(ObjectRecord { path, instrumentation, sum: None, backend: None, build_id });
            }
            _ => passed_over += 1,
        }
    }
    if records.is_empty() {
        bail!(
            "{}: library.objects[{i}]: the pattern {} matches no instrumented program or library ({passed_over} other files match it); fix the pattern or build those targets with {{coverage_flags}}",
            ctx.loaded.path.display(),
            pattern.display()
        );
    }
    Ok(records)
}

/// The config's `library.objects`, each of which must exist and, when
/// `coverage` is on, carry coverage mapping; `missing` and `uninstrumented`
/// say why not (with the object's index).
pub(super) fn library_objects(
    ctx: &Context,
    vars: &Vars,
    coverage: bool,
    missing: impl Fn(usize, &Path) -> Error,
    uninstrumented: impl Fn(usize, &Path) -> Error,
) -> Result<Vec<ObjectRecord>> {
    let mut records = Vec::new();
    for (i, template) in ctx.loaded.config.library.objects.iter().enumerate() {
        let path = PathBuf::from(vars.render(template)?);
        if is_pattern(&path) {
            records.extend(object_pattern(ctx, i, &path)?);
            continue;
        }
        if !path.is_file() {
            return Err(missing(i, &path));
        }
        // A library is often a chain of links to its versioned file
        // (libnccl.so -> libnccl.so.2 -> libnccl.so.2.x.y): the record names
        // the file itself, whose bytes the checksums then cover, and which
        // they read without following a link.
        let path = std::fs::canonicalize(&path)
            .with_context(|| format!("library.objects[{i}]: cannot resolve {} to the file it names", path.display()))?;
        let (instrumentation, build_id) = objects::inspect_with_id(&path)?;
        if coverage && !instrumentation.is_instrumented() {
            return Err(uninstrumented(i, &path));
        }
        if !records.iter().any(|r: &ObjectRecord| r.path == path) {
            records.push(ObjectRecord { path, instrumentation, sum: None, backend: None, build_id });
        }
    }
    Ok(records)
}

/// The build's inputs a config names, each labelled, as a build records them
/// (`build.json`'s `inputs`) and a report recomputes them from the config:
/// the compilers, the coverage flags, each step's command,
/// `library.objects` and `tests.bin_dir`, or the existing builds' folders.
/// Not the sources (a changed source is said, not refused: `sources_changed`)
/// and not `{jobs}` or where the cache lives, which change no result.
/// `existing` are the existing builds of the library and of the tests
/// (`CCL_COV_BUILD_DIR`, `CCL_COV_TESTS_DIR`, or the config's).
pub(crate) fn inputs(
    ctx: &Context,
    setup: &BuildSetup,
    existing: (Option<&Path>, Option<&Path>),
) -> Result<Vec<(String, String)>> {
    let config = &ctx.loaded.config;
    let tc = &setup.toolchain;
    let mut vars = super::steps::build_vars(&ctx.loaded, setup, 1);
    vars.set("jobs", "<jobs>");
    let mut out: Vec<(String, String)> = Vec::new();
    let mut put = |label: String, value: String| out.push((label, value));
    // The compilers make the objects; the report's LLVM tools are checked
    // against the build's apart (`toolchain::resolve_as_built`).
    for (name, tool) in [("cc", &tc.cc), ("cxx", &tc.cxx)] {
        put(format!("toolchain {name}"), format!("{} ({})", tool.path.display(), tool.version));
    }
    put("{coverage_flags}".into(), setup.coverage_flags.join(" "));
    put("{coverage_link_flags}".into(), setup.coverage_link_flags.join(" "));
    if let Some(dir) = existing.0 {
        vars.set("build_dir", dir.display().to_string());
        put("existing build".into(), dir.display().to_string());
    } else {
        vars.set("build_dir", BUILD_DIR_MARK);
        for step in &config.library.steps {
            put(format!("library step {:?}", step.name), step_cmd(step, &vars, setup.rccl)?.display());
        }
    }
    for (i, object) in config.library.objects.iter().enumerate() {
        put(format!("library.objects[{i}]"), vars.render(object)?);
    }
    if let Some(dir) = existing.1 {
        put("existing tests".into(), dir.display().to_string());
    } else {
        for step in &config.tests.steps {
            put(format!("tests step {:?}", step.name), step_cmd(step, &vars, setup.rccl)?.display());
        }
        put("tests.bin_dir".into(), vars.render(&config.tests.bin_dir)?);
    }
    Ok(out)
}

/// What differs between the inputs a build recorded and those the config
/// names now, one `label: …` each; empty when they are the same.
pub(crate) fn inputs_differ(built: &[(String, String)], now: &[(String, String)]) -> Vec<String> {
    let built_map: std::collections::BTreeMap<&str, &str> =
        built.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let now_map: std::collections::BTreeMap<&str, &str> = now.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut said = Vec::new();
    for (label, was) in built.iter().map(|(k, v)| (k.as_str(), v.as_str())) {
        match now_map.get(label) {
            Some(is) if *is == was => {}
            Some(is) => said.push(format!("{label}: the build's `{was}`, the config's `{is}`")),
            None => said.push(format!("{label}: the build's `{was}`, none in the config")),
        }
    }
    for (label, is) in now.iter().map(|(k, v)| (k.as_str(), v.as_str())) {
        if !built_map.contains_key(label) {
            said.push(format!("{label}: none in the build, the config's `{is}`"));
        }
    }
    said
}
