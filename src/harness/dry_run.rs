//! `CCL_COV_DRY_RUN=1`: resolve everything, build and run nothing, and print
//! what would happen: the toolchain, the device-coverage decision, the build
//! commands, and per selected trial its argv, added environment, working
//! directory and timeout. `CCL_COV_DRY_RUN=json` prints the same as one JSON
//! document. An existing build that cannot be used (missing, or without
//! coverage mapping) does not hide the plan: it is printed whole, the
//! problem named, and the exit status is 1.

use crate::build::cache::BuildPlan;
use crate::context::Context;
use crate::error::{Context as _, Result};
use crate::exec::process::shell_quote;
use crate::exec::redact;
use crate::launch;
use crate::launch::allocation::Allocation;
use crate::plan::TrialSpec;
use crate::upstream::TrialKind;
use libtest_mimic::{Arguments, Trial};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::process::ExitCode;

pub(crate) fn print(ctx: &Context, specs: &[TrialSpec], args: &Arguments) -> ExitCode {
    // Trials the plan ignored for a reason are shown with it; others only
    // when selected.
    let selected: Vec<&TrialSpec> = specs
        .iter()
        .filter(|spec| {
            let trial = Trial::test(spec.name.clone(), || Ok(())).with_ignored_flag(spec.ignored);
            !args.is_filtered_out(&trial) && (!args.is_ignored(&trial) || spec.ignore_reason.is_some())
        })
        .collect();
    let rendered = BuildPlan::new(ctx).and_then(|plan| {
        let text = if ctx.dry_run_json { render_json(ctx, &plan, &selected) } else { render(ctx, &plan, &selected) };
        Ok((text?, plan.problems))
    });
    match rendered {
        Ok((text, problems)) => {
            // JSON is data for a program; the text is for a person.
            if ctx.dry_run_json {
                crate::output!("{text}");
            } else {
                crate::show!("{text}");
            }
            for problem in &problems {
                crate::say!("dry run: {problem}");
            }
            if problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            crate::say!("dry run: {e}");
            ExitCode::from(2)
        }
    }
}

/// Why a trial would not run (the plan's reason, or the allocation's), and
/// otherwise the nodes an idle run would place it on.
fn placement(
    ctx: &Context,
    allocation: Option<&Allocation>,
    spec: &TrialSpec,
) -> (Option<String>, Vec<(String, usize)>) {
    if let Some(why) = spec.ignore_reason.clone().or_else(|| launch::placement::misfit(ctx, allocation, spec)) {
        return (Some(why), Vec::new());
    }
    let (slots, want) = launch::placement::pool(ctx, allocation, spec);
    (None, slots.idle_hosts(want).unwrap_or_default())
}

/// The dry-run text for `selected` trials.
fn render(ctx: &Context, plan: &BuildPlan, selected: &[&TrialSpec]) -> Result<String> {
    let allocation = launch::placement::detect_allocation(ctx)?;
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
    if plan.problems.is_empty() {
        let cached = if plan.is_cached() { " (cached: would be reused)" } else { "" };
        let _ = writeln!(w, "build {} in {}{cached}", manifest.build_id, manifest.build_dir.display());
    } else {
        let _ = writeln!(w, "build (none: cannot be used, see the problems below) in {}", manifest.build_dir.display());
    }
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
    if let Some(run) = &ctx.config().upstream {
        let _ = writeln!(w, "upstream config: {} (overlay {})", run.path.display(), run.overlay.display());
        for warning in &run.resolved.warnings {
            let _ = writeln!(w, "warning: {warning}");
        }
    }
    let _ = writeln!(w, "trials: {}", selected.len());
    if let Some(a) = &allocation {
        let nodes: Vec<String> =
            a.nodes.iter().map(|n| format!("{}:{} ({} GPU slots)", n.name, n.slots, n.gpu_slots())).collect();
        let _ = writeln!(w, "nodes: {} from {}", nodes.join(", "), a.source);
    }
    for spec in selected {
        let (ignored, hosts) = placement(ctx, allocation.as_ref(), spec);
        if let Some(why) = ignored {
            let _ = writeln!(w, "trial {} ignored: {why}", spec.name);
            continue;
        }
        let profile_dir = ctx.workspace.trial_profiles(&spec.slug);
        let launch = launch::prepare(ctx, &manifest, spec, &profile_dir, None, &hosts)?;
        let shown = spec.upstream().is_some() || matches!(launch.kind, TrialKind::Gtest | TrialKind::Ctest);
        let kind = if shown { format!("{}, ", launch.kind.as_str()) } else { String::new() };
        let capped = if spec.capped() { " (upstream: no limit; the overlay's cap)" } else { "" };
        let _ = writeln!(
            w,
            "trial {} ({kind}{} ranks, launcher {}, timeout {}s{capped}, grace {}s)",
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
    for problem in &plan.problems {
        let _ = writeln!(w, "problem: {problem}");
    }
    Ok(out)
}

/// The dry run as one JSON document: the same content as [`render`].
fn render_json(ctx: &Context, plan: &BuildPlan, selected: &[&TrialSpec]) -> Result<String> {
    let allocation = launch::placement::detect_allocation(ctx)?;
    let manifest = plan.planned_manifest(ctx)?;
    let tc = &manifest.toolchain;
    let tool = |t: &crate::toolchain::Tool| json!({"path": t.path, "version": t.version});
    let steps: Vec<Value> =
        manifest.steps.iter().map(|s| json!({"name": s.name, "command": redact::shell_line(&s.command)})).collect();
    let mut device_objects = Vec::new();
    if manifest.device.enabled {
        for pattern in &ctx.config().coverage.device.objects {
            device_objects.push(plan.vars.render(pattern)?);
        }
    }
    let mut trials = Vec::new();
    for spec in selected {
        let upstream = spec.upstream();
        let (ignored, hosts) = placement(ctx, allocation.as_ref(), spec);
        let mut t = json!({
            "name": spec.name,
            "kind": spec.kind().as_str(),
            "size": Some(spec.size()).filter(|s| !s.is_empty()),
            "filter": spec.program(ctx.config()).and_then(|p| p.filter.as_deref()),
            "ranks": spec.ranks,
            "nodes": upstream.map_or_else(|| spec.launcher(ctx.config()).map_or(1, |l| l.nodes as u64), |u| u.nodes),
            "gpus": upstream.map(|u| u.gpus),
            "launcher": spec.launcher,
            "ignored": spec.ignored || ignored.is_some(),
            "ignore_reason": ignored,
            "timeout_s": spec.timeout(ctx.config(), manifest.device.enabled).as_secs(),
            "timeout_capped": spec.capped(),
            "argv": Value::Null,
            "env": Value::Null,
            "env_removed": Value::Null,
            "cwd": Value::Null,
        });
        if ignored.is_none() {
            let profile_dir = ctx.workspace.trial_profiles(&spec.slug);
            let launch = launch::prepare(ctx, &manifest, spec, &profile_dir, None, &hosts)?;
            let env: serde_json::Map<String, Value> = launch
                .env
                .iter()
                .filter(|(k, _)| k != crate::env_names::TRIAL_TOKEN)
                .map(|(k, v)| (k.clone(), Value::String(redact::value(k, v))))
                .collect();
            t["argv"] = json!(launch.cmd.argv_redacted());
            t["env"] = Value::Object(env);
            t["env_removed"] = json!([crate::env_names::PROFILE_INIT_ONCE]);
            t["cwd"] = json!(launch.cmd.get_cwd());
            t["timeout_s"] = json!(launch.timeout.as_secs());
            t["grace_s"] = json!(launch.grace.as_secs());
        }
        trials.push(t);
    }
    let upstream = ctx.config().upstream.as_ref().map(|run| {
        json!({
            "config": run.path,
            "overlay": run.overlay,
            "warnings": run.resolved.warnings,
        })
    });
    let doc = json!({
        "config": {"name": ctx.config().name.as_str(), "path": ctx.loaded.path, "upstream": upstream},
        "workspace": ctx.workspace.root(),
        "toolchain": {
            "compiler": tool(&tc.cxx),
            "llvm_profdata": tool(&tc.llvm_profdata),
            "llvm_cov": tool(&tc.llvm_cov),
        },
        "device": {
            "enabled": manifest.device.enabled,
            "summary": manifest.device.summary(),
            "objects": device_objects,
        },
        "build": {
            "id": plan.problems.is_empty().then_some(&manifest.build_id),
            "problems": plan.problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "dir": manifest.build_dir,
            "cached": plan.is_cached(),
            "coverage_flags": manifest.coverage_flags,
            "coverage_link_flags": manifest.coverage_link_flags,
            "steps": steps,
            "existing_build": manifest.existing_build,
            "objects": manifest.objects.iter().map(|o| &o.path).collect::<Vec<_>>(),
            "test_binaries": manifest.bin_dir,
        },
        "trials": trials,
    });
    let mut text = serde_json::to_string_pretty(&doc).context("dry run")?;
    text.push('\n');
    Ok(text)
}
