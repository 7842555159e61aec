//! The two `harness = false` test binaries, as library code so that
//! `tests/*.rs` stay one-liners and the `ccl-coverage` binary can run the same
//! harness on machines without cargo.

pub mod collectives;
pub mod dry_run;
pub mod report;

use crate::context::Context;
use std::process::ExitCode;

/// The context from the environment, or the exit code after saying why not
/// (a wrong config fails `--list` too: nothing can run from it).
fn load_context() -> Result<Context, ExitCode> {
    Context::from_env().map_err(|e| {
        eprintln!("ccl-coverage: {e}");
        ExitCode::from(2)
    })
}
