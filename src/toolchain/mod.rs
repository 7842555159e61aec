//! The compiler and the LLVM tools that read what it produced.
//!
//! `llvm-profdata` and `llvm-cov` must come from the same LLVM release as the
//! compiler: raw profiles are read only by their own LLVM version, and
//! coverage mappings only by the same or newer `llvm-cov`. Debian's
//! `/usr/bin/llvm-profdata` is LLVM 14, so a bare name from PATH is never
//! trusted: tools are looked for next to the compiler and every candidate's
//! version is checked. A miss names every place looked and what was there.

pub(crate) mod objects;

use crate::bail;
use crate::config::ToolchainConfig;
use crate::env_names::Lookup;
use crate::error::{Context, Error, Result};
use crate::exec::process::Cmd;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    pub path: PathBuf,
    /// First line of `--version`.
    pub version: String,
    pub major: u32,
    /// SHA-256 of the program, for `llvm-profdata` and `llvm-cov`: the report
    /// resolves its own tools and checks them against the build's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Toolchain {
    pub cc: Tool,
    pub cxx: Tool,
    /// The LLVM `bin` directory the compiler lives in (symlinks resolved).
    pub llvm_bin: PathBuf,
    pub llvm_profdata: Tool,
    pub llvm_cov: Tool,
}

/// Resolves the toolchain from `config`, with `CC`, `CXX`, `LLVM_PROFDATA`
/// and `LLVM_COV` from `env` taking precedence.
pub(crate) fn resolve(config: &ToolchainConfig, env: Lookup) -> Result<Toolchain> {
    let cxx = compiler("C++ compiler", "CXX", "toolchain.cxx", &config.cxx, &config.cxx_fallbacks, env)?;
    let cc = compiler("C compiler", "CC", "toolchain.cc", &config.cc, &config.cc_fallbacks, env)?;
    if cc.major != cxx.major {
        bail!(
            "the C compiler {} is clang {} but the C++ compiler {} is clang {}; use one LLVM release for both (set CC and CXX together)",
            cc.path.display(),
            cc.major,
            cxx.path.display(),
            cxx.major
        );
    }
    let llvm_bin = cxx
        .path
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| cxx.path.parent().map(Path::to_path_buf).unwrap_or_default());
    let search = ToolSearch { cxx: &cxx, llvm_bin: &llvm_bin, dirs: &config.tool_dirs, env };
    let llvm_profdata = search.find("llvm-profdata", "LLVM_PROFDATA", config.llvm_profdata.as_deref())?;
    let llvm_cov = search.find("llvm-cov", "LLVM_COV", config.llvm_cov.as_deref())?;
    Ok(Toolchain { cc, cxx, llvm_bin, llvm_profdata, llvm_cov })
}

/// The report's toolchain: resolved from `config` and `env` as the build
/// resolves it, never taken from a `build.json` (a shard's, or one a trial
/// rewrote, could name any program), and refused unless its `llvm-profdata`
/// and `llvm-cov` are those `recorded` by the build: the same version and,
/// where the build recorded one, the same SHA-256.
pub(crate) fn resolve_as_built(config: &ToolchainConfig, env: Lookup, recorded: &Toolchain) -> Result<Toolchain> {
    let now = resolve(config, env)?;
    for (name, var, mine, built) in [
        ("llvm-profdata", "LLVM_PROFDATA", &now.llvm_profdata, &recorded.llvm_profdata),
        ("llvm-cov", "LLVM_COV", &now.llvm_cov, &recorded.llvm_cov),
    ] {
        let differs = if mine.version != built.version {
            Some(format!("it is {:?}, the build's was {:?}", mine.version, built.version))
        } else {
            match (&mine.sha256, &built.sha256) {
                (Some(a), Some(b)) if a != b => Some(format!("its SHA-256 is {a}, the build's was {b}")),
                _ => None,
            }
        };
        if let Some(why) = differs {
            bail!(
                "the report's {name} is {}, not the one build.json records ({}): {why}. The report runs only the tools it resolves itself (the config's toolchain, {var}, the compiler's LLVM) and checks them against the build's; point {var} at the build's {name}, or run the trials again with this one",
                mine.path.display(),
                built.path.display()
            );
        }
    }
    Ok(now)
}

/// A found LLVM tool, with its checksum. A link (Debian's
/// `/usr/bin/llvm-cov-22`) is the program it names: its target is what runs,
/// so the target is what is checked and recorded (hashing the link itself
/// failed: `Too many levels of symbolic links`).
fn identified(path: PathBuf, version: String, major: u32) -> Result<Tool> {
    let path = std::fs::canonicalize(&path).with_context(|| format!("cannot resolve {}", path.display()))?;
    let sha256 = crate::workspace::files::sha256_file(&path)?;
    Ok(Tool { path, version, major, sha256: Some(sha256) })
}

impl Toolchain {
    /// `llvm-cxxfilt` from the same LLVM, for demangled reports, if present.
    pub(crate) fn cxxfilt(&self) -> Option<PathBuf> {
        let path = self.llvm_bin.join("llvm-cxxfilt");
        path.is_file().then_some(path)
    }
}

fn non_empty(env: Lookup, name: &str) -> Option<String> {
    env(name).filter(|v| !v.is_empty())
}

fn compiler(what: &str, var: &str, field: &str, configured: &str, fallbacks: &[String], env: Lookup) -> Result<Tool> {
    let (specs, origin): (Vec<String>, String) = match non_empty(env, var) {
        Some(v) => (vec![v], format!("${var}")),
        None => (
            std::iter::once(configured.to_string()).chain(fallbacks.iter().cloned()).collect(),
            format!("config {field}"),
        ),
    };
    let mut tried = Vec::new();
    let mut found = None;
    for spec in &specs {
        match find_program(spec, env) {
            Ok(path) => {
                found = Some(path);
                break;
            }
            Err(why) => tried.push(format!("{spec:?} {why}")),
        }
    }
    let Some(path) = found else {
        bail!(
            "{what} (from {origin}) not found: {}. Install clang (e.g. `apt-get install clang-22 llvm-22 lld-22 libclang-rt-22-dev`) or point {var} / {field} at one",
            tried.join("; ")
        );
    };
    let text = Cmd::new(&path).arg("--version").read()?;
    let first = text.lines().next().unwrap_or_default().to_string();
    let Some(major) = major_after(&text, "clang version ") else {
        bail!(
            "{what} {} (from {origin}) is not clang (`--version` says {first:?}); LLVM source-based coverage needs clang",
            path.display()
        );
    };
    let version = text.lines().find(|l| l.contains("clang version ")).unwrap_or(&first).trim().to_string();
    Ok(Tool { path, version, major, sha256: None })
}

/// A program given as a path, or as a name looked up on PATH.
fn find_program(spec: &str, env: Lookup) -> Result<PathBuf> {
    if spec.contains('/') {
        let path = PathBuf::from(spec);
        return if is_executable(&path) {
            Ok(path)
        } else if path.exists() {
            Err(Error::new("is not executable"))
        } else {
            Err(Error::new("does not exist"))
        };
    }
    let path_var = env("PATH").unwrap_or_default();
    which::which_in(spec, Some(path_var), ".").map_err(|_| Error::new("is not on PATH"))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The major version after `marker` (`clang version 22.1.8` → 22).
fn major_after(text: &str, marker: &str) -> Option<u32> {
    let start = text.find(marker)? + marker.len();
    let digits: String = text[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The LLVM version of a tool; LLVM 14's llvm-profdata only answers
/// `merge --version`.
fn tool_version(path: &Path) -> Option<(u32, String)> {
    for args in [&["--version"][..], &["merge", "--version"][..]] {
        if let Ok(text) = Cmd::new(path).args(args.iter().copied()).read()
            && let Some(major) = major_after(&text, "LLVM version ")
        {
            let line = text.lines().find(|l| l.contains("LLVM version ")).unwrap_or_default();
            return Some((major, line.trim().to_string()));
        }
    }
    None
}

/// Where llvm-profdata / llvm-cov are looked for.
struct ToolSearch<'a> {
    cxx: &'a Tool,
    llvm_bin: &'a Path,
    dirs: &'a [String],
    env: Lookup<'a>,
}

impl ToolSearch<'_> {
    fn find(&self, name: &str, var: &str, configured: Option<&str>) -> Result<Tool> {
        let cxx = self.cxx;
        let explicit = non_empty(self.env, var)
            .map(|v| (v, format!("${var}")))
            .or_else(|| configured.map(|c| (c.to_string(), format!("config toolchain.{}", name.replace('-', "_")))));
        if let Some((spec, origin)) = explicit {
            let path = find_program(&spec, self.env)
                .map_err(|why| Error::new(format!("{name} {spec:?} (from {origin}) {why}")))?;
            return match tool_version(&path) {
                Some((major, version)) if major == cxx.major => identified(path, version, major),
                Some((major, _)) => bail!(
                    "{name} {} (from {origin}) is LLVM {major}, but the compiler {} is clang {}: profiles and coverage mappings of clang {} need {name} {}. Unset {var} to use the one next to the compiler",
                    path.display(),
                    cxx.path.display(),
                    cxx.major,
                    cxx.major,
                    cxx.major
                ),
                None => bail!("{name} {} (from {origin}) did not report an LLVM version", path.display()),
            };
        }
        let path_var = (self.env)("PATH").unwrap_or_default();
        let mut candidates = vec![self.llvm_bin.join(name)];
        if let Some(dir) = cxx.path.parent() {
            candidates.push(dir.join(name));
            candidates.push(dir.join(format!("{name}-{}", cxx.major)));
        }
        candidates.extend(self.dirs.iter().map(|d| Path::new(d).join(name)));
        candidates.extend(which::which_in(format!("{name}-{}", cxx.major), Some(&path_var), ".").ok());
        candidates.extend(which::which_in(name, Some(&path_var), ".").ok());
        let mut seen = Vec::new();
        let mut looked = Vec::new();
        for path in candidates {
            if seen.contains(&path) {
                continue;
            }
            seen.push(path.clone());
            if !is_executable(&path) {
                looked.push(format!("{} (missing)", path.display()));
                continue;
            }
            match tool_version(&path) {
                Some((major, version)) if major == cxx.major => return identified(path, version, major),
                Some((major, _)) => looked.push(format!("{} (LLVM {major}, not {})", path.display(), cxx.major)),
                None => looked.push(format!("{} (no LLVM version)", path.display())),
            }
        }
        bail!(
            "no {name} of LLVM {} found for the compiler {}; looked at: {}. Install llvm-{} or set {var}",
            cxx.major,
            cxx.path.display(),
            looked.join(", "),
            cxx.major
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;

    /// A fake tool that prints `output` for any arguments, as the probing logic sees it.
    fn fake(dir: &Path, name: &str, output: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn llvm_dir(root: &Path, major: u32) -> PathBuf {
        let bin = root.join(format!("llvm-{major}/bin"));
        std::fs::create_dir_all(&bin).unwrap();
        for c in ["clang", "clang++"] {
            fake(&bin, c, &format!("Debian clang version {major}.1.8\nTarget: x86_64-pc-linux-gnu"));
        }
        bin
    }

    fn config(bin: &Path) -> ToolchainConfig {
        ToolchainConfig {
            cc: bin.join("clang").display().to_string(),
            cxx: bin.join("clang++").display().to_string(),
            cc_fallbacks: Vec::new(),
            cxx_fallbacks: Vec::new(),
            llvm_profdata: None,
            llvm_cov: None,
            tool_dirs: Vec::new(),
        }
    }

    fn env_of(vars: &[(&str, String)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        move |n| map.get(n).cloned()
    }

    #[test]
    fn tools_next_to_the_compiler_win_over_path() {
        let root = tempfile::tempdir().unwrap();
        let bin = llvm_dir(root.path(), 22);
        fake(&bin, "llvm-profdata", "Debian LLVM version 22.1.8");
        fake(&bin, "llvm-cov", "Debian LLVM version 22.1.8");
        let old = root.path().join("usr-bin");
        std::fs::create_dir_all(&old).unwrap();
        fake(&old, "llvm-profdata", "Debian LLVM version 14.0.6");
        let env = env_of(&[("PATH", old.display().to_string())]);
        let tc = resolve(&config(&bin), &env).unwrap();
        assert_eq!(tc.cxx.major, 22);
        assert_eq!(tc.llvm_profdata.path, bin.join("llvm-profdata"));
        assert_eq!(tc.llvm_cov.path, bin.join("llvm-cov"));
    }

    #[test]
    fn old_path_tool_is_refused_and_every_place_is_named() {
        let root = tempfile::tempdir().unwrap();
        let bin = llvm_dir(root.path(), 22);
        fake(&bin, "llvm-cov", "LLVM version 22.1.8");
        let old = root.path().join("usr-bin");
        std::fs::create_dir_all(&old).unwrap();
        fake(&old, "llvm-profdata", "Debian LLVM version 14.0.6");
        let env = env_of(&[("PATH", old.display().to_string())]);
        let err = resolve(&config(&bin), &env).unwrap_err().to_string();
        assert!(err.contains("no llvm-profdata of LLVM 22"), "{err}");
        assert!(err.contains(&format!("{} (missing)", bin.join("llvm-profdata").display())), "{err}");
        assert!(err.contains("(LLVM 14, not 22)"), "{err}");
        assert!(err.contains("LLVM_PROFDATA"), "says how to fix: {err}");
    }

    #[test]
    fn explicit_override_must_match_the_compiler() {
        let root = tempfile::tempdir().unwrap();
        let bin = llvm_dir(root.path(), 22);
        fake(&bin, "llvm-cov", "LLVM version 22.1.8");
        let old = fake(root.path(), "llvm-profdata-14", "LLVM version 14.0.6");
        let env = env_of(&[("LLVM_PROFDATA", old.display().to_string())]);
        let err = resolve(&config(&bin), &env).unwrap_err().to_string();
        assert!(err.contains("(from $LLVM_PROFDATA) is LLVM 14"), "{err}");
        let good = fake(root.path(), "llvm-profdata-22", "LLVM version 22.0.0");
        let env = env_of(&[("LLVM_PROFDATA", good.display().to_string())]);
        assert_eq!(resolve(&config(&bin), &env).unwrap().llvm_profdata.path, good);
    }

    #[test]
    fn cxx_env_overrides_config_and_gcc_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let bin = llvm_dir(root.path(), 22);
        let gcc = fake(root.path(), "g++", "g++ (Debian 12.2.0-14) 12.2.0");
        let env = env_of(&[("CXX", gcc.display().to_string())]);
        let err = resolve(&config(&bin), &env).unwrap_err().to_string();
        assert!(err.contains("(from $CXX) is not clang"), "{err}");
    }

    #[test]
    fn missing_compiler_names_origin_and_fix() {
        let cfg = ToolchainConfig {
            cc: "/nope/clang".into(),
            cxx: "/nope/clang++".into(),
            cc_fallbacks: Vec::new(),
            cxx_fallbacks: vec!["/nope/hipcc".into()],
            llvm_profdata: None,
            llvm_cov: None,
            tool_dirs: Vec::new(),
        };
        let err = resolve(&cfg, &|_| None).unwrap_err().to_string();
        assert!(err.contains("(from config toolchain.cxx) not found: \"/nope/clang++\" does not exist; \"/nope/hipcc\" does not exist"), "{err}");
        assert!(err.contains("apt-get install clang-22"), "{err}");
    }

    /// upstream: `test_llvm_tool_prefers_resolved_rocm_root_over_path`, with the
    /// compiler found through a fallback (`hipcc` in `<rocm>/bin`).
    #[test]
    fn rocm_tool_dirs_win_over_path_for_a_fallback_compiler() {
        let root = tempfile::tempdir().unwrap();
        let rocm = root.path().join("rocm");
        let bin = rocm.join("bin");
        let llvm = rocm.join("lib/llvm/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&llvm).unwrap();
        let hipcc = fake(&bin, "hipcc", "HIP version: 7.15\nAMD clang version 22.0.0git (rocm)");
        fake(&bin, "amdclang", "AMD clang version 22.0.0git (rocm)");
        fake(&llvm, "llvm-profdata", "AMD LLVM version 22.0.0git");
        fake(&llvm, "llvm-cov", "AMD LLVM version 22.0.0git");
        let usr = root.path().join("usr-bin");
        std::fs::create_dir_all(&usr).unwrap();
        fake(&usr, "llvm-cov", "Debian LLVM version 22.1.8");
        let cfg = ToolchainConfig {
            cc: llvm.join("clang").display().to_string(),
            cxx: llvm.join("clang++").display().to_string(),
            cc_fallbacks: vec![bin.join("amdclang").display().to_string()],
            cxx_fallbacks: vec![bin.join("amdclang++").display().to_string(), hipcc.display().to_string()],
            llvm_profdata: None,
            llvm_cov: None,
            tool_dirs: vec![
                llvm.display().to_string(),
                rocm.join("llvm/bin").display().to_string(),
                bin.display().to_string(),
            ],
        };
        let env = env_of(&[("PATH", usr.display().to_string())]);
        let tc = resolve(&cfg, &env).unwrap();
        assert_eq!(tc.cxx.path, hipcc);
        assert_eq!(tc.cxx.version, "AMD clang version 22.0.0git (rocm)");
        assert_eq!(tc.llvm_cov.path, llvm.join("llvm-cov"), "ROCm's llvm-cov, not PATH's");
        assert_eq!(tc.llvm_profdata.path, llvm.join("llvm-profdata"));
    }

    #[test]
    fn mixed_cc_and_cxx_releases_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let bin22 = llvm_dir(root.path(), 22);
        let bin19 = llvm_dir(root.path(), 19);
        let env = env_of(&[("CC", bin19.join("clang").display().to_string())]);
        let err = resolve(&config(&bin22), &env).unwrap_err().to_string();
        assert!(err.contains("is clang 19 but the C++ compiler"), "{err}");
    }
}
