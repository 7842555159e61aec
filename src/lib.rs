//! ccl-coverage: a `cargo test` harness that builds a GPU collective library
//! (RCCL, NCCL, or the CPU stand-in under `tests/fixtures/`) with LLVM
//! source-based coverage, runs its perf tests as one trial per collective ×
//! size × variant, and reports host (and, where the toolchain allows, device)
//! coverage.
//!
//! The folders are the stages of the pipeline, in the order data flows
//! (`docs/architecture.md` is the plan, and `tests/layering.rs` keeps the
//! code to it): exec and workspace below everything; then upstream, config,
//! plan, toolchain, device, context, build, launch, trial, verdict, coverage,
//! results, suite, report; `harness` wires them into the two test binaries.

pub mod env_names;
pub mod error;
pub mod reporter;

pub mod exec;
pub mod workspace;

pub mod build;
pub mod config;
pub(crate) mod context;
pub mod coverage;
pub mod device;
pub mod launch;
pub mod plan;
pub mod report;
pub(crate) mod results;
pub(crate) mod suite;
pub mod toolchain;
pub mod trial;
pub mod upstream;
pub(crate) mod verdict;

pub mod harness;
