//! The command line: `ccl-coverage run | report | list | who-covers | clean |
//! show-env`, on top of the two test harnesses (`cargo test --test
//! collectives` and `--test coverage_report` run exactly the same code).
//! Every option falls back to its `CCL_COV_*` variable, and sets it for the
//! harness: the variables stay the one way settings reach it.
//!
//! `ccl-coverage collectives [libtest args]` (hidden) is the collectives
//! test binary as it is, for machines without cargo and for the crate's own
//! tests.

// The doc comments below are `--help` text, read in a terminal: no backticks.
#![allow(clippy::doc_markdown)]

use clap::{Args, Parser, Subcommand, ValueEnum};
use libtest_mimic::Arguments;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "ccl-coverage", version, about = "Host and device code coverage of a collective-communication library's test suite", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build the library with coverage (or reuse the build), run the trials, then write the report.
    Run(Run),
    /// Merge what the workspace holds and write the report (no trial runs).
    Report(Report),
    /// List the trials the config plans (nothing is built or run).
    List(List),
    /// The trials that executed a source line, from the last report.
    WhoCovers(WhoCovers),
    /// Delete the config's workspace, and with --builds the cached builds.
    Clean(Clean),
    /// Every CCL_COV_* setting, its value here, and what the config and workspace resolve to.
    ShowEnv(Place),
    /// The collectives test binary as it is: `ccl-coverage collectives [libtest arguments]`.
    #[command(hide = true)]
    Collectives {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Which config, and which workspace.
#[derive(Args)]
struct Place {
    /// The config file: a ccl-coverage config or an upstream RCCL test_runner config.
    #[arg(long, env = "CCL_COV_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The workspace folder (default target/ccl-coverage/<config name>).
    #[arg(long, env = "CCL_COV_WORKSPACE", value_name = "DIR")]
    workspace: Option<PathBuf>,
}

/// Which trials (or report steps), as libtest selects them.
#[derive(Args)]
struct Select {
    /// Only names containing FILTER (e.g. `AllReduce`, `AllReduce::1K`).
    filter: Option<String>,
    /// FILTER must match a whole name.
    #[arg(long)]
    exact: bool,
    /// Leave out names containing PATTERN (repeatable).
    #[arg(long, value_name = "PATTERN")]
    skip: Vec<String>,
    /// Also run the ignored ones.
    #[arg(long)]
    include_ignored: bool,
    /// Run only the ignored ones.
    #[arg(long)]
    ignored: bool,
    /// How many run at once (the rank slots still bound how many ranks do).
    #[arg(long, value_name = "N")]
    test_threads: Option<usize>,
    /// libtest's output format: pretty, terse or json.
    #[arg(long, value_name = "FORMAT")]
    format: Option<String>,
}

/// The report's gates and inputs.
#[derive(Args)]
struct Gates {
    /// Fail below this line coverage (percent).
    #[arg(long, env = "CCL_COV_FAIL_UNDER_LINES", value_name = "PERCENT")]
    fail_under_lines: Option<String>,
    /// Fail below this function coverage (percent).
    #[arg(long, env = "CCL_COV_FAIL_UNDER_FUNCTIONS", value_name = "PERCENT")]
    fail_under_functions: Option<String>,
    /// Fail below this region coverage (percent).
    #[arg(long, env = "CCL_COV_FAIL_UNDER_REGIONS", value_name = "PERCENT")]
    fail_under_regions: Option<String>,
    /// Fail below this branch coverage (percent).
    #[arg(long, env = "CCL_COV_FAIL_UNDER_BRANCHES", value_name = "PERCENT")]
    fail_under_branches: Option<String>,
    /// Fail below this changed-line coverage (percent; with --diff-base).
    #[arg(long, env = "CCL_COV_FAIL_UNDER_DIFF", value_name = "PERCENT")]
    fail_under_diff: Option<String>,
    /// A git revision of the library's sources: changed-line coverage against it.
    #[arg(long, env = "CCL_COV_DIFF_BASE", value_name = "REV")]
    diff_base: Option<String>,
    /// An earlier workspace, or its coverage.lcov: lines that lost coverage.
    #[arg(long, env = "CCL_COV_BASELINE", value_name = "PATH")]
    baseline: Option<PathBuf>,
    /// Leave out source files matching this regex (added to the config's).
    #[arg(long, env = "CCL_COV_IGNORE_FILENAME_REGEX", value_name = "REGEX")]
    ignore_filename_regex: Option<String>,
}

/// What to hand over once the report is written: copied to --output-path,
/// else printed (lcov, json, cobertura) or named (html).
#[derive(Args)]
struct Output {
    /// The lcov report (report/coverage.lcov).
    #[arg(long, group = "out")]
    lcov: bool,
    /// The HTML report (report/html).
    #[arg(long, group = "out")]
    html: bool,
    /// llvm-cov's JSON export (report/coverage.json).
    #[arg(long, group = "out")]
    json: bool,
    /// The Cobertura XML report (report/cobertura.xml).
    #[arg(long, group = "out")]
    cobertura: bool,
    /// Where to copy the chosen report.
    #[arg(long, value_name = "PATH", requires = "out")]
    output_path: Option<PathBuf>,
    /// Open the HTML report in a browser (xdg-open) once written.
    #[arg(long)]
    open: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceModeArg {
    Auto,
    On,
    Off,
}

#[derive(Args)]
struct Run {
    #[command(flatten)]
    place: Place,
    #[command(flatten)]
    select: Select,
    /// Device (GPU kernel) coverage: auto, on or off (overrides coverage.device.mode).
    #[arg(long, env = "CCL_COV_DEVICE_COVERAGE", value_enum)]
    device_coverage: Option<DeviceModeArg>,
    /// Print what would run and run nothing; `--dry-run=json` for JSON.
    #[arg(long, num_args = 0..=1, default_missing_value = "1", require_equals = true, value_name = "json")]
    dry_run: Option<String>,
    #[command(flatten)]
    gates: Gates,
    #[command(flatten)]
    output: Output,
}

#[derive(Args)]
struct Report {
    #[command(flatten)]
    place: Place,
    /// Which report steps (e.g. `report::html`); a filter that names no step (a trial's name) is dropped.
    #[command(flatten)]
    select: Select,
    /// List the report steps.
    #[arg(long)]
    list: bool,
    #[command(flatten)]
    gates: Gates,
    #[command(flatten)]
    output: Output,
}

#[derive(Args)]
struct List {
    #[command(flatten)]
    place: Place,
    #[command(flatten)]
    select: Select,
}

#[derive(Args)]
struct WhoCovers {
    #[command(flatten)]
    place: Place,
    /// The source line: the path as the report has it, or its end (`src/init.cc:42`).
    #[arg(value_name = "FILE:LINE")]
    query: String,
}

#[derive(Args)]
struct Clean {
    #[command(flatten)]
    place: Place,
    /// Also delete every cached build that no run is building or using (one in use is kept, naming its run).
    #[arg(long)]
    builds: bool,
}

/// Sets a harness variable from an option. Runs before any thread starts.
fn set(name: &str, value: Option<impl AsRef<std::ffi::OsStr>>) {
    if let Some(value) = value {
        // SAFETY: called from `main` before the harness starts any thread.
        unsafe { std::env::set_var(name, value) };
    }
}

impl Place {
    fn apply(&self) {
        set("CCL_COV_CONFIG", self.config.as_ref());
        set("CCL_COV_WORKSPACE", self.workspace.as_ref());
    }
}

impl Gates {
    fn apply(&self) {
        set("CCL_COV_FAIL_UNDER_LINES", self.fail_under_lines.as_ref());
        set("CCL_COV_FAIL_UNDER_FUNCTIONS", self.fail_under_functions.as_ref());
        set("CCL_COV_FAIL_UNDER_REGIONS", self.fail_under_regions.as_ref());
        set("CCL_COV_FAIL_UNDER_BRANCHES", self.fail_under_branches.as_ref());
        set("CCL_COV_FAIL_UNDER_DIFF", self.fail_under_diff.as_ref());
        set("CCL_COV_DIFF_BASE", self.diff_base.as_ref());
        set("CCL_COV_BASELINE", self.baseline.as_ref());
        set("CCL_COV_IGNORE_FILENAME_REGEX", self.ignore_filename_regex.as_ref());
    }
}

impl Select {
    /// The libtest arguments these options stand for.
    fn argv(&self) -> Vec<String> {
        let mut argv = vec!["ccl-coverage".to_string()];
        argv.extend(self.filter.clone());
        argv.extend(self.exact.then(|| "--exact".to_string()));
        for pattern in &self.skip {
            argv.extend(["--skip".to_string(), pattern.clone()]);
        }
        argv.extend(self.include_ignored.then(|| "--include-ignored".to_string()));
        argv.extend(self.ignored.then(|| "--ignored".to_string()));
        if let Some(n) = self.test_threads {
            argv.extend(["--test-threads".to_string(), n.to_string()]);
        }
        if let Some(format) = &self.format {
            argv.extend(["--format".to_string(), format.clone()]);
        }
        argv
    }
}

impl Output {
    /// Hands over the chosen report, and opens the HTML one if asked.
    fn deliver(&self, report: &Path) -> ExitCode {
        let chosen = [
            (self.lcov, "coverage.lcov"),
            (self.html, "html"),
            (self.json, "coverage.json"),
            (self.cobertura, "cobertura.xml"),
        ]
        .into_iter()
        .find_map(|(on, name)| on.then(|| report.join(name)));
        if let Some(path) = chosen {
            let delivered = match (&self.output_path, self.html) {
                (Some(to), _) => copy_all(&path, to).map(|()| eprintln!("ccl-coverage: wrote {}", to.display())),
                (None, true) => {
                    println!("{}", path.join("index.html").display());
                    Ok(())
                }
                (None, false) => std::fs::read_to_string(&path).map(|text| print!("{text}")),
            };
            if let Err(e) = delivered {
                eprintln!("ccl-coverage: cannot hand over {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
        if self.open {
            let index = report.join("html/index.html");
            let opened = ccl_coverage::exec::process::Cmd::new("xdg-open").arg(&index).read();
            if let Err(e) = opened {
                eprintln!("ccl-coverage: cannot open {}: {e}", index.display());
                return ExitCode::FAILURE;
            }
        }
        ExitCode::SUCCESS
    }
}

/// Copies a file, or a folder with everything in it.
fn copy_all(from: &Path, to: &Path) -> std::io::Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_all(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(from, to).map(|_| ())
    }
}

fn worst(a: ExitCode, b: ExitCode) -> ExitCode {
    if a == ExitCode::SUCCESS { b } else { a }
}

fn main() -> ExitCode {
    if let Some(code) = ccl_coverage::exec::supervisor::run_if_requested() {
        return code;
    }
    match Cli::parse().command {
        Command::Collectives { args } => {
            let argv = std::iter::once("ccl-coverage".to_string()).chain(args);
            ccl_coverage::harness::collectives::main_with(Arguments::from_iter(argv))
        }
        Command::Run(run) => {
            run.place.apply();
            run.gates.apply();
            set(
                "CCL_COV_DEVICE_COVERAGE",
                run.device_coverage.map(|d| match d {
                    DeviceModeArg::Auto => "auto",
                    DeviceModeArg::On => "on",
                    DeviceModeArg::Off => "off",
                }),
            );
            set("CCL_COV_DRY_RUN", run.dry_run.as_ref());
            let ran = ccl_coverage::harness::collectives::run(Arguments::from_iter(run.select.argv()));
            let trials = ran.code;
            // Refused (the workspace in use, a wrong config): what the
            // workspace holds is another run's, not this one's to report.
            if run.dry_run.is_some() || !ran.ran {
                return trials;
            }
            // The report covers what the workspace holds, whatever the trials did.
            let report = ccl_coverage::harness::coverage_report::main_with(Arguments::from_iter(["ccl-coverage"]));
            ccl_coverage::harness::tools::print_run_line();
            let delivered = match ccl_coverage::harness::tools::report_dir() {
                Some(dir) if report == ExitCode::SUCCESS => run.output.deliver(&dir),
                _ => ExitCode::SUCCESS,
            };
            worst(worst(trials, report), delivered)
        }
        Command::Report(report) => {
            report.place.apply();
            report.gates.apply();
            let mut argv = report.select.argv();
            argv.extend(report.list.then(|| "--list".to_string()));
            let code = ccl_coverage::harness::coverage_report::main_with(Arguments::from_iter(argv));
            if report.list || code != ExitCode::SUCCESS {
                return code;
            }
            match ccl_coverage::harness::tools::report_dir() {
                Some(dir) => report.output.deliver(&dir),
                None => code,
            }
        }
        Command::List(list) => {
            list.place.apply();
            let mut argv = list.select.argv();
            argv.push("--list".into());
            ccl_coverage::harness::collectives::main_with(Arguments::from_iter(argv))
        }
        Command::WhoCovers(who) => {
            who.place.apply();
            ccl_coverage::harness::who_covers::main(&[who.query])
        }
        Command::Clean(clean) => {
            clean.place.apply();
            ccl_coverage::harness::tools::clean(clean.builds)
        }
        Command::ShowEnv(place) => {
            place.apply();
            ccl_coverage::harness::tools::show_env()
        }
    }
}
