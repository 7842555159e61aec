//! The harness without cargo: `ccl-coverage collectives [libtest args]` and
//! `ccl-coverage report [libtest args]` run exactly what the `collectives` and
//! `coverage_report` test binaries run. For machines that have the checkout
//! but no Rust toolchain, and for the crate's own end-to-end tests.
//! `ccl-coverage who-covers FILE:LINE` names the trials that executed a line,
//! from the last report's `attribution.json`.

use libtest_mimic::Arguments;
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = ccl_coverage::exec::supervisor::run_if_requested() {
        return code;
    }
    let mut args: Vec<String> = std::env::args().collect();
    let command = if args.len() > 1 { args.remove(1) } else { String::new() };
    // What remains is `ccl-coverage [libtest args]`, as libtest-mimic expects.
    match command.as_str() {
        "collectives" => ccl_coverage::harness::collectives::main_with(Arguments::from_iter(args)),
        "report" => ccl_coverage::harness::coverage_report::main_with(Arguments::from_iter(args)),
        "who-covers" => ccl_coverage::harness::who_covers::main(&args[1..]),
        _ => {
            eprintln!(
                "usage: ccl-coverage <collectives|report> [libtest arguments, e.g. --list, --exact NAME]\n       ccl-coverage who-covers FILE:LINE"
            );
            ExitCode::from(2)
        }
    }
}
