//! Everything a person reads on the terminal, as events, in one place (as
//! nextest's reporter): the `[n/M]` line of each trial, the notes, warnings
//! and errors of every stage, verbose detail, and what goes to stdout. It owns
//! colour (`CCL_COV_COLOR`), verbosity (`CCL_COV_VERBOSITY`, `-q`/`-v`) and the
//! cleaning of control bytes from every text it shows, so that a file, trial
//! or workspace name holding an escape sequence cannot drive the terminal.
//! Libtest's own lines are the one exception. Nothing else in `src/` prints:
//! clippy's `print_stderr` and `print_stdout` are errors outside this file.
//!
//! It also owns the words: the stages below the harness report what happened
//! as typed events (`BuildStep`, `Quarantined`, …), and each event's level
//! (error, warning, note, detail) decides what `-q` and `-v` show. The prefix
//! `ccl-coverage: ` and the one warning form (`ccl-coverage: warning: …`,
//! `warning` in bold yellow as cargo colours its own) are added here; no
//! other file types them (`tests/layering.rs` checks).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

/// What every line the harness says starts with.
pub const PREFIX: &str = "ccl-coverage: ";

/// How much the terminal is told, and whether in colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminal {
    /// `CCL_COV_COLOR`: `always`, or `auto` (the default) on a terminal
    /// without `NO_COLOR`; `never` is plain text.
    pub color: bool,
    pub verbosity: Verbosity,
}

/// `CCL_COV_VERBOSITY` (`-q`, `-v`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    /// Failures and the final tallies only: no line per passing trial, no totals table.
    Quiet,
    Normal,
    /// Also each trial's command line as it starts.
    Verbose,
}

impl Default for Terminal {
    /// Before the environment is read (a config that does not load): plain, normal.
    fn default() -> Self {
        Terminal { color: false, verbosity: Verbosity::Normal }
    }
}

impl Terminal {
    /// From `CCL_COV_COLOR`, `NO_COLOR` and `CCL_COV_VERBOSITY` as `env` reads them;
    /// `is_terminal` says whether stderr is a terminal.
    pub(crate) fn from_env(env: &dyn Fn(&str) -> Option<String>, is_terminal: bool) -> Result<Terminal, String> {
        let color = match env("CCL_COV_COLOR").unwrap_or_default().as_str() {
            "" | "auto" => env("NO_COLOR").is_none_or(|v| v.is_empty()) && is_terminal,
            "always" => true,
            "never" => false,
            other => {
                return Err(format!("CCL_COV_COLOR={other:?} is not a colour choice: expected auto, always or never"));
            }
        };
        let verbosity = match env("CCL_COV_VERBOSITY").unwrap_or_default().as_str() {
            "" | "normal" => Verbosity::Normal,
            "quiet" => Verbosity::Quiet,
            "verbose" => Verbosity::Verbose,
            other => {
                return Err(format!(
                    "CCL_COV_VERBOSITY={other:?} is not a verbosity: expected quiet, normal or verbose"
                ));
            }
        };
        Ok(Terminal { color, verbosity })
    }
}

static TERMINAL: OnceLock<Terminal> = OnceLock::new();

/// Sets the terminal for the rest of the process, once the environment is read;
/// a later call changes nothing.
pub(crate) fn configure(terminal: Terminal) {
    let _ = TERMINAL.set(terminal);
}

/// The terminal in force.
pub(crate) fn terminal() -> Terminal {
    TERMINAL.get().copied().unwrap_or_default()
}

/// How a trial ended, as its `[n/M]` line says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialMark {
    Pass,
    Flaky,
    Ignored,
    Timeout,
    Interrupted,
    Fail,
    /// Not run: the shared build failed.
    NotRun,
}

impl TrialMark {
    fn word(self) -> &'static str {
        match self {
            TrialMark::Pass => "PASS",
            TrialMark::Flaky => "FLAKY",
            TrialMark::Ignored => "IGNORED",
            TrialMark::Timeout => "TIMEOUT",
            TrialMark::Interrupted => "INTERRUPTED",
            TrialMark::Fail => "FAIL",
            TrialMark::NotRun => "NOT RUN",
        }
    }

    /// Its SGR colour: green, yellow, red.
    fn colour(self) -> u8 {
        match self {
            TrialMark::Pass => 32,
            TrialMark::Flaky | TrialMark::Ignored => 33,
            TrialMark::Timeout | TrialMark::Interrupted | TrialMark::Fail | TrialMark::NotRun => 31,
        }
    }
}

/// Which command the person ran: a hint names that one (`ccl-coverage run`
/// to whoever ran `ccl-coverage`), never another entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `cargo test --test collectives` or `--test coverage_report`.
    CargoTest,
    /// `cargo coverage`: both test binaries, with `CCL_COV_TRIAL_FILTER=1`.
    CargoCoverage,
    /// The `ccl-coverage` executable.
    Cli,
}

impl Entry {
    /// A test binary's: `cargo coverage` sets [`crate::env_names::TRIAL_FILTER`].
    pub fn of_test_binary() -> Entry {
        let set = std::env::var(crate::env_names::TRIAL_FILTER).unwrap_or_default();
        match crate::env_names::switch(crate::env_names::TRIAL_FILTER, &set) {
            Ok(Some(true)) => Entry::CargoCoverage,
            _ => Entry::CargoTest,
        }
    }

    /// The command that builds and runs the trials.
    pub(crate) fn trials(self) -> &'static str {
        match self {
            Entry::CargoTest => "cargo test --test collectives",
            Entry::CargoCoverage => "cargo coverage",
            Entry::Cli => "ccl-coverage run",
        }
    }

    /// The command that writes the report.
    pub(crate) fn report(self) -> &'static str {
        match self {
            Entry::CargoTest => "cargo test --test coverage_report",
            Entry::CargoCoverage => "cargo coverage",
            Entry::Cli => "ccl-coverage report",
        }
    }
}

/// What the harness tells a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// A line on stderr, whatever the verbosity (a failure, a tally).
    Say(&'a str),
    /// A line on stderr that `-q` leaves out.
    Note(&'a str),
    /// A line on stderr that only `-v` shows (a trial's command line).
    Detail(&'a str),
    /// `warning: …` on stderr.
    Warning(&'a str),
    /// Text shown as it is on stderr, whatever the verbosity (a table that ends its own lines).
    Block(&'a str),
    /// A trial ended: `ccl-coverage: [3/42] PASS    AllReduce::1K::ring (0.86s, …)`.
    TrialEnded { done: usize, total: usize, verdict: TrialMark, name: &'a str, detail: &'a str },
    /// Text for a person on stdout (`show-env`, `list`, `who-covers`, the dry
    /// run), cleaned; no newline added.
    Print(&'a str),
    /// What a command was asked for as data, on stdout byte for byte (a
    /// report in a format, JSON, nextest's listing): for a program, so not cleaned.
    Output(&'a str),
    /// The config and workspace a run uses.
    RunUses { config: &'a str, config_path: &'a Path, workspace: &'a Path },
    /// The device decision, in its one line.
    DeviceDecided { summary: &'a str },
    /// The build waits on another process: building it (`in_use_by` none),
    /// or using it while this one must rebuild it.
    BuildWaiting { dir: &'a Path, in_use_by: Option<&'a str> },
    /// The cached build `id` is reused.
    BuildReused { id: &'a str, dir: &'a Path },
    /// Building starts: in the cache, or in an existing build folder given.
    BuildStarted { config: &'a str, id: &'a str, dir: &'a Path, existing: bool },
    /// Step `i` of `n` starts (`took` none) or ends.
    BuildStep { i: usize, n: usize, name: &'a str, took: Option<Duration> },
    /// The build is ready.
    BuildReady { id: &'a str, took: Duration },
    /// A trial the run selected is ignored here, and why.
    TrialIgnored { trial: &'a str, why: &'a str },
    /// Files a trial's folder held that are not its own, moved to quarantine.
    Quarantined { trial: &'a str, files: &'a [String] },
    /// A page of the report, written.
    ReportPage { what: &'a str, path: &'a Path },
    /// The cached build `id` cannot be reused, and is built again.
    BuildDamaged { id: &'a str, why: &'a str },
    /// The reused cached build holds what its build did not make (`said`).
    BuildHoldsOthers { dir: &'a Path, said: &'a str },
    /// What the reused cached build holds cannot be checked.
    BuildUncheckable { dir: &'a Path, why: &'a str },
    /// A failed build this workspace started, deleted once build `done` succeeded.
    FailedBuildDeleted { dir: &'a Path, done: &'a str },
    /// A failed build this workspace started that cannot be deleted.
    FailedBuildKept { dir: &'a Path, why: &'a str },
    /// The workspace cannot register as a user of the cached build `build`.
    NotRegistered { workspace: &'a Path, build: &'a Path, why: &'a str },
    /// The workspace moves to another build: the old build's results go.
    BuildChanged { from: &'a str, to: &'a str },
    /// A device object without coverage mapping, left out of the report.
    DeviceObjectUnmapped { path: &'a str },
    /// A process left behind (`by`: the run or supervisor that died), killed.
    LeftBehindKilled { pid: i32, command: &'a str, by: &'a str },
    /// A trial's supervisor ended without saying how the trial ended.
    SupervisorLost { trial: &'a str, why: &'a str, log: &'a Path },
    /// A stopping signal: the first stops the trials, a second exits at once.
    Interrupted { signal: &'a str, again: bool },
    /// No signal handler could be installed.
    NoSignalHandlers { why: &'a str },
    /// The workspace's last holder is gone; this run takes the workspace over.
    WorkspaceTakenOver { root: &'a Path, holder: &'a str },
    /// A folder an older ccl-coverage wrote becomes a workspace.
    WorkspaceAdopted { root: &'a Path },
    /// `results/run.json` could not be brought up to date (the end of the run tries again).
    RunJsonNotUpdated { why: &'a str },
    /// The in-process reader of indexed profiles failed: llvm-profdata reads the counters.
    ReaderFellBack { why: &'a str },
    /// The branch listing of a device object could not be kept beside the build.
    BranchListingNotKept { of: &'a Path, why: &'a str },
    /// Device code (`what`) whose lines cannot be mapped to its instructions.
    DeviceCodeUnmapped { what: &'a str, why: &'a str },
    /// What the device backend says of the objects a build made (its sentence).
    DeviceAfterBuild { said: &'a str },
    /// A file under the build that kept its build name, and why.
    SourceNameKept { note: &'a str },
    /// `clean` ended: what it kept (a preview of the names, their count) and
    /// whether the workspace folder itself went.
    WorkspaceCleaned { root: &'a Path, kept: Option<(&'a str, usize)>, folder_deleted: bool },
}

/// How much an event matters: what `-q` and `-v` keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// Shown whatever the verbosity: failures, tallies.
    Say,
    Warning,
    /// Left out by `-q`.
    Note,
    /// Shown by `-v` only.
    Detail,
}

impl Event<'_> {
    /// The level and words of a stage's event; `None` for the others.
    fn worded(&self) -> Option<(Level, String)> {
        let note = |text: String| Some((Level::Note, text));
        match *self {
            Event::RunUses { config, config_path, workspace } => {
                note(format!("config {config} ({}), workspace {}", config_path.display(), workspace.display()))
            }
            Event::DeviceDecided { summary } => note(format!("device coverage: {summary}")),
            Event::BuildWaiting { dir, in_use_by: None } => {
                note(format!("waiting for another process building {}", dir.display()))
            }
            Event::BuildWaiting { dir, in_use_by: Some(who) } => {
                note(format!("waiting to build {}: it is in use by {who}", dir.display()))
            }
            Event::BuildReused { id, dir } => note(format!("reusing build {id} ({})", dir.display())),
            Event::BuildStarted { id, dir, existing: true, .. } => {
                note(format!("using the existing build {} as build {id}", dir.display()))
            }
            Event::BuildStarted { config, id, dir, existing: false } => {
                note(format!("building {config} as build {id} in {}", dir.display()))
            }
            Event::BuildStep { i, n, name, took: None } => note(format!("  [{i}/{n}] {name}")),
            Event::BuildStep { i, n, name, took: Some(took) } => {
                note(format!("  [{i}/{n}] {name}: {:.1}s", took.as_secs_f64()))
            }
            Event::BuildReady { id, took } => note(format!("build {id} ready in {:.1}s", took.as_secs_f64())),
            Event::TrialIgnored { trial, why } => note(format!("{trial} is ignored: {why}")),
            Event::Quarantined { trial, files } => Some((
                Level::Warning,
                format!(
                    "{trial}: {} profile(s) in its folder are not its own and were moved to quarantine: {}",
                    files.len(),
                    files.join("; ")
                ),
            )),
            Event::ReportPage { what, path } => note(format!("{what}: {}", path.display())),
            Event::BuildDamaged { id, why } => {
                Some((Level::Warning, format!("the cached build {id} cannot be reused: {why}; building it again")))
            }
            Event::BuildHoldsOthers { dir, said } => Some((
                Level::Warning,
                format!(
                    "the cached build {} {said}; it is reused (its objects and test binaries are checked apart): \
                     delete them, or run `ccl-coverage clean --builds` to build it anew",
                    dir.display()
                ),
            )),
            Event::BuildUncheckable { dir, why } => Some((
                Level::Warning,
                format!("what the cached build {} holds cannot be checked: {why}", dir.display()),
            )),
            Event::FailedBuildDeleted { dir, done } => {
                note(format!("deleted the failed build {} of this workspace (build {done} succeeded)", dir.display()))
            }
            Event::FailedBuildKept { dir, why } => {
                Some((Level::Warning, format!("cannot delete the failed build {}: {why}", dir.display())))
            }
            Event::NotRegistered { workspace, build, why } => Some((
                Level::Warning,
                format!(
                    "cannot register the workspace {} as a user of the cached build {} ({why}): \
                     `clean --builds` of another config may delete it",
                    workspace.display(),
                    build.display()
                ),
            )),
            Event::BuildChanged { from, to } => Some((
                Level::Say,
                format!(
                    "build changed ({from} -> {to}): deleting the workspace's results, profiles and reports of the old build"
                ),
            )),
            Event::DeviceObjectUnmapped { path } => {
                Some((Level::Warning, format!("device object {path} has no coverage mapping; left out of the report")))
            }
            Event::LeftBehindKilled { pid, command, by } => {
                Some((Level::Warning, format!("killed pid {pid} left behind by {by}: {command}")))
            }
            Event::SupervisorLost { trial, why, log } => {
                Some((Level::Say, format!("{trial}: {why}; see {}", log.display())))
            }
            Event::Interrupted { signal, again: false } => Some((
                Level::Say,
                format!(
                    "{signal}: stopping the running trials (SIGTERM, grace period, SIGKILL); send it again to exit at once"
                ),
            )),
            Event::Interrupted { signal, again: true } => {
                Some((Level::Say, format!("{signal} again: exiting now; the trial supervisors stop what still runs")))
            }
            Event::NoSignalHandlers { why } => Some((
                Level::Warning,
                format!("cannot install signal handlers ({why}); Ctrl-C will not stop trials cleanly"),
            )),
            Event::WorkspaceTakenOver { root, holder } => note(format!(
                "taking over the workspace {}: its last holder, {holder}, is no longer running",
                root.display()
            )),
            Event::WorkspaceAdopted { root } => note(format!(
                "adopting {} as a workspace: it holds only what an older ccl-coverage wrote there",
                root.display()
            )),
            Event::RunJsonNotUpdated { why } => Some((Level::Warning, format!("cannot update run.json: {why}"))),
            Event::ReaderFellBack { why } => Some((
                Level::Warning,
                format!(
                    "the in-process reader of indexed profiles failed on {why}; its counters are read with llvm-profdata instead"
                ),
            )),
            Event::BranchListingNotKept { of, why } => {
                Some((Level::Warning, format!("cannot keep the branch listing of {}: {why}", of.display())))
            }
            Event::DeviceCodeUnmapped { what, why } => Some((Level::Warning, format!("{what}: {why}"))),
            Event::DeviceAfterBuild { said } => Some((Level::Say, said.to_string())),
            Event::SourceNameKept { note } => Some((Level::Say, note.to_string())),
            Event::WorkspaceCleaned { root, kept: Some((names, n)), .. } => Some((
                Level::Say,
                format!(
                    "deleted what ccl-coverage made in the workspace {}; kept {names} and the folder: ccl-coverage did not make {}",
                    root.display(),
                    if n == 1 { "it" } else { "them" }
                ),
            )),
            Event::WorkspaceCleaned { root, kept: None, folder_deleted: true } => {
                Some((Level::Say, format!("deleted the workspace {}", root.display())))
            }
            Event::WorkspaceCleaned { root, kept: None, folder_deleted: false } => Some((
                Level::Say,
                format!(
                    "deleted what ccl-coverage made in the workspace {}; kept the folder itself: it existed before ccl-coverage used it",
                    root.display()
                ),
            )),
            Event::Say(text) => Some((Level::Say, text.to_string())),
            Event::Note(text) => Some((Level::Note, text.to_string())),
            Event::Detail(text) => Some((Level::Detail, text.to_string())),
            Event::Warning(text) => Some((Level::Warning, text.to_string())),
            Event::Block(_) | Event::TrialEnded { .. } | Event::Print(_) | Event::Output(_) => None,
        }
    }
}

/// Where an event goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

/// The text `event` shows on `terminal` and where, or `None` where the
/// verbosity leaves it out.
fn render(event: &Event, terminal: Terminal) -> Option<(Stream, String)> {
    if let Some((level, text)) = event.worded() {
        let shown = match level {
            Level::Note if terminal.verbosity == Verbosity::Quiet => return None,
            Level::Detail if terminal.verbosity != Verbosity::Verbose => return None,
            Level::Warning if terminal.color => {
                format!("{PREFIX}\x1b[1;33mwarning\x1b[0m\x1b[1m:\x1b[0m {}\n", clean(&text))
            }
            Level::Warning => format!("{PREFIX}warning: {}\n", clean(&text)),
            Level::Say | Level::Note | Level::Detail => format!("{PREFIX}{}\n", clean(&text)),
        };
        return Some((Stream::Stderr, shown));
    }
    let shown = match *event {
        Event::Block(text) => clean(text).into_owned(),
        Event::TrialEnded { verdict: TrialMark::Pass, .. } if terminal.verbosity == Verbosity::Quiet => return None,
        Event::TrialEnded { done, total, verdict, name, detail } => {
            let word = verdict.word();
            let shown = if terminal.color {
                format!("\x1b[{}m{word:<7}\x1b[0m", verdict.colour())
            } else {
                format!("{word:<7}")
            };
            format!("{PREFIX}[{done}/{total}] {shown} {} ({})\n", clean(name), clean(detail))
        }
        Event::Print(text) => return Some((Stream::Stdout, clean(text).into_owned())),
        Event::Output(text) => return Some((Stream::Stdout, text.to_string())),
        _ => return None,
    };
    Some((Stream::Stderr, shown))
}

/// Shows `event` on the terminal. A write that fails (a closed pipe) is
/// dropped: what a person reads is never a reason to stop a run.
#[allow(clippy::print_stderr, clippy::print_stdout)]
pub fn emit(event: Event) {
    let Some((stream, text)) = render(&event, terminal()) else { return };
    let _ = match stream {
        Stream::Stderr => std::io::stderr().lock().write_all(text.as_bytes()),
        Stream::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).and_then(|()| out.flush())
        }
    };
}

/// `text` with every byte that could drive a terminal shown instead:
/// control characters but newline and tab (ESC, BEL, CR, backspace, C1),
/// and the bidirectional overrides that reorder what is shown, each as
/// `\u{…}`. Text without any is borrowed as it is.
pub fn clean(text: &str) -> Cow<'_, str> {
    let hostile = |c: char| {
        (c.is_control() && c != '\n' && c != '\t') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(hostile) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hostile(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `say!("…", args)`: `ccl-coverage: …` on stderr, whatever the verbosity.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => { $crate::reporter::emit($crate::reporter::Event::Say(&format!($($arg)*))) };
}

/// `note!("…", args)`: a line on stderr that `-q` leaves out.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => { $crate::reporter::emit($crate::reporter::Event::Note(&format!($($arg)*))) };
}

/// `warning!("…", args)`: `ccl-coverage: warning: …` on stderr.
#[macro_export]
macro_rules! warning {
    ($($arg:tt)*) => { $crate::reporter::emit($crate::reporter::Event::Warning(&format!($($arg)*))) };
}

/// `detail!("…", args)`: a line on stderr that only `-v` shows.
#[macro_export]
macro_rules! detail {
    ($($arg:tt)*) => { $crate::reporter::emit($crate::reporter::Event::Detail(&format!($($arg)*))) };
}

/// `show!("…", args)`: text for a person on stdout, cleaned, no newline added.
#[macro_export]
macro_rules! show {
    ($($arg:tt)*) => { $crate::reporter::emit($crate::reporter::Event::Print(&format!($($arg)*))) };
}

/// `output!("…", args)`: data on stdout as it is, no newline added.
#[macro_export]
macro_rules! output {
    ($($arg:tt)*) => { $crate::reporter::emit($crate::reporter::Event::Output(&format!($($arg)*))) };
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Terminal = Terminal { color: false, verbosity: Verbosity::Normal };

    fn shown(event: &Event, terminal: Terminal) -> Option<String> {
        render(event, terminal).map(|(_, text)| text)
    }

    /// One event of every kind, each carrying `name` wherever it has text. The match has no
    /// wildcard: a new kind of event does not compile until it is listed here.
    fn every_kind<'a>(name: &'a str, path: &'a Path, files: &'a [String]) -> Vec<Event<'a>> {
        let all = vec![
            Event::Say(name),
            Event::Note(name),
            Event::Detail(name),
            Event::Warning(name),
            Event::Block(name),
            Event::TrialEnded { done: 1, total: 2, verdict: TrialMark::Fail, name, detail: name },
            Event::Print(name),
            Event::Output(name),
            Event::RunUses { config: name, config_path: path, workspace: path },
            Event::DeviceDecided { summary: name },
            Event::BuildWaiting { dir: path, in_use_by: None },
            Event::BuildWaiting { dir: path, in_use_by: Some(name) },
            Event::BuildReused { id: name, dir: path },
            Event::BuildStarted { config: name, id: name, dir: path, existing: false },
            Event::BuildStarted { config: name, id: name, dir: path, existing: true },
            Event::BuildStep { i: 1, n: 2, name, took: None },
            Event::BuildStep { i: 1, n: 2, name, took: Some(Duration::from_millis(1500)) },
            Event::BuildReady { id: name, took: Duration::from_secs(3) },
            Event::TrialIgnored { trial: name, why: name },
            Event::Quarantined { trial: name, files },
            Event::ReportPage { what: name, path },
            Event::BuildDamaged { id: name, why: name },
            Event::BuildHoldsOthers { dir: path, said: name },
            Event::BuildUncheckable { dir: path, why: name },
            Event::FailedBuildDeleted { dir: path, done: name },
            Event::FailedBuildKept { dir: path, why: name },
            Event::NotRegistered { workspace: path, build: path, why: name },
            Event::BuildChanged { from: name, to: name },
            Event::DeviceObjectUnmapped { path: name },
            Event::LeftBehindKilled { pid: 7, command: name, by: name },
            Event::SupervisorLost { trial: name, why: name, log: path },
            Event::Interrupted { signal: name, again: false },
            Event::Interrupted { signal: name, again: true },
            Event::NoSignalHandlers { why: name },
            Event::WorkspaceTakenOver { root: path, holder: name },
            Event::WorkspaceAdopted { root: path },
            Event::RunJsonNotUpdated { why: name },
            Event::ReaderFellBack { why: name },
            Event::BranchListingNotKept { of: path, why: name },
            Event::DeviceCodeUnmapped { what: name, why: name },
            Event::DeviceAfterBuild { said: name },
            Event::SourceNameKept { note: name },
            Event::WorkspaceCleaned { root: path, kept: Some((name, 2)), folder_deleted: false },
            Event::WorkspaceCleaned { root: path, kept: None, folder_deleted: true },
            Event::WorkspaceCleaned { root: path, kept: None, folder_deleted: false },
        ];
        for event in &all {
            match event {
                Event::Say(_)
                | Event::Note(_)
                | Event::Detail(_)
                | Event::Warning(_)
                | Event::Block(_)
                | Event::TrialEnded { .. }
                | Event::Print(_)
                | Event::Output(_)
                | Event::RunUses { .. }
                | Event::DeviceDecided { .. }
                | Event::BuildWaiting { .. }
                | Event::BuildReused { .. }
                | Event::BuildStarted { .. }
                | Event::BuildStep { .. }
                | Event::BuildReady { .. }
                | Event::TrialIgnored { .. }
                | Event::Quarantined { .. }
                | Event::ReportPage { .. }
                | Event::BuildDamaged { .. }
                | Event::BuildHoldsOthers { .. }
                | Event::BuildUncheckable { .. }
                | Event::FailedBuildDeleted { .. }
                | Event::FailedBuildKept { .. }
                | Event::NotRegistered { .. }
                | Event::BuildChanged { .. }
                | Event::DeviceObjectUnmapped { .. }
                | Event::LeftBehindKilled { .. }
                | Event::SupervisorLost { .. }
                | Event::Interrupted { .. }
                | Event::NoSignalHandlers { .. }
                | Event::WorkspaceTakenOver { .. }
                | Event::WorkspaceAdopted { .. }
                | Event::RunJsonNotUpdated { .. }
                | Event::ReaderFellBack { .. }
                | Event::BranchListingNotKept { .. }
                | Event::DeviceCodeUnmapped { .. }
                | Event::DeviceAfterBuild { .. }
                | Event::SourceNameKept { .. }
                | Event::WorkspaceCleaned { .. } => {}
            }
        }
        all
    }

    #[test]
    fn control_bytes_of_any_name_are_shown_not_sent() {
        let name = "src/\u{1b}]0;owned\u{7}x\u{1b}[2Jy\rz\u{9b}w\u{202e}cc.cc";
        let cleaned = clean(name);
        assert_eq!(cleaned, "src/\\u{1b}]0;owned\\u{7}x\\u{1b}[2Jy\\u{d}z\\u{9b}w\\u{202e}cc.cc");
        assert!(!cleaned.chars().any(char::is_control), "{cleaned:?}");
        assert!(matches!(clean("plain\tname\n"), Cow::Borrowed(_)));
        let path = Path::new(name);
        let files = [name.to_string()];
        for event in every_kind(name, path, &files) {
            let Some((stream, _)) = render(&event, Terminal { verbosity: Verbosity::Verbose, ..PLAIN }) else {
                panic!("{event:?} is shown at -v")
            };
            if matches!(event, Event::Output(_)) {
                continue;
            }
            for color in [false, true] {
                let text = shown(&event, Terminal { color, verbosity: Verbosity::Verbose }).unwrap();
                let escapes = text.matches('\u{1b}').count();
                // Only the reporter's own colour codes where it colours: a warning's bold yellow
                // `warning` and bold `:`, a trial's word.
                let warns = event.worded().is_some_and(|(level, _)| level == Level::Warning);
                let own = match (color, &event) {
                    (false, _) => 0,
                    (true, Event::TrialEnded { .. }) => 2,
                    (true, _) if warns => 4,
                    _ => 0,
                };
                assert_eq!(escapes, own, "{event:?} in colour {color} on {stream:?}: {text:?}");
                assert!(!text.contains('\u{7}') && !text.contains('\r') && !text.contains('\u{9b}'), "{text:?}");
                let prefixed = !matches!(event, Event::Block(_) | Event::Print(_));
                assert_eq!(text.starts_with(PREFIX), prefixed, "{event:?}: {text:?}");
                assert_eq!(text.matches(PREFIX).count(), usize::from(prefixed), "one prefix: {text:?}");
            }
        }
        // Data for a program goes out byte for byte; text for a person is cleaned.
        assert_eq!(render(&Event::Output(name), PLAIN), Some((Stream::Stdout, name.to_string())));
        assert_eq!(render(&Event::Print(name), PLAIN), Some((Stream::Stdout, cleaned.into_owned())));
    }

    #[test]
    fn verbosity_chooses_what_is_shown() {
        let quiet = Terminal { verbosity: Verbosity::Quiet, ..PLAIN };
        let verbose = Terminal { verbosity: Verbosity::Verbose, ..PLAIN };
        let pass = Event::TrialEnded { done: 3, total: 42, verdict: TrialMark::Pass, name: "A::1K", detail: "0.86s" };
        assert_eq!(shown(&pass, PLAIN).unwrap(), "ccl-coverage: [3/42] PASS    A::1K (0.86s)\n");
        assert_eq!(shown(&pass, quiet), None);
        let fail = Event::TrialEnded { done: 3, total: 42, verdict: TrialMark::Fail, name: "A::1K", detail: "0.86s" };
        assert_eq!(shown(&fail, quiet).unwrap(), "ccl-coverage: [3/42] FAIL    A::1K (0.86s)\n");
        assert_eq!(
            shown(&fail, Terminal { color: true, ..quiet }).unwrap(),
            "ccl-coverage: [3/42] \u{1b}[31mFAIL   \u{1b}[0m A::1K (0.86s)\n"
        );
        assert_eq!(shown(&Event::Note("n"), quiet), None);
        assert_eq!(shown(&Event::Note("n"), PLAIN).unwrap(), "ccl-coverage: n\n");
        assert_eq!(shown(&Event::Block("t\n"), quiet).unwrap(), "t\n");
        assert_eq!(shown(&Event::Say("s"), quiet).unwrap(), "ccl-coverage: s\n");
        assert_eq!(shown(&Event::Detail("d"), PLAIN), None);
        assert_eq!(shown(&Event::Detail("d"), verbose).unwrap(), "ccl-coverage: d\n");
        assert_eq!(shown(&Event::Warning("w"), quiet).unwrap(), "ccl-coverage: warning: w\n");
        assert_eq!(
            shown(&Event::Warning("w"), Terminal { color: true, ..quiet }).unwrap(),
            "ccl-coverage: \u{1b}[1;33mwarning\u{1b}[0m\u{1b}[1m:\u{1b}[0m w\n",
            "cargo's colours"
        );
        // What a build says is a note: -q leaves it out, the default shows it.
        let step = Event::BuildStep { i: 2, n: 6, name: "build ccl", took: Some(Duration::from_millis(12_340)) };
        assert_eq!(shown(&step, quiet), None);
        assert_eq!(shown(&step, PLAIN).unwrap(), "ccl-coverage:   [2/6] build ccl: 12.3s\n");
        let files = ["p/x.profraw (another trial's)".to_string()];
        let moved = Event::Quarantined { trial: "A::1K", files: &files };
        assert_eq!(
            shown(&moved, quiet).unwrap(),
            "ccl-coverage: warning: A::1K: 1 profile(s) in its folder are not its own and were moved to quarantine: \
             p/x.profraw (another trial's)\n"
        );
    }

    #[test]
    fn the_environment_sets_colour_and_verbosity_and_a_wrong_value_is_named() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_string())
        };
        assert_eq!(Terminal::from_env(&env(&[]), true).unwrap(), Terminal { color: true, ..PLAIN });
        assert_eq!(Terminal::from_env(&env(&[("NO_COLOR", "1")]), true).unwrap(), PLAIN);
        assert!(Terminal::from_env(&env(&[("CCL_COV_COLOR", "always")]), false).unwrap().color);
        let quiet = Terminal::from_env(&env(&[("CCL_COV_VERBOSITY", "quiet")]), false).unwrap();
        assert_eq!(quiet.verbosity, Verbosity::Quiet);
        let err = Terminal::from_env(&env(&[("CCL_COV_COLOR", "pink")]), false).unwrap_err();
        assert!(err.contains("expected auto, always or never"), "{err}");
    }
}
