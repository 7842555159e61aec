//! Device coverage AUTO/ON/OFF against real compilers (clang 19, clang 22),
//! a fake ROCm ≥ 7.15 layout for the positive path (a script standing in for
//! the compiler, plus a runtime file), an old ROCm for the version gate, and
//! the report's device-object path with a real gfx942 device ELF built by
//! clang 22 + lld 22.

use ccl_coverage::config::{DeviceConfig, DeviceMode};
use ccl_coverage::device::{self, DeviceDecision};
use ccl_coverage::fixture;
use ccl_coverage::process::Cmd;
use ccl_coverage::report::{self, ReportInputs};
use ccl_coverage::toolchain::Tool;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const CLANG19: &str = "/usr/lib/llvm-19/bin/clang++";
const LLVM22: &str = "/usr/lib/llvm-22/bin";

fn tool(path: &str, major: u32) -> Tool {
    Tool { path: path.into(), version: format!("clang version {major}"), major }
}

fn clang22() -> Tool {
    tool(&format!("{LLVM22}/clang++"), 22)
}

fn rocm(version: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join(".info")).unwrap();
    fs::write(dir.path().join(".info/version"), format!("{version}\n")).unwrap();
    dir
}

fn hip(rocm: &Path) -> DeviceConfig {
    DeviceConfig {
        mode: DeviceMode::Auto,
        target: Some("gfx942".into()),
        rocm_path: Some(rocm.display().to_string()),
        linker: true,
        objects: Vec::new(),
    }
}

/// AUTO, ON and OFF for one setup: AUTO's decision, ON's error (or
/// decision), OFF's decision.
fn all_modes(cfg: &DeviceConfig, cxx: &Tool) -> (DeviceDecision, Result<DeviceDecision, String>, DeviceDecision) {
    let auto = device::decide(DeviceMode::Auto, cfg, cxx).unwrap();
    let on = device::decide(DeviceMode::On, cfg, cxx).map_err(|e| e.to_string());
    let off = device::decide(DeviceMode::Off, cfg, cxx).unwrap();
    assert!(!off.enabled, "OFF never instruments device code: {off:?}");
    (auto, on, off)
}

#[test]
fn clang19_accepts_device_flags_but_does_not_instrument() {
    let rocm = rocm("7.15.0");
    let (auto, on, off) = all_modes(&hip(rocm.path()), &tool(CLANG19, 19));
    assert!(!auto.enabled);
    assert!(
        auto.reason.starts_with("the compiler does not instrument device code: the gfx942 -cc1 job of"),
        "{}",
        auto.reason
    );
    assert!(auto.reason.contains("accepted and silently ignored"), "{}", auto.reason);
    let err = on.unwrap_err();
    assert!(err.contains("unavailable because the compiler does not instrument device code"), "{err}");
    assert!(err.contains("use the clang of ROCm 7.15 or newer"), "{err}");
    assert!(
        off.reason.starts_with("off as requested (it would be unavailable anyway: the compiler does not instrument"),
        "{}",
        off.reason
    );
}

#[test]
fn clang22_instruments_device_code_but_has_no_runtime() {
    let rocm = rocm("7.15.0");
    let (auto, on, off) = all_modes(&hip(rocm.path()), &clang22());
    assert!(!auto.enabled);
    let rd = "/usr/lib/llvm-22/lib/clang/22";
    assert_eq!(
        auto.reason,
        format!(
            "the device profile runtime is missing: searched {rd}/lib/amdgcn-amd-amdhsa/libclang_rt.profile.a, {rd}/lib/linux/libclang_rt.profile-amdgcn.a"
        )
    );
    assert!(on.unwrap_err().contains("ships the AMDGPU profile runtime"));
    assert!(off.reason.contains("the device profile runtime is missing"), "{}", off.reason);
    // Host-only on a compiler that would instrument device code: -Xarch_host forms.
    let flags = device::coverage_flags(&["-fprofile-instr-generate".into()], &auto);
    assert_eq!(flags, ["-Xarch_host", "-fprofile-instr-generate"]);
}

#[test]
fn host_only_flags_really_leave_device_code_alone() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("k.hip");
    fs::write(&src, "__attribute__((global)) void k(int* p) { if (p) *p = 1; }\n").unwrap();
    let plan = |flags: &[&str]| {
        Cmd::new(format!("{LLVM22}/clang++"))
            .args(["-x", "hip", "--offload-arch=gfx942", "-nogpulib", "-nogpuinc", "-c"])
            .arg(src.display().to_string())
            .args(flags.iter().copied())
            .arg("-###")
            .read_all()
            .unwrap()
    };
    let both = plan(&["-fprofile-instr-generate", "-fcoverage-mapping"]);
    assert!(device::device_job_instrumented(&both, "amdgcn-amd-amdhsa"), "clang 22 instruments device code by default");
    let host_only = plan(&["-Xarch_host", "-fprofile-instr-generate", "-Xarch_host", "-fcoverage-mapping"]);
    assert!(!device::device_job_instrumented(&host_only, "amdgcn-amd-amdhsa"));
    assert!(device::device_job_instrumented(&host_only, "x86_64-pc-linux-gnu"));
}

#[test]
fn cuda_targets_are_host_only_with_the_nvptx_reason() {
    let cfg = DeviceConfig { target: Some("sm_90".into()), ..hip(Path::new("/nonexistent")) };
    let (auto, on, _) = all_modes(&cfg, &clang22());
    assert!(!auto.enabled);
    assert!(
        auto.reason.starts_with("CUDA/NVPTX device code cannot be instrumented: the nvptx64-nvidia-cuda -cc1 job of"),
        "{}",
        auto.reason
    );
    assert!(auto.reason.ends_with("NVIDIA backends are host-only today"), "{}", auto.reason);
    assert!(on.unwrap_err().contains("there is no fix today"));
    assert_eq!(device::coverage_flags(&["-fcoverage-mapping".into()], &auto), ["-fcoverage-mapping"]);
}

#[test]
fn old_rocm_is_stopped_by_the_version_gate() {
    let rocm = rocm("7.1.0");
    let (auto, on, _) = all_modes(&hip(rocm.path()), &clang22());
    assert_eq!(
        auto.reason,
        format!("device coverage needs ROCm 7.15 or newer, and {} is ROCm 7.1.0", rocm.path().display())
    );
    assert!(on.unwrap_err().contains("point coverage.device.rocm_path"));
}

#[test]
fn disabled_device_linker_blocks_first() {
    let rocm = rocm("7.15.0");
    let cfg = DeviceConfig { linker: false, ..hip(rocm.path()) };
    let (auto, on, _) = all_modes(&cfg, &tool(CLANG19, 19));
    assert!(auto.reason.starts_with("the device linker is disabled"), "{}", auto.reason);
    assert!(on.unwrap_err().contains("coverage.device.linker: true"));
}

/// A real gfx942 device code object with coverage mapping.
fn device_elf(dir: &Path, name: &str) -> PathBuf {
    let src = dir.join("kernel.hip");
    fs::write(&src, "__attribute__((global)) void ccl_kernel(int* p) { if (p) *p = 1; }\n").unwrap();
    let out = dir.join(name);
    Cmd::new(format!("{LLVM22}/clang++"))
        .args(["-x", "hip", "--offload-arch=gfx942", "--offload-device-only", "--no-gpu-bundle-output"])
        .args(["-nogpulib", "-nogpuinc", "-fprofile-instr-generate", "-fcoverage-mapping", "-c"])
        .arg(src.display().to_string())
        .arg("-o")
        .arg(out.display().to_string())
        .read()
        .unwrap();
    out
}

/// A ROCm ≥ 7.15 layout: a compiler script that plans instrumented device
/// jobs, "compiles" by copying a real instrumented device object, and has the
/// device profile runtime in its resource directory.
#[test]
fn fake_rocm_715_layout_turns_device_coverage_on() {
    let rocm = rocm("7.15.0");
    let bin = rocm.path().join("lib/llvm/bin");
    fs::create_dir_all(&bin).unwrap();
    let resource = rocm.path().join("lib/llvm/lib/clang/22");
    let runtime = resource.join("lib/amdgcn-amd-amdhsa/libclang_rt.profile.a");
    fs::create_dir_all(runtime.parent().unwrap()).unwrap();
    fs::write(&runtime, "!<arch>\n").unwrap();
    let elf = device_elf(rocm.path(), "prebuilt-device.o");
    let script = format!(
        r#"#!/bin/sh
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
case " $* " in
  *" -print-resource-dir "*) echo "{resource}" ;;
  *" -### "*) echo ' "{bin}/clang-22" "-cc1" "-triple" "amdgcn-amd-amdhsa" "-fcuda-is-device" "-fprofile-instrument=clang" "-fcoverage-mapping"' >&2
             echo ' "{bin}/clang-22" "-cc1" "-triple" "x86_64-unknown-linux-gnu" "-fprofile-instrument=clang"' >&2 ;;
  *" --offload-device-only "*) cp "{elf}" "$out" ;;
  *) echo "AMD clang version 22.0.0git (rocm-7.15)" ;;
esac
"#,
        resource = resource.display(),
        bin = bin.display(),
        elf = elf.display()
    );
    let cxx = bin.join("clang++");
    fs::write(&cxx, script).unwrap();
    fs::set_permissions(&cxx, fs::Permissions::from_mode(0o755)).unwrap();
    let cxx = tool(&cxx.display().to_string(), 22);
    let (auto, on, off) = all_modes(&hip(rocm.path()), &cxx);
    assert!(auto.enabled, "{auto:?}");
    assert_eq!(auto.runtime.as_deref(), Some(runtime.as_path()));
    assert!(auto.reason.contains(&format!("device profile runtime {}", runtime.display())), "{}", auto.reason);
    assert!(on.unwrap().enabled);
    assert!(off.reason.starts_with("off as requested (device coverage is available:"), "{}", off.reason);
    let flags = vec!["-fprofile-instr-generate".to_string()];
    assert_eq!(device::coverage_flags(&flags, &auto), flags, "full coverage applies the flags to both sides");
    // compiler-rt's other layout is found as well.
    fs::remove_file(&runtime).unwrap();
    let linux = resource.join("lib/linux/libclang_rt.profile-amdgcn.a");
    fs::create_dir_all(linux.parent().unwrap()).unwrap();
    fs::write(&linux, "!<arch>\n").unwrap();
    let found = device::decide(DeviceMode::Auto, &hip(rocm.path()), &cxx).unwrap();
    assert_eq!(found.runtime.as_deref(), Some(linux.as_path()));
}

#[test]
fn reports_include_instrumented_device_objects_only_while_device_coverage_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A real instrumented host program and a profile from running it.
    let host_src = d.join("host.cc");
    fs::write(&host_src, "int helper(int x) { return x > 1 ? x : 1; }\nint main() { return helper(1) - 1; }\n")
        .unwrap();
    let host = d.join("host");
    Cmd::new(format!("{LLVM22}/clang++"))
        .args(["-fprofile-instr-generate", "-fcoverage-mapping", "-o"])
        .arg(host.display().to_string())
        .arg(host_src.display().to_string())
        .read()
        .unwrap();
    Cmd::new(host.display().to_string())
        .env("LLVM_PROFILE_FILE", d.join("host.profraw").display().to_string())
        .read()
        .unwrap();
    let profdata = d.join("merged.profdata");
    Cmd::new(format!("{LLVM22}/llvm-profdata"))
        .args(["merge", "-sparse", "-o"])
        .arg(profdata.display().to_string())
        .arg(d.join("host.profraw").display().to_string())
        .read()
        .unwrap();
    // The device objects: one instrumented, one that merely exists.
    let devices = d.join("build");
    fs::create_dir_all(&devices).unwrap();
    let elf = device_elf(&devices, "device-gfx942.elf");
    fs::copy("/bin/true", devices.join("device-gfx90a.elf")).unwrap();
    let patterns = vec![devices.join("device-*.elf")];

    let on = DeviceDecision {
        requested: DeviceMode::Auto,
        enabled: true,
        reason: "on".into(),
        target: Some("gfx942".into()),
        runtime: None,
    };
    let selected = fixture::select_device_objects(&patterns, &on).unwrap();
    assert_eq!(
        selected.iter().map(|o| o.path.clone()).collect::<Vec<_>>(),
        std::slice::from_ref(&elf),
        "chosen by coverage mapping, not by name"
    );
    let off = DeviceDecision { enabled: false, ..on.clone() };
    assert!(
        fixture::select_device_objects(&patterns, &off).unwrap().is_empty(),
        "host-only fallback leaves device objects out even when present"
    );

    let inputs = ReportInputs {
        llvm_cov: format!("{LLVM22}/llvm-cov").into(),
        cxxfilt: None,
        profdata,
        objects: vec![host.clone(), elf.clone()],
        ignore: Vec::new(),
        title: "device".into(),
    };
    let all = inputs.summary_json(&d.join("summary.json")).unwrap();
    assert!(all.contains("kernel.hip"), "the device source is reported: {all}");
    let device_totals =
        report::totals(&inputs.with_objects(vec![elf]).summary_json(&d.join("device.json")).unwrap()).unwrap();
    assert_eq!(device_totals["functions"], "0/1", "the kernel never ran on this machine");
    let host_totals =
        report::totals(&inputs.with_objects(vec![host]).summary_json(&d.join("host.json")).unwrap()).unwrap();
    assert_eq!(host_totals["functions"], "2/2");
}
