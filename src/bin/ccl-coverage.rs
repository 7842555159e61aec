//! The command line: `ccl-coverage init | run | report | list | who-covers |
//! clean | show-env | config-schema`, on top of the two test harnesses (`cargo test --test
//! collectives` and `--test coverage_report` run exactly the same code).
//! Every option falls back to its `CCL_COV_*` variable, and sets it for the
//! harness: the variables stay the one way settings reach it.
//!
//! `ccl-coverage collectives [libtest args]` (hidden) is the collectives
//! test binary as it is, for machines without cargo and for the crate's own
//! tests.

// The doc comments below are `--help` text, read in a terminal: no backticks.
#![allow(clippy::doc_markdown)]

use ccl_coverage::env_names;
use ccl_coverage::harness::select::{Intent, Selection};
use ccl_coverage::harness::{collectives, coverage_report, tools};
use ccl_coverage::reporter::Entry;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
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
    /// Write ccl-coverage.json for a CMake project: configure and build it once with coverage in a scratch folder, one trial per CTest test.
    Init(Init),
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
    /// Print the JSON Schema of a config (name it in a config's "$schema" for editors to check and complete keys).
    ConfigSchema,
    /// The collectives test binary as it is: `ccl-coverage collectives [libtest arguments]`.
    #[command(hide = true)]
    Collectives {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The coverage_report test binary as it is: `ccl-coverage coverage-report [libtest arguments]`.
    #[command(hide = true)]
    CoverageReport {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// `init`'s options.
#[derive(Args)]
struct Init {
    /// The CMake project's folder (default: the current folder).
    #[arg(long, value_name = "DIR")]
    source: Option<PathBuf>,
    /// Overwrite an existing ccl-coverage.json.
    #[arg(long)]
    force: bool,
    /// One gtest trial per top-level suite of each CTest test whose program is a googletest binary.
    #[arg(long)]
    split_gtest: bool,
    /// A CMake cache entry for the configure step, as -DNAME=VALUE (repeatable; written into the config's steps).
    #[arg(short = 'D', value_name = "NAME=VALUE")]
    define: Vec<String>,
}

/// Which config, and which workspace.
#[derive(Args)]
struct Place {
    /// The config file: a ccl-coverage config or an upstream RCCL test_runner config.
    #[arg(long, env = "CCL_COV_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The workspace folder (default: target/ccl-coverage/<config name> in the config's project, its folder or the parent of a configs/ folder).
    #[arg(long, env = "CCL_COV_WORKSPACE", value_name = "DIR")]
    workspace: Option<PathBuf>,
}

/// Which trials (or report steps), as libtest selects them.
#[derive(Args)]
struct Select {
    /// Only names containing a FILTER (e.g. `AllReduce`, `AllReduce::1K`; several: any of them).
    #[arg(value_name = "FILTER")]
    filters: Vec<String>,
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
}

/// How libtest runs what was selected.
#[derive(Args)]
struct Libtest {
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
    /// Fail below this device branch coverage (percent; the device's alone).
    #[arg(long, env = "CCL_COV_FAIL_UNDER_DEVICE_BRANCHES", value_name = "PERCENT")]
    fail_under_device_branches: Option<String>,
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

/// What to hand over once the report is written: each chosen format copied
/// to the --output-path given after it, else printed (one at most) or, for
/// html, named.
#[derive(Args)]
struct Output {
    /// The lcov report (report/coverage.lcov).
    #[arg(long)]
    lcov: bool,
    /// The HTML report (report/html).
    #[arg(long)]
    html: bool,
    /// llvm-cov's JSON export (report/coverage.json; with --summary-only, report/summary.json).
    #[arg(long)]
    json: bool,
    /// The Cobertura XML report (report/cobertura.xml).
    #[arg(long)]
    cobertura: bool,
    /// Codecov's JSON coverage format (report/codecov.json).
    #[arg(long)]
    codecov: bool,
    /// The per-file text summary, llvm-cov report's columns (report/summary.txt).
    #[arg(long)]
    text: bool,
    /// Only the summary: with --json, report/summary.json; otherwise the text summary, as --text.
    #[arg(long)]
    summary_only: bool,
    /// After the totals (and at the end of --text): each file's lines that no trial ran.
    #[arg(long)]
    show_missing_lines: bool,
    /// Where to copy the format named before it; one per format, e.g.
    /// --lcov --output-path lcov.info --cobertura --output-path cobertura.xml.
    #[arg(long, value_name = "PATH")]
    output_path: Vec<PathBuf>,
    /// Open the HTML report in a browser (xdg-open) once written.
    #[arg(long)]
    open: bool,
}

/// A report format the command line hands over.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Format {
    Lcov,
    Html,
    Json,
    Cobertura,
    Codecov,
    Text,
}

impl Format {
    /// The option that asks for it (also its clap id, with `_` for `-`).
    fn flag(self) -> &'static str {
        match self {
            Format::Lcov => "lcov",
            Format::Html => "html",
            Format::Json => "json",
            Format::Cobertura => "cobertura",
            Format::Codecov => "codecov",
            Format::Text => "text",
        }
    }
}

/// Each chosen format and where it goes (`None`: stdout, or named for html).
type Targets = Vec<(Format, Option<PathBuf>)>;

impl Output {
    /// Whether a report will be printed on stdout (the HTML one's path too).
    fn to_stdout(targets: &Targets) -> bool {
        targets.iter().any(|(_, to)| to.is_none())
    }

    fn chosen(&self) -> Vec<Format> {
        let text = self.text || (self.summary_only && !self.json);
        [
            (self.lcov, Format::Lcov),
            (self.html, Format::Html),
            (self.json, Format::Json),
            (self.cobertura, Format::Cobertura),
            (self.codecov, Format::Codecov),
            (text, Format::Text),
        ]
        .into_iter()
        .filter_map(|(on, f)| on.then_some(f))
        .collect()
    }

    /// Pairs each --output-path with the format flag given before it on the
    /// command line (one format and one path pair whatever their order), and
    /// refuses what cannot be handed over: a path before any format, two for
    /// one format, or more than one format for stdout.
    fn targets(&self, m: &ArgMatches) -> Result<Targets, String> {
        let chosen = self.chosen();
        let index = |f: Format| {
            let id = if f == Format::Text && !self.text { "summary_only" } else { f.flag() };
            (m.value_source(id) == Some(ValueSource::CommandLine)).then(|| m.index_of(id)).flatten().unwrap_or(0)
        };
        let paths: Vec<(usize, PathBuf)> = match m.indices_of("output_path") {
            Some(at) => at.zip(self.output_path.iter().cloned()).collect(),
            None => Vec::new(),
        };
        let mut targets: Targets = chosen.iter().map(|&f| (f, None)).collect();
        if let ([_], [(_, path)]) = (chosen.as_slice(), paths.as_slice()) {
            targets[0].1 = Some(path.clone());
        } else {
            for (at, path) in paths {
                let owner = targets.iter_mut().filter(|(f, _)| index(*f) < at).max_by_key(|(f, _)| index(*f));
                match owner {
                    None => {
                        return Err(format!(
                            "--output-path {} names no format: give it after the format it is for (--lcov, --html, --json, --cobertura, --codecov, --text)",
                            path.display()
                        ));
                    }
                    Some((f, Some(first))) => {
                        return Err(format!(
                            "--{} has two --output-paths ({} and {}): one per format",
                            f.flag(),
                            first.display(),
                            path.display()
                        ));
                    }
                    Some((_, slot)) => *slot = Some(path),
                }
            }
        }
        let printed: Vec<String> = targets
            .iter()
            .filter(|(f, p)| p.is_none() && *f != Format::Html)
            .map(|(f, _)| format!("--{}", f.flag()))
            .collect();
        if printed.len() > 1 {
            return Err(format!(
                "{} would all be printed: give each but one its own --output-path",
                printed.join(", ")
            ));
        }
        Ok(targets)
    }

    /// Hands over the chosen reports, and opens the HTML one if asked.
    fn deliver(&self, targets: &Targets, report: &Path) -> ExitCode {
        let missing = || tools::missing_lines(report).map_err(|e| e.to_string());
        if self.show_missing_lines {
            match missing() {
                Ok(text) => ccl_coverage::reporter::emit(ccl_coverage::reporter::Event::Block(&text)),
                Err(e) => {
                    ccl_coverage::say!("{e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        for (format, to) in targets {
            let path = report.join(match format {
                Format::Lcov => "coverage.lcov",
                Format::Html => "html",
                Format::Json if self.summary_only => "summary.json",
                Format::Json => "coverage.json",
                Format::Cobertura => "cobertura.xml",
                Format::Codecov => "codecov.json",
                Format::Text => "summary.txt",
            });
            let read = || -> Result<String, String> {
                let mut text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
                if *format == Format::Text && self.show_missing_lines {
                    text.push('\n');
                    text.push_str(&missing()?);
                }
                Ok(text)
            };
            let delivered = match (to, format) {
                (None, Format::Html) => {
                    ccl_coverage::show!("{}\n", path.join("index.html").display());
                    Ok(())
                }
                (None, _) => read().map(|text| ccl_coverage::output!("{text}")),
                (Some(to), Format::Html) => copy_all(&path, to).map_err(|e| e.to_string()),
                (Some(to), _) => read().and_then(|text| write_file(to, &text).map_err(|e| e.to_string())),
            };
            match delivered {
                Ok(()) => {
                    if let Some(to) = to {
                        ccl_coverage::note!("wrote {}", to.display());
                    }
                }
                Err(e) => {
                    ccl_coverage::say!("cannot hand over {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
        }
        if self.open {
            let index = report.join("html/index.html");
            // The report was written: no browser here is no failure of the run.
            let opened = ccl_coverage::exec::process::Cmd::new("xdg-open").arg(&index).detached().read();
            if let Err(e) = opened {
                ccl_coverage::warning!("cannot open {} ({e}); open it yourself", index.display());
            }
        }
        ExitCode::SUCCESS
    }
}

/// What the terminal is told.
#[derive(Args)]
struct Display {
    /// Colour on the terminal: auto (on a terminal, without NO_COLOR), always or never.
    #[arg(long, env = "CCL_COV_COLOR", value_enum, value_name = "WHEN")]
    color: Option<Color>,
    /// Say less: no line per passing trial, no totals table (failures and the tallies stay).
    #[arg(short, long, conflicts_with = "verbose")]
    quiet: bool,
    /// Say more: each trial's command line as it starts.
    #[arg(short, long)]
    verbose: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Color {
    Auto,
    Always,
    Never,
}

impl Display {
    /// Sets the variables, and adds libtest's own options to `argv`.
    fn apply(&self, argv: &mut Vec<String>) {
        let color = self.color.map(|c| match c {
            Color::Auto => "auto",
            Color::Always => "always",
            Color::Never => "never",
        });
        set("CCL_COV_COLOR", color);
        if let Some(color) = color {
            argv.extend(["--color".to_string(), color.to_string()]);
        }
        if self.quiet {
            set("CCL_COV_VERBOSITY", Some("quiet"));
            // libtest's --quiet is its terse format, which --format overrides.
            if !argv.iter().any(|a| a == "--format") {
                argv.push("--quiet".into());
            }
        } else if self.verbose {
            set("CCL_COV_VERBOSITY", Some("verbose"));
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceModeArg {
    Auto,
    On,
    Off,
}

/// Which shard of the trials runs.
#[derive(Args)]
struct Shard {
    /// Run only this shard of the trials: count:K/N deals them out in turn, hash:K/N by name (as nextest).
    #[arg(long, env = "CCL_COV_PARTITION", value_name = "count:K/N|hash:K/N")]
    partition: Option<String>,
}

#[derive(Args)]
struct Run {
    #[command(flatten)]
    place: Place,
    #[command(flatten)]
    select: Select,
    #[command(flatten)]
    libtest: Libtest,
    #[command(flatten)]
    shard: Shard,
    /// Device (GPU kernel) coverage: auto, on or off (overrides coverage.device.mode).
    #[arg(long, env = "CCL_COV_DEVICE_COVERAGE", value_enum)]
    device_coverage: Option<DeviceModeArg>,
    /// Print what would run and run nothing; `--dry-run=json` for JSON.
    #[arg(long, num_args = 0..=1, default_missing_value = "1", require_equals = true, value_name = "json")]
    dry_run: Option<String>,
    /// Run the trials, write no report (`ccl-coverage report` writes it later).
    #[arg(long, conflicts_with_all = ["lcov", "html", "json", "cobertura", "codecov", "text", "summary_only", "show_missing_lines", "open"])]
    no_report: bool,
    /// Run a trial that did not pass again, up to N times; one that then passes is flaky, and said so everywhere.
    #[arg(long, env = "CCL_COV_RETRIES", value_name = "N")]
    retries: Option<String>,
    /// Build parallelism: the config's {jobs} (default: all cores).
    #[arg(short, long, env = "CCL_COV_JOBS", value_name = "N")]
    jobs: Option<String>,
    #[command(flatten)]
    display: Display,
    #[command(flatten)]
    gates: Gates,
    #[command(flatten)]
    output: Output,
}

#[derive(Args)]
struct Report {
    #[command(flatten)]
    place: Place,
    /// Which report steps (e.g. `report::html`); a filter that names no step is refused.
    #[command(flatten)]
    select: Select,
    #[command(flatten)]
    libtest: Libtest,
    /// List the report steps.
    #[arg(long)]
    list: bool,
    /// Merge these shards' workspaces (runs with --partition, of the same build) into this one first; a trial two shards ran counts once.
    #[arg(long, value_name = "DIR", num_args = 1..)]
    merge_from: Vec<PathBuf>,
    #[command(flatten)]
    display: Display,
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
    /// pretty (one trial a line, ignored ones marked), terse (libtest's `NAME: test`) or json.
    #[arg(long, value_enum, default_value = "pretty")]
    format: ListFormat,
    #[command(flatten)]
    shard: Shard,
}

#[derive(Clone, Copy, ValueEnum)]
enum ListFormat {
    Pretty,
    Terse,
    Json,
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
        set("CCL_COV_FAIL_UNDER_DEVICE_BRANCHES", self.fail_under_device_branches.as_ref());
        set("CCL_COV_FAIL_UNDER_DIFF", self.fail_under_diff.as_ref());
        set("CCL_COV_DIFF_BASE", self.diff_base.as_ref());
        set("CCL_COV_BASELINE", self.baseline.as_ref());
        set("CCL_COV_IGNORE_FILENAME_REGEX", self.ignore_filename_regex.as_ref());
    }
}

impl Select {
    /// The libtest arguments these options stand for, but the filters
    /// ([`Select::filters_argv`], last).
    fn argv(&self, libtest: Option<&Libtest>) -> Vec<String> {
        let mut argv = vec!["ccl-coverage".to_string()];
        argv.extend(self.exact.then(|| "--exact".to_string()));
        for pattern in &self.skip {
            argv.extend(["--skip".to_string(), pattern.clone()]);
        }
        argv.extend(self.include_ignored.then(|| "--include-ignored".to_string()));
        argv.extend(self.ignored.then(|| "--ignored".to_string()));
        if let Some(libtest) = libtest {
            if let Some(n) = libtest.test_threads {
                argv.extend(["--test-threads".to_string(), n.to_string()]);
            }
            if let Some(format) = &libtest.format {
                argv.extend(["--format".to_string(), format.clone()]);
            }
        }
        argv
    }

    /// `-- FILTER…`: after every option, so that a filter may start with `-`.
    fn filters_argv(&self) -> impl Iterator<Item = String> + '_ {
        std::iter::once("--".to_string()).chain(self.filters.iter().cloned())
    }

    fn selection(&self, libtest: Option<&Libtest>) -> Selection {
        Selection::parse(self.argv(libtest).into_iter().chain(self.filters_argv()))
    }
}

/// The options that set a harness variable, by argument id: a message
/// about the setting names the option (`--fail-under-lines 80`).
const OPTIONS: [(&str, &str, &str); 16] = [
    ("config", "CCL_COV_CONFIG", "--config"),
    ("retries", "CCL_COV_RETRIES", "--retries"),
    ("jobs", "CCL_COV_JOBS", "--jobs"),
    ("color", "CCL_COV_COLOR", "--color"),
    ("workspace", "CCL_COV_WORKSPACE", "--workspace"),
    ("device_coverage", "CCL_COV_DEVICE_COVERAGE", "--device-coverage"),
    ("dry_run", "CCL_COV_DRY_RUN", "--dry-run"),
    ("fail_under_lines", "CCL_COV_FAIL_UNDER_LINES", "--fail-under-lines"),
    ("fail_under_functions", "CCL_COV_FAIL_UNDER_FUNCTIONS", "--fail-under-functions"),
    ("fail_under_regions", "CCL_COV_FAIL_UNDER_REGIONS", "--fail-under-regions"),
    ("fail_under_branches", "CCL_COV_FAIL_UNDER_BRANCHES", "--fail-under-branches"),
    ("fail_under_device_branches", "CCL_COV_FAIL_UNDER_DEVICE_BRANCHES", "--fail-under-device-branches"),
    ("fail_under_diff", "CCL_COV_FAIL_UNDER_DIFF", "--fail-under-diff"),
    ("diff_base", "CCL_COV_DIFF_BASE", "--diff-base"),
    ("baseline", "CCL_COV_BASELINE", "--baseline"),
    ("ignore_filename_regex", "CCL_COV_IGNORE_FILENAME_REGEX", "--ignore-filename-regex"),
];

/// Records which of [`OPTIONS`] the command line (not the environment) gave.
fn note_options(matches: &ArgMatches) {
    let Some((_, sub)) = matches.subcommand() else { return };
    for id in sub.ids() {
        if sub.value_source(id.as_str()) != Some(ValueSource::CommandLine) {
            continue;
        }
        if let Some((_, var, option)) = OPTIONS.iter().find(|(i, _, _)| *i == id.as_str()) {
            env_names::set_by_option(var, option);
        }
    }
}

/// Runs `f` with the process's stdout on stderr, when `on` (a report goes to
/// stdout): whatever libtest and the harness print must not corrupt it.
fn stdout_on_stderr<T>(on: bool, f: impl FnOnce() -> T) -> T {
    use std::io::Write;
    use std::os::fd::AsFd;
    let saved = on.then(|| rustix::io::dup(std::io::stdout().as_fd())).and_then(Result::ok);
    if let Some(saved) = &saved {
        let _ = std::io::stdout().flush();
        let _ = rustix::stdio::dup2_stdout(std::io::stderr().as_fd());
        let out = f();
        let _ = std::io::stdout().flush();
        let _ = rustix::stdio::dup2_stdout(saved);
        return out;
    }
    f()
}

/// Writes `text` to `to`, making its folder.
fn write_file(to: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(to, text)
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

/// A command line that cannot be carried out, said before anything runs.
fn usage_error(message: &str) -> ExitCode {
    ccl_coverage::say!("{message}");
    ExitCode::from(2)
}

/// `run`: the trials, then the report on what the workspace holds, then
/// the outputs asked for.
fn run_command(run: &Run, sub: Option<&ArgMatches>) -> ExitCode {
    let targets = match sub.map(|m| run.output.targets(m)).unwrap_or_else(|| Ok(Vec::new())) {
        Ok(t) => t,
        Err(e) => return usage_error(&e),
    };
    run.place.apply();
    set("CCL_COV_PARTITION", run.shard.partition.as_ref());
    run.gates.apply();
    set(env_names::TRIAL_FILTER, Some("1"));
    set(
        "CCL_COV_DEVICE_COVERAGE",
        run.device_coverage.map(|d| match d {
            DeviceModeArg::Auto => "auto",
            DeviceModeArg::On => "on",
            DeviceModeArg::Off => "off",
        }),
    );
    set("CCL_COV_DRY_RUN", run.dry_run.as_ref());
    set("CCL_COV_RETRIES", run.retries.as_ref());
    set("CCL_COV_JOBS", run.jobs.as_ref());
    let mut argv = run.select.argv(Some(&run.libtest));
    let mut report_argv = vec!["ccl-coverage".to_string()];
    run.display.apply(&mut argv);
    run.display.apply(&mut report_argv);
    argv.extend(run.select.filters_argv());
    let selection = Selection::parse(argv);
    let to_stdout = Output::to_stdout(&targets) && run.dry_run.is_none() && !run.no_report;
    let (code, report_dir) = stdout_on_stderr(to_stdout, || {
        let ran = collectives::run(&selection, Intent::Trials, Entry::Cli);
        // Refused (the workspace in use, a wrong config, no trial
        // matched): what the workspace holds is another run's, not
        // this one's to report.
        if run.dry_run.is_some() || !ran.ran {
            return (ran.code, None);
        }
        if run.no_report {
            tools::print_run_line(&ran.tally);
            return (ran.code, None);
        }
        // The report covers what the workspace holds, whatever the trials did.
        let report = coverage_report::after_run(&Selection::parse(report_argv));
        tools::print_run_line(&ran.tally);
        // Also when a bar was not reached: CI uploads the lcov of a drop.
        (worst(ran.code, report.code), tools::report_dir().filter(|_| report.installed))
    });
    match report_dir {
        Some(dir) => worst(code, run.output.deliver(&targets, &dir)),
        None => code,
    }
}

/// `report`: the report again (shards merged first), then the outputs asked for.
fn report_command(report: &Report, sub: Option<&ArgMatches>) -> ExitCode {
    let targets = match sub.map(|m| report.output.targets(m)).unwrap_or_else(|| Ok(Vec::new())) {
        Ok(t) => t,
        Err(e) => return usage_error(&e),
    };
    report.place.apply();
    report.gates.apply();
    if !report.merge_from.is_empty() {
        let merged = coverage_report::merge_shards(&report.merge_from);
        if merged != ExitCode::SUCCESS {
            return merged;
        }
    }
    let mut argv = report.select.argv(Some(&report.libtest));
    report.display.apply(&mut argv);
    argv.extend(report.select.filters_argv());
    let reported = stdout_on_stderr(Output::to_stdout(&targets) && !report.list, || {
        let mut selection = Selection::parse(argv);
        selection.args.list = report.list;
        coverage_report::run(&selection, Intent::Steps, Entry::Cli)
    });
    if report.list || !reported.installed {
        return reported.code;
    }
    match tools::report_dir() {
        Some(dir) => worst(reported.code, report.output.deliver(&targets, &dir)),
        None => reported.code,
    }
}

fn main() -> ExitCode {
    if let Some(code) = ccl_coverage::exec::supervisor::run_if_requested() {
        return code;
    }
    let matches = Cli::command().get_matches();
    note_options(&matches);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let sub = matches.subcommand().map(|(_, m)| m);
    let trial_filter = || set(env_names::TRIAL_FILTER, Some("1"));
    match cli.command {
        Command::Init(init) => ccl_coverage::harness::init::main(&ccl_coverage::harness::init::InitArgs {
            source: init.source,
            force: init.force,
            split_gtest: init.split_gtest,
            defines: init.define,
        }),
        Command::Collectives { args } => {
            let argv = std::iter::once("ccl-coverage".to_string()).chain(args);
            collectives::main_with(Selection::parse(argv), Intent::from_env(), Entry::Cli)
        }
        Command::CoverageReport { args } => {
            let argv = std::iter::once("ccl-coverage".to_string()).chain(args);
            coverage_report::main_with(Selection::parse(argv), Intent::from_env(), Entry::Cli)
        }
        Command::Run(run) => run_command(&run, sub),
        Command::Report(report) => report_command(&report, sub),
        Command::List(list) => {
            list.place.apply();
            trial_filter();
            // A shard's share is dealt by the collectives harness as it lists.
            if list.shard.partition.is_some() {
                set("CCL_COV_PARTITION", list.shard.partition.as_ref());
                let mut selection = list.select.selection(None);
                selection.args.list = true;
                return collectives::main_with(selection, Intent::Trials, Entry::Cli);
            }
            let format = match list.format {
                ListFormat::Pretty => tools::ListFormat::Pretty,
                ListFormat::Terse => tools::ListFormat::Terse,
                ListFormat::Json => tools::ListFormat::Json,
            };
            tools::list(&list.select.selection(None), format)
        }
        Command::WhoCovers(who) => {
            who.place.apply();
            ccl_coverage::harness::who_covers::main(&[who.query])
        }
        Command::Clean(clean) => {
            clean.place.apply();
            tools::clean(clean.builds)
        }
        Command::ShowEnv(place) => {
            place.apply();
            tools::show_env()
        }
        Command::ConfigSchema => {
            let schema = ccl_coverage::config::schema::json_schema();
            ccl_coverage::output!("{}\n", serde_json::to_string_pretty(&schema).unwrap_or_default());
            ExitCode::SUCCESS
        }
    }
}
