//! Interruption, handled in one place.
//!
//! The first SIGINT, SIGTERM or SIGHUP (or the death of the `cargo` that
//! started this test binary: cargo dies of SIGTERM without passing it on)
//! sets a flag. Running trials see it within one poll, stop their processes
//! the way a timeout does (SIGTERM, grace, SIGKILL) and record themselves as
//! INTERRUPTED; trials not yet started do not start. A second signal exits at
//! once: the trial supervisors see the harness go and stop their trials
//! themselves (`supervisor.rs`). In the report the first signal also stops
//! the tool running (`llvm-cov`, `llvm-profdata`), no step starts after it,
//! and the last good report stays ([`stop_commands_too`]).

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Whether an interruption also stops the commands this process runs.
static STOP_COMMANDS: AtomicBool = AtomicBool::new(false);

/// Installs the handlers (once per process).
pub(crate) fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
            Ok(mut signals) => {
                std::thread::spawn(move || {
                    for sig in signals.forever() {
                        if !first(sig, signal_name(sig)) {
                            crate::reporter::emit(crate::reporter::Event::Interrupted {
                                signal: signal_name(sig),
                                again: true,
                            });
                            std::process::exit(128 + sig);
                        }
                    }
                });
            }
            Err(e) => {
                crate::reporter::emit(crate::reporter::Event::NoSignalHandlers { why: &e.to_string() });
            }
        }
        watch_cargo_parent();
    });
}

/// Records the interruption; false if the run was already interrupted.
fn first(sig: i32, what: &str) -> bool {
    let first = SIGNAL.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst).is_ok();
    if first {
        crate::reporter::emit(crate::reporter::Event::Interrupted { signal: what, again: false });
    }
    first
}

/// cargo does not forward SIGTERM to the test binary it runs, and dies of
/// it: without this, the test binary would carry on alone.
fn watch_cargo_parent() {
    let Some(parent) = rustix::process::getppid() else {
        return;
    };
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", parent.as_raw_nonzero())).unwrap_or_default();
    if comm.trim() != "cargo" {
        return;
    }
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(100));
            // Ctrl-C reaches cargo and this binary together: cargo's death
            // then is the same interruption, not a second one.
            if rustix::process::getppid() != Some(parent) {
                first(libc::SIGTERM, "cargo (our parent) is gone");
                return;
            }
        }
    });
}

/// From now on, an interruption also stops the commands this process runs
/// (`Cmd`): the report's tools are stopped, and its steps fail. The trials'
/// harness leaves this off: the merge of a trial that already ended runs
/// to its end, so its coverage is kept.
pub(crate) fn stop_commands_too() {
    STOP_COMMANDS.store(true, Ordering::SeqCst);
}

/// Whether the run was interrupted and its commands are to stop.
pub(crate) fn stops_commands() -> bool {
    STOP_COMMANDS.load(Ordering::SeqCst) && requested().is_some()
}

/// The signal that interrupted the run, if one did.
pub(crate) fn requested() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// `128 + signal` after an interruption, as a shell reports it.
pub(crate) fn exit_code() -> Option<u8> {
    requested().and_then(|sig| u8::try_from(128 + sig).ok())
}

/// Says which signal stopped the run, for messages.
pub(crate) fn describe() -> String {
    requested().map_or_else(String::new, |sig| signal_name(sig).to_string())
}

/// A signal's name for messages: `SIGTERM`; `signal` for one not named here.
pub(crate) fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}
