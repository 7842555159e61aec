//! The report stage's entry: one report of a workspace, made by `session/`
//! (merge, model, steps, checks), each writer and check in a file named for
//! it: llvm-cov's inputs (`llvm_cov.rs`), the typed totals, the text summary,
//! the snapshot and the bars (`totals.rs`), Cobertura, Codecov and relative
//! paths (`formats.rs`), health (`health.rs`), `meta.json` (`meta.rs`),
//! `summary.md` (`markdown.rs`), the one HTML escaper (`escape.rs`).

pub mod attribution;
pub(crate) mod attribution_pages;
#[cfg(test)]
pub(crate) mod capture_branch_tests;
pub(crate) mod device_pages;
pub(crate) mod diff_coverage;
pub(crate) mod elements;
mod escape;
mod formats;
mod health;
pub(crate) mod html_index;
mod llvm_cov;
mod markdown;
pub(crate) mod measured;
mod meta;
pub(crate) mod minimal_suite;
pub(crate) mod screen;
pub(crate) mod session;
pub(crate) mod shards;
mod totals;

pub(crate) use escape::escape_html;
pub(crate) use formats::{absolute_lcov, cobertura, codecov_json, relative_json, relative_lcov};
pub(crate) use health::Health;
pub use llvm_cov::ReportInputs;
pub(crate) use markdown::markdown;
pub(crate) use meta::ReportMeta;
pub use totals::totals;
pub(crate) use totals::{
    Totals, any_bar, check_bars, check_device_bar, normalize, percent, relative, snapshot_text, summary_text,
};
