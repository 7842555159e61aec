//! Building RCCL through its `install.sh` with coverage, with upstream's
//! rules (docs/architecture.md, "The upstream RCCL test runner") and without
//! its quoting bugs:
//! - coverage on: `--debug` unless `--debug` or `--debug-fast` is there,
//!   `--enable-code-coverage`, never the strict `--enable-full-coverage`
//!   (it turns an unsupported toolchain into a configure failure instead of
//!   a fallback), and `-DENABLE_CODE_COVERAGE=ON -DENABLE_FULL_COVERAGE=<ON|OFF>`
//!   appended last, as the harness resolved it;
//! - coverage off: both coverage flags removed and both options forced OFF,
//!   so a cached `--no_clean` build directory cannot keep its instrumentation;
//! - earlier `-DENABLE_CODE_COVERAGE=` / `-DENABLE_FULL_COVERAGE=` options are
//!   removed token by token, keeping every other option's quoting intact.

use crate::bail;
use crate::config::RcclInstall;
use crate::config::template::Vars;
use crate::error::Result;

/// What the RCCL build is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coverage {
    Off,
    /// Code coverage on; `full` also instruments device code.
    On {
        full: bool,
    },
}

const COVERAGE_OPTIONS: [&str; 3] = ["-DENABLE_CODE_COVERAGE=", "-DENABLE_FULL_COVERAGE=", "-DENABLE_DEVICE_COVERAGE="];
const STRICT_FLAGS: [&str; 2] = ["--enable-full-coverage", "--enable-device-coverage"];

/// install.sh's flags for `coverage`; the input is left untouched.
pub(crate) fn install_flags(flags: &[String], coverage: Coverage) -> Vec<String> {
    let mut out: Vec<String> = flags.iter().filter(|f| !STRICT_FLAGS.contains(&f.as_str())).cloned().collect();
    match coverage {
        Coverage::Off => out.retain(|f| f != "--enable-code-coverage" && f != "-c"),
        Coverage::On { .. } => {
            if !out.iter().any(|f| f == "--debug" || f == "--debug-fast") {
                out.push("--debug".into());
            }
            if !out.iter().any(|f| f == "--enable-code-coverage" || f == "-c") {
                out.push("--enable-code-coverage".into());
            }
        }
    }
    out
}

/// The `--cmake-options` string: the configured options minus earlier
/// coverage options, then ours.
pub(crate) fn cmake_options(options: &[String], coverage: Coverage) -> Result<String> {
    let mut tokens = Vec::new();
    for option in options {
        for token in split_keeping_quotes(option)? {
            if !COVERAGE_OPTIONS.iter().any(|prefix| token.starts_with(prefix)) {
                tokens.push(token);
            }
        }
    }
    let (code, full) = match coverage {
        Coverage::Off => ("OFF", "OFF"),
        Coverage::On { full } => ("ON", if full { "ON" } else { "OFF" }),
    };
    tokens.push(format!("-DENABLE_CODE_COVERAGE={code}"));
    tokens.push(format!("-DENABLE_FULL_COVERAGE={full}"));
    Ok(tokens.join(" "))
}

/// The whole install.sh command line.
pub(crate) fn install_argv(spec: &RcclInstall, vars: &Vars, coverage: Coverage) -> Result<Vec<String>> {
    let mut argv = vec![vars.render(&spec.script)?];
    argv.extend(install_flags(&vars.render_all(&spec.flags)?, coverage));
    if let Some(jobs) = &spec.jobs {
        argv.extend(["-j".into(), vars.render(jobs)?]);
    }
    argv.extend(["--cmake-options".into(), cmake_options(&vars.render_all(&spec.cmake_options)?, coverage)?]);
    Ok(argv)
}

/// Splits on unquoted whitespace; each token keeps its quotes exactly as
/// written, because install.sh hands the string on to CMake itself.
fn split_keeping_quotes(text: &str) -> Result<Vec<String>> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                if !current.is_empty() {
                    tokens.push(std::mem::take(&mut current));
                }
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                current.push(c);
            }
            (Some(q), c) if c == q => {
                quote = None;
                current.push(c);
            }
            (_, '\\') => {
                current.push('\\');
                if let Some(next) = chars.next() {
                    current.push(next);
                }
            }
            (_, c) => current.push(c),
        }
    }
    if let Some(q) = quote {
        bail!("unbalanced {q} in CMake options {text:?}");
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strings, or templates checked as the config loader checks them.
    fn strings<T: TryFrom<String, Error: std::fmt::Debug>>(items: &[&str]) -> Vec<T> {
        items.iter().map(|s| T::try_from(s.to_string()).unwrap()).collect()
    }

    // Upstream: test_coverage_report_selects_auto_full_coverage (both seeds).
    #[test]
    fn coverage_replaces_strict_flag_and_appends_options_last() {
        for seed in ["--enable-full-coverage", "--enable-code-coverage"] {
            let flags = strings(&[seed, "--no_clean"]);
            let out = install_flags(&flags, Coverage::On { full: true });
            assert!(out.contains(&"--debug".into()) && out.contains(&"--enable-code-coverage".into()), "{out:?}");
            assert!(!out.contains(&"--enable-full-coverage".into()), "{out:?}");
            let cmake = cmake_options(
                &strings(&["-DFOO=ON -DENABLE_CODE_COVERAGE=OFF -DENABLE_FULL_COVERAGE=OFF"]),
                Coverage::On { full: true },
            )
            .unwrap();
            assert_eq!(cmake, "-DFOO=ON -DENABLE_CODE_COVERAGE=ON -DENABLE_FULL_COVERAGE=ON");
        }
        let host_only = cmake_options(&[], Coverage::On { full: false }).unwrap();
        assert_eq!(host_only, "-DENABLE_CODE_COVERAGE=ON -DENABLE_FULL_COVERAGE=OFF");
    }

    // Upstream: test_non_coverage_build_disables_cached_coverage_options.
    #[test]
    fn coverage_off_forces_both_options_off() {
        let flags = strings(&["--enable-code-coverage", "--enable-full-coverage", "--no_clean"]);
        let out = install_flags(&flags, Coverage::Off);
        assert_eq!(out, ["--no_clean"]);
        assert_eq!(flags.len(), 3, "input untouched");
        let cmake = cmake_options(&strings(&["-DFOO=ON"]), Coverage::Off).unwrap();
        assert!(cmake.ends_with("-DENABLE_CODE_COVERAGE=OFF -DENABLE_FULL_COVERAGE=OFF"), "{cmake}");
    }

    // Upstream: test_coverage_preserves_debug_fast_without_duplicate_debug_flag.
    #[test]
    fn debug_fast_is_kept_without_adding_debug() {
        let out = install_flags(&strings(&["--debug-fast"]), Coverage::On { full: false });
        assert_eq!(out, ["--debug-fast", "--enable-code-coverage"]);
        assert_eq!(
            cmake_options(&[], Coverage::On { full: false }).unwrap(),
            "-DENABLE_CODE_COVERAGE=ON -DENABLE_FULL_COVERAGE=OFF"
        );
    }

    #[test]
    fn quoted_values_survive_unmangled() {
        let opts = strings(&[r#"-DCMAKE_CXX_FLAGS="-O1 -g" -DENABLE_FULL_COVERAGE=AUTO"#, "-DNAME='a b' -DX=\\ y"]);
        let cmake = cmake_options(&opts, Coverage::On { full: true }).unwrap();
        assert_eq!(
            cmake,
            r#"-DCMAKE_CXX_FLAGS="-O1 -g" -DNAME='a b' -DX=\ y -DENABLE_CODE_COVERAGE=ON -DENABLE_FULL_COVERAGE=ON"#
        );
        assert!(cmake_options(&strings(&["-DX=\"open"]), Coverage::Off).is_err());
    }

    #[test]
    fn whole_command_line() {
        let spec = RcclInstall {
            script: "{library_src}/install.sh".to_string().try_into().unwrap(),
            flags: strings(&["-t", "--enable-mpi-tests", "--no_clean"]),
            cmake_options: strings(&["-DBITCODE_LIB_ARCH=gfx942"]),
            jobs: Some("{jobs}".to_string().try_into().unwrap()),
        };
        let mut vars = Vars::default();
        vars.set("library_src", "/src/rccl").set("jobs", "64");
        assert_eq!(
            install_argv(&spec, &vars, Coverage::On { full: false }).unwrap(),
            [
                "/src/rccl/install.sh",
                "-t",
                "--enable-mpi-tests",
                "--no_clean",
                "--debug",
                "--enable-code-coverage",
                "-j",
                "64",
                "--cmake-options",
                "-DBITCODE_LIB_ARCH=gfx942 -DENABLE_CODE_COVERAGE=ON -DENABLE_FULL_COVERAGE=OFF"
            ]
        );
    }
}
