//! ccl-coverage: a `cargo test` harness that builds a GPU collective library
//! (RCCL, NCCL, or the CPU stand-in under `tests/fixtures/`) with LLVM
//! source-based coverage, runs its perf tests as one trial per collective ×
//! size × variant, and reports host (and, where the toolchain allows, device)
//! coverage.
//!
//! The modules follow the data flow:
//! config → plan → toolchain/device → fixture (build) → launch → run →
//! outcome/perf → results; then profiles → report → attribution →
//! minimal_suite → diff_coverage. `harness` wires them into the two test
//! binaries.

pub mod allocation;
pub mod attribution;
pub mod config;
pub mod context;
pub mod device;
pub mod diff_coverage;
pub mod env_names;
pub mod error;
pub mod expand;
pub mod fixture;
pub mod harness;
pub mod host;
pub mod interrupt;
pub mod launch;
pub mod minimal_suite;
pub mod mpi;
pub mod objects;
pub mod outcome;
pub mod perf;
pub mod plan;
pub mod process;
pub mod proctree;
pub mod profiles;
pub mod rccl;
pub mod redact;
pub mod report;
pub mod results;
pub mod run;
pub mod shared_fs;
pub mod slots;
pub mod supervisor;
pub mod template;
pub mod toolchain;
pub mod upstream;
pub mod workspace;
pub mod workspace_lock;
