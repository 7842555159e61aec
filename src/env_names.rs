//! Environment variables that several stages name: set by one, read or
//! removed by another. Kept here so that no stage spells one out again.

/// Marks every process of one trial (and of one build step), so none escapes
/// the kill; its value names the harness that owns it (`proctree.rs`).
pub const TRIAL_TOKEN: &str = "CCL_COV_TRIAL_TOKEN";

/// Inherited from an instrumented parent, it makes the profile runtime skip
/// creating the profile directory (compiler-rt's `InstrProfilingFile.c`
/// initialises once per process tree): never pass it on.
pub(crate) const PROFILE_INIT_ONCE: &str = "__LLVM_PROFILE_RT_INIT_ONCE";

/// Where the profile runtime writes a process's raw profile.
pub(crate) const PROFILE_FILE: &str = "LLVM_PROFILE_FILE";

/// Set (to a JSON spec) in the environment of a trial supervisor process
/// (`supervisor.rs`).
pub const SUPERVISE: &str = "CCL_COV_SUPERVISE";

/// Set by nextest for every test process of one run: they share a workspace
/// (`workspace_lock.rs`).
pub(crate) const NEXTEST_RUN_ID: &str = "NEXTEST_RUN_ID";

/// Extra glob patterns of secret variable names, comma-separated (`redact.rs`).
pub(crate) const REDACT: &str = "CCL_COV_REDACT";
