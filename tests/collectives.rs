//! One trial per collective × size × variant of the selected config
//! (`CCL_COV_CONFIG`, default `configs/local.json`). See README.md.
fn main() -> std::process::ExitCode {
    ccl_coverage::harness::collectives::main()
}
