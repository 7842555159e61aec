//! Merges the profiles the collectives run left in the workspace, writes the
//! reports and snapshot-checks the coverage summary. See README.md.
fn main() -> std::process::ExitCode {
    ccl_coverage::harness::coverage_report::main()
}
