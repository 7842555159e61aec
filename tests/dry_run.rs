//! `CCL_COV_DRY_RUN=1` on the RCCL and NCCL configs against fake toolchain
//! layouts (scripts standing in for ROCm's and LLVM's tools): the build
//! commands, the device-coverage decision and every trial's argv,
//! environment, working directory and timeout are pinned by snapshots.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn script(path: &Path, body: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A compiler script: `-###` answers with a device job plan (instrumented or
/// not), `--offload-device-only` copies `device_object`, anything else
/// prints `version`.
fn fake_clang(path: &Path, version: &str, device_job: &str, resource_dir: &Path, device_object: Option<&Path>) {
    let copy = device_object.map_or(String::from("exit 1"), |o| format!("cp '{}' \"$out\"", o.display()));
    script(
        path,
        &format!(
            r#"out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
case " $* " in
  *" -print-resource-dir "*) echo "{rd}" ;;
  *" -### "*) echo '{device_job}' >&2 ;;
  *" --offload-device-only "*) {copy} ;;
  *) echo "{version}" ;;
esac
"#,
            rd = resource_dir.display()
        ),
    );
}

struct Run {
    tmp: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Run {
    fn new() -> Run {
        Run { tmp: tempfile::tempdir().unwrap(), env: Vec::new() }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn set(&mut self, key: &str, value: impl Into<String>) {
        self.env.push((key.into(), value.into()));
    }

    /// `CCL_COV_DRY_RUN=json` with machine-specific parts replaced, checked
    /// to be one JSON document.
    fn dry_run_json(&self, config: &str, filter: &[&str]) -> String {
        self.dry_run_as("json", config, filter)
    }

    /// The dry-run text with machine-specific parts replaced.
    fn dry_run(&self, config: &str, filter: &[&str]) -> String {
        self.dry_run_as("1", config, filter)
    }

    fn dry_run_as(&self, mode: &str, config: &str, filter: &[&str]) -> String {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
        cmd.arg("collectives")
            .args(filter)
            .env("CCL_COV_DRY_RUN", mode)
            .env_remove("CCL_COV_OVERLAY")
            .env_remove("CCL_COV_RERUN_FAILED")
            .env_remove("ROCM_PATH")
            .env_remove("MPI_PATH")
            .env_remove("WORKDIR")
            .env_remove("RCCL_TESTS_DIR")
            .env_remove("RCCL_BUILD_DIR")
            .env_remove("RCCL_LIB_PATH")
            .env_remove("RCCL_TEST_MPI_ARGS")
            .env_remove("LD_PRELOAD")
            .env("CCL_COV_CONFIG", root().join(config))
            .env("CCL_COV_WORKSPACE", self.path("ws"))
            .env("CCL_COV_JOBS", "64")
            .env("CARGO_TARGET_DIR", self.path("target"))
            .env("CARGO_MANIFEST_DIR", root())
            .env("LD_LIBRARY_PATH", "/host/lib")
            .env_remove("CCL_COV_DEVICE_COVERAGE")
            .env_remove("CCL_COV_BUILD_DIR")
            .env_remove("CCL_COV_TESTS_DIR")
            .env_remove("CC")
            .env_remove("CXX")
            .env_remove("LLVM_PROFDATA")
            .env_remove("LLVM_COV")
            .env_remove("MPI_HOME")
            .env_remove("CUDA_HOME")
            .env_remove("NVCC_GENCODE")
            .env_remove("NCCL_ONLY_FUNCS")
            .env_remove("NCCL_TESTS_DTYPE")
            .env_remove("NCCL_TESTS_OP")
            .env_remove("CCL_COV_TRIM_ITERATIONS")
            .env_remove("CCL_COV_COVERAGE");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let out = support::output_within(cmd, std::time::Duration::from_secs(120));
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let key = if mode == "json" {
            let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
            doc["build"]["id"].as_str().expect("a build id").to_string()
        } else {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix("build ").and_then(|rest| rest.split_whitespace().next()))
                .expect("a build line")
                .to_string()
        };
        let root_text = root().display().to_string();
        stdout
            .replace(&self.tmp.path().display().to_string(), "<tmp>")
            .replace(&key, "<key>")
            .replace(&root_text, "<root>")
            // Open MPI needs it only when the harness runs as root.
            .replace(" --allow-run-as-root", "")
            .lines()
            .filter(|l| l.trim() != "\"--allow-run-as-root\",")
            // Each attempt's profile names carry a random mark (docs/faults.md).
            .map(|l| format!("{}\n", MARK.replace_all(l, ".<mark>.profraw")))
            .collect()
    }
}

static MARK: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new(r"\.[0-9a-f]{12}\.profraw").expect("a valid regex"));

fn settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(root().join("snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings
}

/// A real instrumented gfx942 device object, for the compiler scripts'
/// device-object probe.
fn device_object(run: &Run) -> PathBuf {
    let kernel = run.path("k.hip");
    fs::write(&kernel, "__attribute__((global)) void k(int* p) { if (p) *p = 1; }\n").unwrap();
    let object = run.path("device.o");
    let mut built = Command::new("/usr/lib/llvm-22/bin/clang++");
    built
        .args([
            "-x",
            "hip",
            "--offload-arch=gfx942",
            "--offload-device-only",
            "--no-gpu-bundle-output",
            "-nogpulib",
            "-nogpuinc",
        ])
        .args(["-fprofile-instr-generate", "-fcoverage-mapping", "-c"])
        .arg(&kernel)
        .arg("-o")
        .arg(&object);
    assert!(support::output_within(built, std::time::Duration::from_secs(120)).status.success());
    object
}

/// What a compiler's resource directory ships for AMD device coverage.
#[derive(Clone, Copy)]
enum Runtimes {
    Both,
    None,
}

/// A compiler layout in `bin` (clang, clang++, llvm-profdata, llvm-cov) whose
/// probes instrument device code, with `runtimes` in `resource`.
fn amd_compiler(run: &Run, bin: &Path, resource: &Path, clang: &str, llvm: &str, runtimes: Runtimes) {
    if let Runtimes::Both = runtimes {
        let arch = std::env::consts::ARCH;
        for rel in [
            "lib/amdgcn-amd-amdhsa/libclang_rt.profile.a",
            &format!("lib/{arch}-unknown-linux-gnu/libclang_rt.profile_rocm.a"),
        ] {
            fs::create_dir_all(resource.join(rel).parent().unwrap()).unwrap();
            fs::write(resource.join(rel), "!<arch>\n").unwrap();
        }
    }
    let object = device_object(run);
    let job = r#" "clang" "-cc1" "-triple" "amdgcn-amd-amdhsa" "-fprofile-instrument=clang""#;
    for name in ["clang", "clang++"] {
        fake_clang(&bin.join(name), clang, job, resource, Some(&object));
    }
    for tool in ["llvm-profdata", "llvm-cov"] {
        script(&bin.join(tool), &format!("echo '{llvm}'\n"));
    }
}

/// The RCCL config's run against a ROCm of `rocm_version` at `<tmp>/rocm`.
fn rccl_run(rocm_version: &str) -> Run {
    let mut run = Run::new();
    let rocm = run.path("rocm");
    fs::create_dir_all(rocm.join(".info")).unwrap();
    fs::write(rocm.join(".info/version"), format!("{rocm_version}\n")).unwrap();
    for src in ["rccl", "rccl-tests"] {
        fs::create_dir_all(run.path(src)).unwrap();
    }
    run.set("ROCM_PATH", rocm.display().to_string());
    run.set("RCCL_SRC", run.path("rccl").display().to_string());
    run.set("RCCL_TESTS_SRC", run.path("rccl-tests").display().to_string());
    // Pin the seed's own command lines (-n 5 -w 2), not the trimmed ones.
    run.set("CCL_COV_TRIM_ITERATIONS", "off");
    run
}

#[test]
fn rccl_config_dry_run_on_a_rocm_715_layout() {
    let run = rccl_run("7.15.0-1");
    let rocm = run.path("rocm");
    let (clang, llvm) = ("AMD clang version 22.0.0git (rocm 7.15.0)", "AMD LLVM version 22.0.0git");
    amd_compiler(&run, &rocm.join("lib/llvm/bin"), &rocm.join("lib/llvm/lib/clang/22"), clang, llvm, Runtimes::Both);
    let text = run.dry_run("configs/mi300x_rccl.json", &["--", "1G"]);
    assert!(text.contains("device coverage: host+device (auto)"), "{text}");
    assert!(text.contains("gate passed by ROCm version"), "{text}");
    assert!(text.contains("-DCMAKE_SHARED_LINKER_FLAGS=-Wl,--whole-archive,"), "{text}");
    settings().bind(|| insta::assert_snapshot!("dry_run-mi300x_rccl", text));
}

/// Upstream LLVM 23.1 with both runtimes, over the HIP runtime of a ROCm
/// older than the version gate: on by capability.
#[test]
fn rccl_config_dry_run_on_an_upstream_llvm_23_layout() {
    let mut run = rccl_run("7.1.0");
    let bin = run.path("llvm-23/bin");
    let (clang, llvm) = ("clang version 23.1.0 (https://github.com/llvm/llvm-project)", "LLVM version 23.1.0");
    amd_compiler(&run, &bin, &run.path("llvm-23/lib/clang/23"), clang, llvm, Runtimes::Both);
    run.set("CC", bin.join("clang").display().to_string());
    run.set("CXX", bin.join("clang++").display().to_string());
    let text = run.dry_run("configs/mi300x_rccl.json", &["--", "AllReduce::1G"]);
    assert!(text.contains("device coverage: host+device (auto)"), "{text}");
    assert!(text.contains("gate passed by capability: upstream clang 23.1"), "{text}");
    settings().bind(|| insta::assert_snapshot!("dry_run-mi300x_rccl-llvm23", text));
}

/// ROCm 10.1 whose compiler ships neither runtime: host-only, with every
/// coverage flag in its `-Xarch_host` form and no link flags.
#[test]
fn rccl_config_dry_run_host_only_fallback() {
    let run = rccl_run("10.1.0");
    let rocm = run.path("rocm");
    let (clang, llvm) = ("AMD clang version 23.0.0git (rocm-10.1.0)", "AMD LLVM version 23.0.0git");
    amd_compiler(&run, &rocm.join("lib/llvm/bin"), &rocm.join("lib/llvm/lib/clang/23"), clang, llvm, Runtimes::None);
    let text = run.dry_run("configs/mi300x_rccl.json", &["--", "AllReduce::1G"]);
    assert!(text.contains("device coverage: host-only (auto): the device profile runtime is missing"), "{text}");
    assert!(
        text.contains("coverage flags: -Xarch_host -fprofile-instr-generate -Xarch_host -fcoverage-mapping"),
        "{text}"
    );
    assert!(!text.contains("coverage link flags"), "{text}");
    settings().bind(|| insta::assert_snapshot!("dry_run-mi300x_rccl-host-only", text));
}

/// An LLVM 19 layout and NCCL sources for the NCCL configs.
fn nccl_run() -> Run {
    let mut run = Run::new();
    let bin = run.path("llvm-19/bin");
    let resource = run.path("llvm-19/lib/clang/19");
    let job = r#" "clang-19" "-cc1" "-triple" "nvptx64-nvidia-cuda" "-fcuda-is-device""#;
    for name in ["clang", "clang++"] {
        fake_clang(&bin.join(name), "Debian clang version 19.1.7 (3~deb12u1)", job, &resource, None);
    }
    for tool in ["llvm-profdata", "llvm-cov"] {
        script(&bin.join(tool), "echo 'Debian LLVM version 19.1.7'\n");
    }
    for src in ["nccl", "nccl-tests"] {
        fs::create_dir_all(run.path(src)).unwrap();
    }
    run.set("CCL_COV_LLVM_BIN", bin.display().to_string());
    run.set("NCCL_SRC", run.path("nccl").display().to_string());
    run.set("NCCL_TESTS_SRC", run.path("nccl-tests").display().to_string());
    // No CUPTI here, whatever this machine has: CCL_COV_CUPTI names an empty place.
    run.set("CCL_COV_CUPTI", run.path("cupti").display().to_string());
    run
}

#[test]
fn nccl_config_dry_run_on_an_llvm_19_layout() {
    let run = nccl_run();
    let text = run.dry_run("configs/h200_nccl.json", &["--", "AllGather"]);
    assert!(
        text.contains("device coverage: host-only (auto): NVIDIA kernel coverage needs CUPTI 13.4 or newer"),
        "{text}"
    );
    settings().bind(|| insta::assert_snapshot!("dry_run-h200_nccl", text));
}

#[test]
fn eight_gpu_nccl_config_dry_run() {
    let run = nccl_run();
    let text = run.dry_run("configs/h200x8_nccl.json", &["--include-ignored", "::1G"]);
    assert!(
        text.contains("mpirun -np 8") && text.contains("-t 1 -g 8") && text.contains("trial Gather::1G::pair (2 ranks"),
        "{text}"
    );
    settings().bind(|| insta::assert_snapshot!("dry_run-h200x8_nccl", text));
}

/// The fixture's upstream-format config, as JSON: gtest, perf and pytest
/// trials, ignored ones with their reason, the timeout-0 cap.
#[test]
fn fixture_upstream_config_json_dry_run() {
    let run = nccl_run();
    let text = run.dry_run_json("configs/local_test_runner.json", &[]);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let trials = doc["trials"].as_array().unwrap();
    let get = |name: &str| trials.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("{name}: {text}"));
    assert_eq!(get("Unit Tests::ArgCheck")["kind"], "gtest");
    assert_eq!(get("Unit Tests::Tuner")["timeout_s"], 600, "timeout 0 gets the overlay's cap");
    assert_eq!(get("MPI Unit Tests::EightRanks")["ignore_reason"], "needs 8 GPUs per node, the machine has 4");
    assert_eq!(get("Python::ctypes")["kind"], "pytest");
    assert_eq!(get("Perf MPI::AllReduce")["launcher"], "mpirun");
    settings().bind(|| insta::assert_snapshot!("dry_run-local_test_runner-json", text));
}

/// The fake ROCm 7.15 layout with the RCCL checkout as upstream's workdir.
fn rccl_shaped_run() -> Run {
    let mut run = rccl_run("7.15.0-1");
    let rocm = run.path("rocm");
    let (clang, llvm) = ("AMD clang version 22.0.0git (rocm 7.15.0)", "AMD LLVM version 22.0.0git");
    amd_compiler(&run, &rocm.join("lib/llvm/bin"), &rocm.join("lib/llvm/lib/clang/22"), clang, llvm, Runtimes::Both);
    run.set("WORKDIR", run.path("rccl").display().to_string());
    run.set("PWD", run.path("rccl").display().to_string());
    run.set("RCCL_TESTS_DIR", run.path("rccl-tests").display().to_string());
    run.set("MPI_PATH", "/opt/ompi");
    run
}

/// An RCCL-shaped `test_runner` config with the default RCCL overlay, against
/// the fake ROCm 7.15 layout: what an RCCL developer's config would run.
#[test]
fn rccl_shaped_upstream_config_json_dry_run() {
    let run = rccl_shaped_run();
    // The overlay adopts the existing RCCL and rccl-tests builds.
    for dir in ["rccl/build/debug/test", "rccl-tests/build"] {
        fs::create_dir_all(run.path(dir)).unwrap();
    }
    // An instrumented object stands for the library (the dry run reads its sections).
    fs::copy(run.path("device.o"), run.path("rccl/build/debug/librccl.so")).unwrap();
    let text = run.dry_run_json("tests/fixtures/upstream-configs/rccl-shaped.json", &[]);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let trials = doc["trials"].as_array().unwrap();
    let get = |name: &str| trials.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("{name}: {text}"));
    assert_eq!(get("NET 2 nodes::NET_AllTests_2Nodes")["ignore_reason"], "needs 2 nodes, 1 available");
    assert_eq!(get("Unit Tests::AllReduce")["argv"][1], "--gtest_filter=AllReduce*");
    assert_eq!(get("SHM::SHM_Basic")["argv"][0], "/opt/ompi/bin/mpirun");
    settings().bind(|| insta::assert_snapshot!("dry_run-rccl-shaped-json", text));
}

/// The same config with the default overlay minus its existing builds: the
/// overlay builds RCCL, and its install.sh step gets upstream's
/// `build_configuration` (install flags first, then the overlay's; upstream's
/// CMake options first) with the coverage rules applied after.
#[test]
fn rccl_shaped_upstream_config_builds_with_upstream_install_flags() {
    let mut run = rccl_shaped_run();
    let mut overlay: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(root().join("configs/rccl-overlay.json")).unwrap()).unwrap();
    overlay["library"].as_object_mut().unwrap().remove("existing_build");
    overlay["tests"].as_object_mut().unwrap().remove("existing_bin_dir");
    fs::write(run.path("building-overlay.json"), overlay.to_string()).unwrap();
    run.set("CCL_COV_OVERLAY", run.path("building-overlay.json").display().to_string());
    let text = run.dry_run_json("tests/fixtures/upstream-configs/rccl-shaped.json", &["--", "Unit Tests::AllReduce"]);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["build"]["existing_build"], false, "{text}");
    let command = doc["build"]["steps"][0]["command"].as_str().unwrap_or_else(|| panic!("{text}"));
    assert!(
        command.contains(
            "<tmp>/rccl/install.sh --debug -t --enable-mpi-tests --no_clean -t -l --enable-mpi-tests --no_clean \
             --enable-code-coverage -j 64 --cmake-options '-DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DGPU_TARGETS=gfx942 \
             -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DBITCODE_LIB_ARCH=gfx942 "
        ),
        "upstream's flags and options come first: {command}"
    );
    assert!(command.ends_with("-DENABLE_CODE_COVERAGE=ON -DENABLE_FULL_COVERAGE=ON'"), "{command}");
    settings().bind(|| insta::assert_snapshot!("dry_run-rccl-shaped-building-json", text));
}

/// A harness binary run directly (no `CARGO_MANIFEST_DIR`, no
/// `CARGO_TARGET_DIR`) from inside the checkout (`src/`): it finds the
/// checkout's default config and its `target/`, not `src/target`.
#[test]
fn a_binary_run_directly_from_inside_the_checkout_finds_its_root() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
    for (key, _) in std::env::vars() {
        if key.starts_with("CCL_COV_") || key.starts_with("CARGO") || key == "NEXTEST_RUN_ID" {
            cmd.env_remove(key);
        }
    }
    let out = cmd.arg("collectives").env("CCL_COV_DRY_RUN", "json").current_dir(root().join("src")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(plan["workspace"], root().join("target/ccl-coverage/local").display().to_string(), "{plan}");
    assert_eq!(plan["config"]["path"], root().join("configs/local.json").display().to_string(), "{plan}");
}

/// The dry run of `configs/local.json` (one trial) adopting the existing
/// build `build`, as text (`1`) or JSON: exit code, stdout and stderr.
fn dry_run_adopting(build: &Path, mode: &str) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
    for (key, _) in std::env::vars() {
        if key.starts_with("CCL_COV_") || key == "NEXTEST_RUN_ID" {
            cmd.env_remove(key);
        }
    }
    cmd.args(["collectives", "--exact", "AllReduce::1K::ring"])
        .env("CCL_COV_DRY_RUN", mode)
        .env("CCL_COV_BUILD_DIR", build)
        .env("CCL_COV_WORKSPACE", build.with_file_name("ws"))
        .env("CARGO_MANIFEST_DIR", root())
        .current_dir(root());
    let out = support::output_within(cmd, std::time::Duration::from_secs(120));
    (out.status.code(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// Both forms of the dry run with an existing build that cannot be used:
/// the whole plan (build and trials), then the problem, and exit status 1.
fn assert_plan_then_problem(build: &Path, problem: &str) {
    let (code, text, err) = dry_run_adopting(build, "1");
    assert_eq!(code, Some(1), "{text}{err}");
    let b = build.display();
    assert!(text.contains(&format!("build (none: cannot be used, see the problems below) in {b}\n")), "{text}");
    assert!(text.contains(&format!("  test binaries: {b}/ccl-tests\n")), "{text}");
    assert!(text.contains("trial AllReduce::1K::ring (4 ranks, launcher threads"), "{text}");
    assert!(text.contains(&format!("  argv: {b}/ccl-tests/all_reduce_perf ")), "{text}");
    assert!(text.ends_with(&format!("problem: {problem}\n")), "{text}");
    assert!(err.contains(&format!("ccl-coverage: dry run: {problem}")), "{err}");

    let (code, text, err) = dry_run_adopting(build, "json");
    assert_eq!(code, Some(1), "{text}{err}");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
    assert_eq!(doc["build"]["id"], serde_json::Value::Null, "{text}");
    assert_eq!(doc["build"]["problems"], serde_json::json!([problem]), "{text}");
    assert_eq!(doc["trials"][0]["argv"][0], format!("{b}/ccl-tests/all_reduce_perf"), "{text}");
}

#[test]
fn a_missing_existing_build_is_named_after_the_whole_plan() {
    let dir = tempfile::tempdir().unwrap();
    let build = dir.path().join("build");
    let problem =
        format!("the existing build {} (CCL_COV_BUILD_DIR or library.existing_build) does not exist", build.display());
    assert_plan_then_problem(&build, &problem);
}

/// The library is instrumented, its tuner plugin is not: the plugin is named.
#[test]
fn an_uninstrumented_existing_build_is_named_after_the_whole_plan() {
    let dir = tempfile::tempdir().unwrap();
    let build = dir.path().join("build");
    for sub in ["ccl", "ccl-tuner"] {
        fs::create_dir_all(build.join(sub)).unwrap();
    }
    fs::copy(root().join("tests/fixtures/objects/instrumented.o"), build.join("ccl/libccl.so")).unwrap();
    fs::copy("/bin/sh", build.join("ccl-tuner/libccl-tuner.so")).unwrap();
    let plugin = build.join("ccl-tuner/libccl-tuner.so");
    let (_, text, _) = dry_run_adopting(&build, "json");
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let problem =
        doc["build"]["problems"][0].as_str().unwrap_or_else(|| panic!("no problem named: {text}")).to_string();
    assert!(
        problem.starts_with(&format!("the existing build's {} carries no coverage mapping", plugin.display())),
        "{problem}"
    );
    assert_plan_then_problem(&build, &problem);
}
