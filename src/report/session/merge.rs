//! The first thing every step needs: the build's manifest, the trials'
//! checked results and profiles, merged into one profile in the staging
//! folder; what could not be trusted is quarantined and named.

use super::Session;
use crate::build::cache::BuildManifest;
use crate::coverage::profiles;
use crate::coverage::source_names::SourceNames;
use crate::device::lines::DeviceLines;
use crate::error::{Error, Result};
use crate::plan;
use crate::report::{Health, ReportInputs, ReportMeta, measured};
use crate::results::{self, TrialResult};
use crate::workspace::Area;
use std::path::Path;

pub(super) enum Merge {
    /// The build was not instrumented: every step is ignored with this reason.
    Off(String),
    Done(Box<Merged>),
}

/// The merged profile and what it was made from.
pub(crate) struct Merged {
    pub(crate) manifest: BuildManifest,
    pub(crate) results: Vec<TrialResult>,
    pub(crate) inputs: ReportInputs,
    pub(crate) health: Health,
    /// Device lines from a source of their own (NVIDIA's kernel records).
    pub(crate) device_lines: Option<DeviceLines>,
}

impl Session {
    pub(super) fn merge(&self) -> Result<Merge> {
        let ws = &self.ctx.workspace;
        let (manifest, sources_changed) = match self.checked_build()? {
            Ok(checked) => checked,
            Err(off) => return Ok(Merge::Off(off)),
        };
        let (results, damaged_results) = self.checked_results(&manifest)?;
        let verified = self.usable_profiles(&manifest, &results)?;
        let report_dir = self.report_dir();
        let profdata = report_dir.join("coverage.profdata");
        let (merged_inputs, quarantined_now) = self.merged_profile(&manifest, &verified.inputs, &profdata)?;
        let mut quarantined = quarantined_now;
        quarantined.extend(verified.quarantined);
        let mut missing = verified.missing;
        let recorded: Vec<_> = results.iter().map(|r| (r.trial.as_str(), r.slug.as_str(), &r.device_sha256)).collect();
        // What the report measures and leaves out: the host report's rule,
        // with the library's test code, for the device lines too.
        let measure = measured::measure(ws, self.ctx.config(), &manifest, &results, &profdata)?;
        for line in measure.measurement.lines() {
            crate::say!("{line}");
        }
        let ignore = measure.scope.rule.clone();
        let keep = |file: &str| ignore.keeps(file);
        let names = std::sync::Arc::new(SourceNames::of(&manifest));
        let device_lines = match crate::coverage::device_lines(ws, &manifest, &recorded, &keep, &names)? {
            Some((lines, checked)) => {
                quarantined.extend(checked.quarantined);
                missing.extend(checked.missing);
                Some(lines)
            }
            None => None,
        };
        let runs = results::RecordsByRun::of(&results);
        if let Some(also) = results::also_uses(&runs.earlier).filter(|_| !self.after_run) {
            // The names are in meta.json: 800 of them are no line to read.
            crate::say!(
                "{also}; {} names them (earlier_runs); run every trial for a report of one run",
                self.shown(&report_dir.join("meta.json")).display()
            );
        }
        let mut health = Health::new(&results, quarantined, missing);
        health.damaged_results = damaged_results;
        health.sources_changed = sources_changed;
        let config = self.ctx.config();
        let title = format!("ccl-coverage: {} (build {})", config.name, manifest.build_id);
        health.measurement = Some(measure.measurement);
        let inputs =
            ReportInputs::new(&manifest, measure.measured.objects, profdata, ignore, title, self.ctx.entry, names)?;
        // What llvm-cov warns about on the merged profile it leaves out of
        // every total: said here, in meta.json and in summary.md.
        inputs.summary_text()?;
        health.llvm_cov_warnings = inputs.warnings();
        for w in &health.llvm_cov_warnings {
            crate::warning!("{}", w.text());
        }
        let meta = ReportMeta::new(&manifest, &results, merged_inputs, &health);
        self.ctx.workspace.write(
            &report_dir.join("meta.json"),
            serde_json::to_string_pretty(&meta).expect("meta serializes").as_bytes(),
        )?;
        Ok(Merge::Done(Box::new(Merged { manifest, results, inputs, health, device_lines })))
    }

    /// The workspace's build, checked against the config and its tools, with
    /// the sentence saying its sources changed since; `Err` inside when
    /// there is nothing to report (no trial ran, no coverage).
    fn checked_build(&self) -> Result<std::result::Result<(BuildManifest, Option<String>), String>> {
        let ws = &self.ctx.workspace;
        // The trials did not run: nothing to report, not a failure of every step.
        if let Some(nothing) = super::nothing_to_report(&self.ctx) {
            return Ok(Err(nothing));
        }
        let mut manifest = BuildManifest::read_in(ws).map_err(|e| {
            Error::new(format!(
                "no build recorded in {} ({e}); run `{}` first, with the same CCL_COV_CONFIG and CCL_COV_WORKSPACE",
                ws.root().display(),
                self.ctx.entry.trials()
            ))
        })?;
        // A workspace made before builds kept a registry registers as it reports.
        crate::build::cache::register_workspace(&self.ctx.state_dir, ws, &self.ctx.config().name, &manifest.build_id);
        if !manifest.coverage {
            return Ok(Err(format!(
                "build {} was made without coverage (CCL_COV_COVERAGE=off): there is nothing to report",
                manifest.build_id
            )));
        }
        // build.json names programs; the report runs only those it resolves and checks.
        manifest.toolchain = crate::toolchain::resolve_as_built(
            &self.ctx.config().toolchain,
            &crate::config::process_env,
            &manifest.toolchain,
        )?;
        // llvm-cov would read a damaged object as `malformed coverage data`, in every step.
        let damaged = manifest.damaged_objects();
        if !damaged.is_empty() {
            return Err(Error::new(format!(
                "build {}'s objects are damaged, so no report is made from them: {}; run `{}` again (it rebuilds a damaged cached build), then the report",
                manifest.build_id,
                damaged.join("; "),
                self.ctx.entry.trials()
            )));
        }
        // Other objects, steps, flags or tools: refused, not reported on the old build's.
        match crate::build::cache::config_differs(&self.ctx, &manifest) {
            Ok(None) => {}
            Ok(Some(why)) => return Err(Error::new(why)),
            Err(e) => {
                crate::warning!("the config's build inputs cannot be compared with build {}'s: {e}", manifest.build_id);
            }
        }
        let sources_changed = crate::build::cache::sources_changed(&manifest, self.ctx.config(), self.ctx.entry);
        if let Some(changed) = &sources_changed {
            crate::warning!("{changed}");
        }
        Ok(Ok((manifest, sources_changed)))
    }

    /// This build's trial records; a damaged one goes to quarantine, named
    /// in the second list, and its trial is left out.
    fn checked_results(&self, manifest: &BuildManifest) -> Result<(Vec<TrialResult>, Vec<String>)> {
        let ws = &self.ctx.workspace;
        let checked = results::load_checked(ws, &manifest.build_id, &plan::names(self.ctx.config()))?;
        if !checked.other_builds.is_empty() {
            let named: Vec<String> =
                checked.other_builds.iter().map(|(file, id)| format!("{} (build {id})", file.display())).collect();
            crate::say!(
                "{} records in {} are of another build than {}, and are not counted: {}",
                named.len(),
                ws.results_dir().display(),
                manifest.build_id,
                named.join(", ")
            );
        }
        let mut damaged_results = Vec::new();
        for (file, why) in checked.damaged {
            let slug = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let to = ws.quarantine_result(&slug, &file)?;
            crate::say!("{} is not a trial result ({why}); moved to {}", file.display(), to.display());
            damaged_results.push(format!("{} ({why}), now {}", file.display(), to.display()));
        }
        Ok((checked.results, damaged_results))
    }

    /// The profiles the trials recorded, as they recorded them; an error
    /// when none is left to merge.
    fn usable_profiles(&self, manifest: &BuildManifest, results: &[TrialResult]) -> Result<profiles::Verified> {
        let ws = &self.ctx.workspace;
        let recorded: Vec<_> = results.iter().map(TrialResult::recorded_profiles).collect();
        let verified = profiles::verified_inputs(ws, &recorded)?;
        if verified.inputs.is_empty() && (!verified.quarantined.is_empty() || !verified.missing.is_empty()) {
            let mut named: Vec<String> =
                verified.quarantined.iter().map(|q| format!("{}: {}", q.file.display(), q.reason)).collect();
            named.extend(verified.missing.iter().cloned());
            return Err(Error::new(format!(
                "no usable profile for build {}: all {} of its trials' profiles are damaged or gone (the damaged ones were moved to quarantine):\n    {}",
                manifest.build_id,
                named.len(),
                named.join("\n    ")
            )));
        }
        if verified.inputs.is_empty() {
            return Err(Error::new(format!(
                "no profiles for build {} under {}; run `{}` first",
                manifest.build_id,
                ws.area(Area::Profiles).display(),
                self.ctx.entry.trials()
            )));
        }
        Ok(verified)
    }

    /// Merges `inputs` into `profdata` in a clean staging folder; what
    /// llvm-profdata cannot read goes to its trial's quarantine. Returns how
    /// many were merged and what was quarantined.
    fn merged_profile(
        &self,
        manifest: &BuildManifest,
        inputs: &[std::path::PathBuf],
        profdata: &Path,
    ) -> Result<(usize, Vec<profiles::Quarantined>)> {
        let ws = &self.ctx.workspace;
        // Checked before anything is written: the report is installed there.
        ws.check_area(Area::Report)?;
        // What a killed report process left staged is of no use.
        for (name, _) in ws.list(&ws.area(Area::ReportStaging))? {
            let pid = name.to_str().and_then(|n| n.parse::<u32>().ok());
            if pid.is_some_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists()) {
                ws.remove(Area::ReportStaging, &ws.area(Area::ReportStaging).join(name))?;
            }
        }
        let report_dir = self.report_dir();
        ws.clear(Area::ReportStaging, &report_dir)?;
        let quarantine_for = |input: &Path| {
            let slug =
                input.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            ws.trial_quarantine(&slug)
        };
        let (merged_inputs, quarantined_now) = profiles::merge_checked(
            ws,
            &manifest.toolchain,
            inputs,
            &report_dir.join("profiles.list"),
            profdata,
            &quarantine_for,
        )?;
        if merged_inputs == 0 {
            return Err(Error::new(format!(
                "none of the {} profiles could be read; they are in {}",
                inputs.len(),
                ws.area(Area::Quarantine).display()
            )));
        }
        Ok((merged_inputs, quarantined_now))
    }
}
