//! The two `harness = false` test binaries, as library code so that
//! `tests/*.rs` stay one-liners and the `ccl-coverage` binary can run the same
//! harness on machines without cargo.

pub mod collectives;
pub mod dry_run;
pub mod report;
