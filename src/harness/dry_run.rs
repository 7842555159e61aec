//! `CCL_COV_DRY_RUN=1`: resolve everything, build and run nothing, and print
//! what would happen: the toolchain, the device-coverage decision, the build
//! commands, and per selected trial its argv, added environment, working
//! directory and timeout.

use crate::context::Context;
use crate::error::Result;
use crate::fixture::BuildPlan;
use crate::launch;
use crate::plan::TrialSpec;
use crate::process::shell_quote;
use crate::redact;
use libtest_mimic::{Arguments, Trial};
use std::fmt::Write as _;
use std::process::ExitCode;

pub fn print(ctx: &Context, specs: &[TrialSpec], args: &Arguments) -> ExitCode {
    let selected: Vec<&TrialSpec> = specs
        .iter()
        .filter(|spec| {
            let trial = Trial::test(spec.name.clone(), || Ok(())).with_ignored_flag(spec.ignored);
            !args.is_filtered_out(&trial) && !args.is_ignored(&trial)
        })
        .collect();
    match render(ctx, &selected) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ccl-coverage: dry run: {e}");
            ExitCode::from(2)
        }
    }
}

/// The dry-run text for `selected` trials.
pub fn render(ctx: &Context, selected: &[&TrialSpec]) -> Result<String> {
    let plan = BuildPlan::new(ctx)?;
    let manifest = plan.planned_manifest(ctx)?;
    let tc = &manifest.toolchain;
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "ccl-coverage dry run: nothing is built or run");
    let _ = writeln!(w, "config: {} ({})", ctx.config().name, ctx.loaded.path.display());
    let _ = writeln!(w, "workspace: {}", ctx.workspace.root().display());
    let _ = writeln!(w, "compiler: {} ({})", tc.cxx.path.display(), tc.cxx.version);
    let _ = writeln!(w, "llvm-profdata: {} ({})", tc.llvm_profdata.path.display(), tc.llvm_profdata.version);
    let _ = writeln!(w, "llvm-cov: {} ({})", tc.llvm_cov.path.display(), tc.llvm_cov.version);
    let _ = writeln!(w, "device coverage: {}", manifest.device.summary());
    let _ = writeln!(w, "coverage flags: {}", manifest.coverage_flags.join(" "));
    if !manifest.coverage_link_flags.is_empty() {
        let _ = writeln!(w, "coverage link flags: {}", manifest.coverage_link_flags.join(" "));
    }
    let cached = if plan.is_cached() { " (cached: would be reused)" } else { "" };
    let _ = writeln!(w, "build {} in {}{cached}", manifest.build_id, manifest.build_dir.display());
    for (i, step) in manifest.steps.iter().enumerate() {
        let _ = writeln!(w, "  step {}: {}\n    {}", i + 1, step.name, redact::shell_line(&step.command));
    }
    if manifest.existing_build {
        let _ = writeln!(w, "  library: the existing build {} is used as it is", manifest.build_dir.display());
    }
    for object in &manifest.objects {
        let _ = writeln!(w, "  object: {}", object.path.display());
    }
    if manifest.device.enabled {
        for pattern in &ctx.config().coverage.device.objects {
            let _ = writeln!(w, "  device objects: {} (those with coverage mapping)", plan.vars.render(pattern)?);
        }
    }
    let _ = writeln!(w, "  test binaries: {}", manifest.bin_dir.display());
    let _ = writeln!(w, "trials: {}", selected.len());
    for spec in selected {
        let profile_dir = ctx.workspace.trial_profiles(&spec.slug);
        let launch = launch::prepare(ctx, &manifest, spec, &profile_dir, None)?;
        let _ = writeln!(
            w,
            "trial {} ({} ranks, launcher {}, timeout {}s, grace {}s)",
            spec.name,
            spec.ranks,
            spec.launcher,
            launch.timeout.as_secs(),
            launch.grace.as_secs()
        );
        // Dry-run output lands in CI logs: secrets are masked as in every record.
        let argv: Vec<String> = launch.cmd.argv_redacted().iter().map(|a| shell_quote(a)).collect();
        let _ = writeln!(w, "  argv: {}", argv.join(" "));
        for (k, v) in launch.env.iter().filter(|(k, _)| k != crate::env_names::TRIAL_TOKEN) {
            let _ = writeln!(w, "  env: {k}={}", shell_quote(&redact::value(k, v)));
        }
        let _ = writeln!(w, "  env removed: {}", crate::env_names::PROFILE_INIT_ONCE);
        let _ = writeln!(w, "  cwd: {}", launch.cmd.get_cwd().map(|p| p.display().to_string()).unwrap_or_default());
    }
    Ok(out)
}
