//! `ccl-coverage init`: a CMake project's config, written from what CMake and
//! `CTest` already know. It configures and builds the project once, in a
//! scratch folder of its own, with the steps it writes (every target
//! compiled with `{coverage_flags}`), reads `ctest --show-only=json-v1`, and
//! writes one ctest trial per `CTest` test (or, with `--split-gtest`, one gtest
//! trial per top-level suite of a gtest program), the library's objects as
//! the build found them, and `hash_exclude` for the workspace and the config.

use crate::build::cache::BuildSetup;
use crate::config::{DeviceMode, load_str, process_env};
use crate::error::{Context as _, Error, Result};
use crate::exec::process::{Cmd, ERROR_LINES, Limits, Overflow, TAIL_LINES, error_lines, indent_tail};
use crate::toolchain::objects;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The config file init writes, in the project's folder.
pub const CONFIG_FILE: &str = "ccl-coverage.json";
/// The scratch build folder, under the project's `target/` (which the
/// config's `hash_exclude` leaves out, as it does the workspace).
const SCRATCH: &str = "target/ccl-coverage-init";
/// The file that marks a scratch folder as init's own: init builds only in
/// a folder it made.
const MARKER: &str = ".ccl-coverage-init";
/// How long CMake's configure or build, and `CTest`'s listing, may take.
const STEP_LIMIT: Duration = Duration::from_secs(3600);
/// A configure or build step: [`STEP_LIMIT`], and its log's first and last
/// 32 MiB (a failure is excerpted from them).
const STEP_LIMITS: Limits = Limits { time: STEP_LIMIT, stdout: 64 << 20, overflow: Overflow::KeepEnds };
/// How long a gtest program may take to list its tests.
const LIST_LIMIT: Duration = Duration::from_secs(60);

/// What `init` was asked for.
#[derive(Debug, Clone, Default)]
pub struct InitArgs {
    /// The CMake project's folder (default: the current one).
    pub source: Option<PathBuf>,
    /// Overwrite an existing config.
    pub force: bool,
    /// One gtest trial per top-level suite of a `CTest` test's gtest program.
    pub split_gtest: bool,
    /// `NAME=VALUE` cache entries passed to CMake's configure (`-D…`).
    pub defines: Vec<String>,
}

pub fn main(args: &InitArgs) -> ExitCode {
    match init(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            crate::say!("init: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init(args: &InitArgs) -> Result<()> {
    let cwd = std::env::current_dir().context("cannot read the current folder")?;
    let source = match &args.source {
        Some(dir) => cwd.join(dir),
        None => cwd,
    };
    let source =
        source.canonicalize().with_context(|| format!("--source {}: not a folder init can read", source.display()))?;
    if !source.join("CMakeLists.txt").is_file() {
        return Err(Error::new(format!(
            "{} has no CMakeLists.txt: init reads a CMake project (give its folder with --source DIR)",
            source.display()
        )));
    }
    for define in &args.defines {
        if !define.contains('=') || define.starts_with('=') {
            return Err(Error::new(format!("-D{define}: expected -DNAME=VALUE (a CMake cache entry)")));
        }
    }
    let out = source.join(CONFIG_FILE);
    if out.exists() && !args.force {
        return Err(Error::new(format!("{} exists; pass --force to overwrite it", out.display())));
    }
    let scratch = scratch_folder(&source)?;
    let name = project_name(&source);
    let mut config = draft(&name, &args.defines);
    // The config's own steps build the scratch folder: what init saw is what a run builds.
    let loaded = load_str(&serde_json::to_string(&config).unwrap_or_default(), &out, &process_env)?;
    let setup = BuildSetup::new(&loaded.config, true, DeviceMode::Off, None, &process_env)?;
    let mut vars = crate::build::cache::steps::build_vars(&loaded, &setup, jobs());
    vars.set("build_dir", scratch.display().to_string());
    for step in &loaded.config.library.steps {
        let cmd = crate::build::cache::steps::step_cmd(step, &vars, setup.rccl)?.limits(STEP_LIMITS);
        crate::note!("init: {} ({})", step.name, cmd.display());
        run_step(&cmd, &step.name)?;
    }
    let listing = Cmd::new("ctest")
        .args(["--show-only=json-v1"])
        .cwd(&scratch)
        .time_limit(STEP_LIMIT)
        .read()
        .context("CTest could not list the project's tests")?;
    let tests = ctest_tests(&listing)?;
    if tests.is_empty() {
        return Err(Error::new(format!(
            "CTest lists no test in {}: init writes a trial per CTest test (add enable_testing() and add_test() to {})",
            scratch.display(),
            source.join("CMakeLists.txt").display()
        )));
    }
    let mut programs = Vec::new();
    for test in &tests {
        let split = if args.split_gtest { gtest_suites(test, &scratch) } else { None };
        match split {
            Some(suites) => programs.extend(suites),
            None => programs.push(ctest_program(test)),
        }
    }
    let found = objects::discover(&[&scratch]);
    config["library"]["objects"] = json!(library_objects(&found, &scratch, &tests));
    config["programs"] = json!(programs);
    config["toolchain"] = json!({"cc": setup.toolchain.cc.path, "cxx": setup.toolchain.cxx.path});
    let text = serde_json::to_string_pretty(&config).unwrap_or_default() + "\n";
    // What it writes passes the checks every run makes.
    let checked = load_str(&text, &out, &process_env).context("the config init drafted does not load")?;
    let trials = crate::plan::plan(&checked.config).len();
    crate::workspace::files::write_atomic(&out, text.as_bytes())?;
    crate::say!(
        "init: wrote {}: {trials} trials from {} CTest tests (scratch build in {})",
        out.display(),
        tests.len(),
        scratch.display()
    );
    crate::say!("next: ccl-coverage run --config {}", out.display());
    Ok(())
}

/// The scratch build folder: made (with its marker) if absent, reused if
/// init made it, refused otherwise (init writes in no folder it did not make).
fn scratch_folder(source: &Path) -> Result<PathBuf> {
    let dir = source.join(SCRATCH);
    if dir.exists() {
        if !dir.join(MARKER).is_file() {
            return Err(Error::new(format!(
                "{} exists and is not init's scratch build (no {MARKER} in it); move it away",
                dir.display()
            )));
        }
    } else {
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::write(dir.join(MARKER), "ccl-coverage init's scratch build\n")
            .with_context(|| format!("cannot write {}", dir.join(MARKER).display()))?;
    }
    Ok(dir)
}

/// The project's name as a config name: its folder's, cut to what a name may hold.
fn project_name(source: &Path) -> String {
    let raw = source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let name: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    if name.is_empty() { "project".into() } else { name }
}

/// The config before the build: CMake's configure, every target compiled
/// (and linked: CMake passes a language's flags to its link lines) with
/// `{coverage_flags}`, the user's `-D` entries last; then CMake's build.
fn draft(name: &str, defines: &[String]) -> Value {
    let mut configure: Vec<String> = [
        "cmake",
        "-S",
        "{library_src}",
        "-B",
        "{build_dir}",
        "-DCMAKE_C_COMPILER={cc}",
        "-DCMAKE_CXX_COMPILER={cxx}",
        "-DCMAKE_C_FLAGS={coverage_flags}",
        "-DCMAKE_CXX_FLAGS={coverage_flags}",
    ]
    .map(String::from)
    .to_vec();
    // The config expands `$` and fills `{…}`: a value holding either is written escaped.
    configure
        .extend(defines.iter().map(|d| format!("-D{}", d.replace('$', "$$").replace('{', "{{").replace('}', "}}"))));
    let versions = |tool: &str| (14..=30).rev().map(|v| format!("{tool}-{v}")).collect::<Vec<_>>();
    json!({
        "name": name,
        // Found as a run finds it (`CC`/`CXX` first); written as found, after the build.
        "toolchain": {"cc": "clang", "cxx": "clang++", "cc_fallbacks": versions("clang"), "cxx_fallbacks": versions("clang++")},
        "library": {
            "source_dir": ".",
            "hash_exclude": ["target", CONFIG_FILE],
            "steps": [
                {"name": "configure", "argv": configure},
                {"name": "build", "argv": ["cmake", "--build", "{build_dir}", "-j", "{jobs}"]}
            ],
            "objects": ["{build_dir}/*"]
        },
        "launchers": {"direct": {"kind": "direct"}},
        "capacity": jobs(),
        "launch": {"launcher": "direct", "ranks": 1},
        // Until CTest lists them, one trial of every test: a config that loads.
        "programs": [{"name": "ctest", "kind": "ctest"}]
    })
}

fn jobs() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Runs one of init's build steps; a failure is said with its log's error
/// lines first (the linker's `DSO missing` can be far above the tail).
fn run_step(cmd: &Cmd, name: &str) -> Result<()> {
    let (status, stdout, stderr) = cmd.outcome()?;
    if status.success() {
        return Ok(());
    }
    let text = format!("{stdout}{stderr}");
    let errors = error_lines(&text, ERROR_LINES)
        .map(|lines| format!("\nerror lines (line: text):\n{lines}"))
        .unwrap_or_default();
    Err(Error::new(format!(
        "the {name} step failed ({}): {}{errors}\nlast lines:\n{}",
        crate::exec::process::describe_status(status),
        cmd.display(),
        indent_tail(&text, TAIL_LINES)
    )))
}

/// A test as `CTest` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CtestTest {
    name: String,
    command: Vec<String>,
    labels: Vec<String>,
}

/// The tests of `ctest --show-only=json-v1`'s output.
fn ctest_tests(listing: &str) -> Result<Vec<CtestTest>> {
    let json: Value = serde_json::from_str(listing)
        .map_err(|e| Error::new(format!("ctest --show-only=json-v1 wrote no JSON ({e})")))?;
    let Some(tests) = json.get("tests").and_then(Value::as_array) else {
        return Err(Error::new("ctest --show-only=json-v1: no \"tests\" array at the top"));
    };
    tests
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let name = t
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::new(format!("ctest --show-only=json-v1: tests[{i}].name: expected a string")))?;
            let strings = |v: Option<&Value>| -> Vec<String> {
                v.and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
                    .unwrap_or_default()
            };
            let labels = t
                .get("properties")
                .and_then(Value::as_array)
                .and_then(|props| props.iter().find(|p| p.get("name").and_then(Value::as_str) == Some("LABELS")))
                .map(|p| strings(p.get("value")))
                .unwrap_or_default();
            Ok(CtestTest { name: name.to_string(), command: strings(t.get("command")), labels })
        })
        .collect()
}

/// A trial name from parts: what a name may not hold becomes `_`.
fn trial_name(parts: &[&str]) -> String {
    let joined = parts.join(".");
    let name: String = joined
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '_' })
        .collect();
    name.trim_start_matches('.').to_string()
}

/// One ctest trial that runs exactly `test`: `^name$`, the name's regular
/// expression characters escaped, `$` written `$$` (the config expands `$`),
/// its labels before its name.
fn ctest_program(test: &CtestTest) -> Value {
    let escaped: String = test
        .name
        .chars()
        .flat_map(|c| {
            let special = r"\^$.|?*+()[]{}".contains(c);
            special.then_some('\\').into_iter().chain(std::iter::once(c))
        })
        .collect();
    let filter = format!("^{escaped}$").replace('$', "$$");
    let mut parts: Vec<&str> = test.labels.iter().map(String::as_str).collect();
    parts.push(&test.name);
    json!({"name": trial_name(&parts), "kind": "ctest", "filter": filter})
}

/// With `--split-gtest`: one gtest trial per top-level suite of `test`'s
/// program, when it is a gtest program in the build folder that lists its
/// tests (with the test's own arguments, so its own filter holds); `None`
/// otherwise (the test stays one ctest trial).
fn gtest_suites(test: &CtestTest, build_dir: &Path) -> Option<Vec<Value>> {
    let (program, args) = test.command.split_first()?;
    let binary = Path::new(program).strip_prefix(build_dir).ok()?.to_str()?.to_string();
    let listing = Cmd::new(program)
        .args(args)
        .arg("--gtest_list_tests")
        .cwd(build_dir)
        .env(crate::env_names::PROFILE_FILE, build_dir.join("init-list-%p.profraw"))
        .env_remove(crate::env_names::PROFILE_INIT_ONCE)
        .time_limit(LIST_LIMIT)
        .read()
        .ok()?;
    let own: Vec<&String> = args.iter().filter(|a| !a.starts_with("--gtest_filter=")).collect();
    let names = crate::verdict::gtest_list::parse_list(&listing);
    let mut suites: Vec<(String, Vec<String>)> = Vec::new();
    for full in &names {
        let Some((suite, _)) = full.split_once('.') else { continue };
        match suites.iter_mut().find(|(s, _)| s == suite) {
            Some((_, tests)) => tests.push(full.clone()),
            None => suites.push((suite.to_string(), vec![full.clone()])),
        }
    }
    if suites.is_empty() {
        return None;
    }
    let filtered = args.len() != own.len();
    Some(
        suites
            .into_iter()
            .map(|(suite, tests)| {
                // Under the test's own filter, its tests by name; else the whole suite.
                let filter = if filtered { tests.join(":") } else { format!("{suite}.*") };
                let mut labels: Vec<&str> = test.labels.iter().map(String::as_str).collect();
                labels.push(&test.name);
                labels.push(&suite);
                let mut program =
                    json!({"name": trial_name(&labels), "kind": "gtest", "binary": binary, "filter": filter});
                if !own.is_empty() {
                    program["args"] = json!(own);
                }
                program
            })
            .collect(),
    )
}

/// `library.objects`: the instrumented shared libraries the build made,
/// each as `{build_dir}/<path>`; where it made none (a static or
/// header-only library, compiled into its tests), the programs `CTest` runs.
fn library_objects(found: &[objects::Found], build_dir: &Path, tests: &[CtestTest]) -> Vec<String> {
    let rel = |p: &Path| p.strip_prefix(build_dir).ok().map(|r| format!("{{build_dir}}/{}", r.display()));
    let libraries: Vec<String> = found
        .iter()
        .filter(|f| {
            let name = f.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            name.contains(".so") && !f.path.components().any(|c| c.as_os_str() == "CMakeFiles")
        })
        .filter_map(|f| rel(&f.path))
        .collect();
    if !libraries.is_empty() {
        return libraries;
    }
    let mut programs: Vec<String> = tests
        .iter()
        .filter_map(|t| t.command.first())
        .filter(|p| found.iter().any(|f| f.path == Path::new(p)))
        .filter_map(|p| rel(Path::new(p)))
        .collect();
    programs.sort();
    programs.dedup();
    if programs.is_empty() { vec!["{build_dir}/*".to_string()] } else { programs }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ctest --show-only=json-v1` as CMake 3.31 writes it (trimmed).
    const LISTING: &str = r#"{"kind":"ctestInfo","version":{"major":1,"minor":0},
        "tests":[{"name":"ring_push","command":["/b/ring_test","--gtest_filter=RingTest.*"],
                  "properties":[{"name":"WORKING_DIRECTORY","value":"/b"}]},
                 {"name":"a+b (x)","command":["/b/t"],"properties":[{"name":"LABELS","value":["fast","io"]}]}]}"#;

    #[test]
    fn ctest_s_listing_becomes_one_exact_trial_per_test() {
        let tests = ctest_tests(LISTING).unwrap();
        assert_eq!(tests[0].command, ["/b/ring_test", "--gtest_filter=RingTest.*"]);
        assert_eq!(ctest_program(&tests[0]), json!({"name": "ring_push", "kind": "ctest", "filter": "^ring_push$$"}));
        assert_eq!(
            ctest_program(&tests[1]),
            json!({"name": "fast.io.a_b__x_", "kind": "ctest", "filter": r"^a\+b \(x\)$$"})
        );
        let e = ctest_tests(r#"{"tests":[{"command":[]}]}"#).unwrap_err().to_string();
        assert_eq!(e, "ctest --show-only=json-v1: tests[0].name: expected a string");
        assert!(
            ctest_tests("not json").unwrap_err().to_string().starts_with("ctest --show-only=json-v1 wrote no JSON")
        );
    }

    #[test]
    fn user_defines_are_passed_last_and_escaped_for_the_config() {
        let config = draft("p", &["CMAKE_BUILD_TYPE=Debug".into(), "X=${HOME}".into()]);
        let argv = config["library"]["steps"][0]["argv"].as_array().unwrap();
        assert_eq!(argv[argv.len() - 2], "-DCMAKE_BUILD_TYPE=Debug");
        assert_eq!(argv[argv.len() - 1], "-DX=$${{HOME}}");
    }
}
