//! The steps that write the report: Cobertura, HTML, the text and Markdown
//! summaries, the attribution files and pages, the minimal suite.

use super::Session;
use super::attributed::Attributed;
use super::merge::Merged;
use super::model::{ModelSummary, ModelText};
use crate::error::{Context, Result};
use crate::plan;
use crate::report::attribution::{self, Attribution};
use crate::report::{self, attribution_pages, minimal_suite};

impl Session {
    pub(super) fn cobertura(&self, merged: &Merged, model: &ModelText) -> Result<()> {
        let lcov = model.text.as_str();
        report::cobertura(
            &self.ctx.workspace,
            lcov,
            &merged.manifest.library_src,
            &self.report_dir().join("cobertura.xml"),
        )
        .context("Cobertura conversion failed")
    }

    pub(super) fn html(&self, merged: &Merged, summary: &ModelSummary) -> Result<()> {
        let dir = self.report_dir().join("html");
        self.ctx.workspace.clear_for_tool(&dir).context("preparing html/ failed")?;
        let shown = merged.inputs.html(&dir).context("llvm-cov show -format=html failed");
        let device = match (&shown, &merged.device_lines) {
            (Ok(_), Some(lines)) => {
                let title = format!("ccl-coverage: {} (build {})", self.ctx.config().name, merged.manifest.build_id);
                let names = &merged.inputs.names;
                let source = |f: &str| std::fs::read_to_string(names.path_of(f)).ok();
                Some(report::device_pages::write(&self.ctx.workspace, &dir.join("device"), &title, lines, &source))
            }
            _ => None,
        };
        // llvm-cov makes its folders with modes of its own, also when it fails.
        if dir.exists() {
            (self.ctx.workspace.beneath().and_then(|b| b.set_modes(&dir)))
                .context("setting the report's modes failed")?;
        }
        let index = shown?;
        // llvm-cov's index gives its own totals: the model's replaces it.
        let m = &merged.manifest;
        let roots = [m.library_src.as_path(), m.tests_src.as_path()];
        let title = &merged.inputs.title;
        let created = crate::exec::host::now();
        // llvm-cov's page of a file is under the name llvm-cov gave it: a copy under the build
        // has a page of its own, of its own counts.
        let page = |file: &str| {
            let pages = merged.inputs.names.reported_as(file).into_iter().map(|f| format!("coverage{f}.html"));
            pages.into_iter().find(|href| dir.join(href).is_file())
        };
        let html = report::html_index::index(
            &summary.all,
            &report::html_index::Index {
                title,
                created: &created,
                shown: &|f| report::relative(f, &roots),
                page: &page,
            },
        );
        let html = match &merged.health.sources_changed {
            Some(changed) => with_warning(&html, &format!("Sources changed after the build: {changed}.")),
            None => html,
        };
        self.ctx.workspace.write(&index, html.as_bytes()).context("writing the index failed")?;
        attribution_pages::link_from_llvm_cov_index(&self.ctx.workspace, &index)
            .context("linking the attribution pages failed")?;
        let device_branches = match (&device, &merged.device_lines) {
            (Some(Ok(_)), Some(lines)) => report::device_pages::host_page_marks(&lines.all, &merged.inputs.names),
            _ => Default::default(),
        };
        attribution_pages::link_source_pages(&self.ctx.workspace, &dir, &device_branches)
            .context("linking llvm-cov's source pages to the index and the attribution pages failed")?;
        if let Some(device) = device {
            let device = device.context("writing the device pages failed")?;
            crate::reporter::emit(crate::reporter::Event::ReportPage {
                what: "device HTML report",
                path: &self.shown(&device),
            });
        }
        crate::reporter::emit(crate::reporter::Event::ReportPage { what: "HTML report", path: &self.shown(&index) });
        Ok(())
    }

    /// `summary.txt`: the model's totals per file, as `llvm-cov report` lays them out.
    pub(super) fn text(&self, merged: &Merged, summary: &ModelSummary) -> Result<()> {
        let m = &merged.manifest;
        let roots = [m.library_src.as_path(), m.tests_src.as_path()];
        let mut text = report::summary_text(&summary.all, &roots);
        if let Some(changed) = &merged.health.sources_changed {
            text = format!("warning: {changed}\n\n{text}");
        }
        self.ctx
            .workspace
            .write(&self.report_dir().join("summary.txt"), text.as_bytes())
            .context("writing summary.txt failed")
    }

    /// `report/summary.md`, also appended to `$GITHUB_STEP_SUMMARY` when set.
    pub(super) fn markdown(
        &self,
        merged: &Merged,
        summary: &ModelSummary,
        attributed: Result<&Attributed>,
    ) -> Result<()> {
        let mut md =
            report::markdown(&self.ctx.config().name, &merged.manifest, &summary.all, &merged.results, &merged.health);
        if let Some(lines) = &merged.device_lines {
            let ((lh, lf), (fh, ff)) = lines.all.totals();
            let (bh, bf) = lines.all.branch_totals();
            let branches = if lines.all.branches.is_empty() {
                String::new()
            } else {
                format!(", branches {bh}/{bf} ({:.2}%)", report::percent(bh, bf))
            };
            md.push_str(&format!(
                "\n{}: lines {lh}/{lf} ({:.2}%), kernels {fh}/{ff} ({:.2}%){branches}\n",
                lines.origin.name,
                report::percent(lh, lf),
                report::percent(fh, ff)
            ));
            if !lines.branches_unavailable.is_empty() {
                md.push_str(&format!(
                    "\nDevice branches unavailable ({}): {}\n",
                    lines.branches_unavailable.len(),
                    lines.branches_unavailable.join("; ")
                ));
            }
            if !lines.not_counted.is_empty() {
                let launches: u64 = lines.not_counted.values().sum();
                md.push_str(&format!(
                    "\nNot counted (not the library's kernels, or launches past `coverage.device.max_launches`): {} kernels, {launches} launches; `summary-device.json` names them.\n",
                    lines.not_counted.len()
                ));
            }
        }
        match attributed {
            Ok(a) => md.push_str(&attribution::markdown(&a.summaries, self.ctx.report.ci_run_url.as_deref())),
            Err(e) => md.push_str(&format!("\nPer-trial attribution is not available: {e}\n")),
        }
        let out = self.report_dir().join("summary.md");
        self.ctx.workspace.write(&out, md.as_bytes()).context("writing summary.md failed")?;
        if let Some(step_summary) = &self.ctx.report.step_summary {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(step_summary)
                .and_then(|mut f| f.write_all(md.as_bytes()))
                .with_context(|| format!("cannot append to GITHUB_STEP_SUMMARY={}", step_summary.display()))?;
        }
        Ok(())
    }

    /// `attribution.json`, `trials.json` and the pages under `attribution/`.
    pub(super) fn attribution_files(&self, merged: &Merged, a: &Attributed) -> Result<()> {
        let dir = self.report_dir();
        let mut attribution = Attribution::new(&a.universe, &a.trials);
        if let Some(device) = &merged.device_lines {
            let slugs: Vec<&str> = a.trials.iter().map(|t| t.slug.as_str()).collect();
            attribution.add_device_branches(&slugs, device);
        }
        let write = |name: &str, json: String| {
            self.ctx.workspace.write(&dir.join(name), json.as_bytes()).with_context(|| format!("writing {name} failed"))
        };
        let pages_dir = dir.join("attribution");
        self.ctx.workspace.create_dir(&pages_dir).context("creating report/attribution failed")?;
        let m = &merged.manifest;
        let roots = [m.library_src.as_path(), m.tests_src.as_path()];
        let sources = attribution_pages::Sources {
            text: &|f| std::fs::read_to_string(merged.inputs.names.path_of(f)).ok(),
            llvm_cov_page: &|f| format!("../html/coverage{}.html", merged.inputs.names.llvm_cov_name(f)),
            shown: &|f| report::relative(f, &roots),
        };
        let write_page = |name: &str, html: &[u8]| {
            self.ctx
                .workspace
                .write(&pages_dir.join(name), html)
                .with_context(|| format!("writing attribution/{name} failed"))
        };
        // One line: at ~800 trials the ranges would be mostly indentation.
        let json = || {
            write("attribution.json", serde_json::to_string(&attribution).expect("attribution serializes"))?;
            write("trials.json", serde_json::to_string_pretty(&a.summaries).expect("trials serialize"))
        };
        attribution_pages::write_while_made(
            &mut |out| attribution_pages::each_page(&attribution, &sources, out),
            &json,
            &write_page,
        )?;
        crate::note!("which trial covered which line: {}", self.shown(&pages_dir.join("index.html")).display());
        Ok(())
    }

    pub(super) fn minimal_suite(&self, merged: &Merged, a: &Attributed) -> Result<()> {
        let plan = plan::plan(self.ctx.config());
        let planned: Vec<minimal_suite::PlannedTrial> =
            plan.iter().map(|t| minimal_suite::PlannedTrial { name: &t.name, ignored: t.ignored }).collect();
        let full_s: f64 = merged.results.iter().map(|r| r.duration_s.max(0.0)).sum();
        let how = suite_invocation(&self.ctx);
        let suite = minimal_suite::minimal_suite(&a.universe, &a.trials, &planned, merged.results.len(), full_s, &how);
        self.ctx
            .workspace
            .write(
                &self.report_dir().join("minimal-suite.json"),
                serde_json::to_string_pretty(&suite).expect("minimal suite serializes").as_bytes(),
            )
            .context("writing minimal-suite.json failed")?;
        // The command (one `--skip` per trial left out) is in the file.
        crate::note!(
            "minimal equivalent suite (the same lines, functions and branches): {} of {} trials, {:.2} of {:.2} trial-seconds (its ccl-coverage run, cargo test and nextest commands are in {})",
            suite.trial_count,
            suite.full_suite_trials,
            suite.duration_s,
            suite.full_suite_duration_s,
            self.shown(&self.report_dir().join("minimal-suite.json")).display()
        );
        Ok(())
    }
}

/// How `cargo test` and `ccl-coverage run` select this suite from any
/// folder: this package's manifest, the config and the workspace
/// (absolute), and the variables that were set to choose the build or its
/// cache, paths made absolute as the harness read them.
fn suite_invocation(ctx: &crate::context::Context) -> minimal_suite::Invocation {
    let cwd = std::env::current_dir().unwrap_or_else(|_| ctx.root.clone());
    let set = |name: &str| crate::config::process_env(name).filter(|v| !v.is_empty());
    let place = Place {
        config: &ctx.loaded.path,
        workspace: ctx.workspace.root(),
        state_dir: &ctx.state_dir,
        root: &ctx.root,
        cargo: ctx.entry != crate::reporter::Entry::Cli,
    };
    invocation_of(&place, &cwd, &set)
}

/// What a minimal-suite command must name.
struct Place<'a> {
    config: &'a std::path::Path,
    workspace: &'a std::path::Path,
    /// The harness's state folder (the build cache), as this run resolved it.
    state_dir: &'a std::path::Path,
    root: &'a std::path::Path,
    /// Whether cargo ran this harness (then `CARGO_TARGET_DIR` was set for it).
    cargo: bool,
}

/// [`suite_invocation`], the environment read through `set`. `CARGO_TARGET_DIR`
/// is carried only by the cargo form, and only when cargo ran this harness;
/// set for the installed binary, it moved the build cache alone, which the
/// commands then name as `CCL_COV_CACHE_DIR`, as they do when it was set.
fn invocation_of(
    place: &Place,
    cwd: &std::path::Path,
    set: &dyn Fn(&str) -> Option<String>,
) -> minimal_suite::Invocation {
    let mut env = vec![
        ("CCL_COV_CONFIG".to_string(), place.config.display().to_string()),
        ("CCL_COV_WORKSPACE".to_string(), place.workspace.display().to_string()),
    ];
    for (name, is_path) in [
        ("CCL_COV_OVERLAY", true),
        ("CCL_COV_BUILD_DIR", true),
        ("CCL_COV_TESTS_DIR", true),
        ("CCL_COV_DEVICE_COVERAGE", false),
        ("CCL_COV_COVERAGE", false),
    ] {
        if let Some(value) = set(name) {
            let value = if is_path { cwd.join(value).display().to_string() } else { value };
            env.push((name.to_string(), value));
        }
    }
    let mut run_env = env.clone();
    let target = set("CARGO_TARGET_DIR");
    let named = set(crate::env_names::CACHE_DIR).is_some();
    let cache = (crate::env_names::CACHE_DIR.to_string(), place.state_dir.display().to_string());
    if named || target.is_some() {
        run_env.push(cache.clone());
    }
    match target {
        Some(target) if place.cargo => {
            env.push(("CARGO_TARGET_DIR".to_string(), cwd.join(target).display().to_string()));
            if named {
                env.push(cache);
            }
        }
        Some(_) => env.push(cache),
        None if named => env.push(cache),
        None => {}
    }
    minimal_suite::Invocation { manifest: place.root.join("Cargo.toml"), env, run_env }
}

/// `html` with a warning at the top of its body.
fn with_warning(html: &str, warning: &str) -> String {
    let escaped = report::escape_html(warning);
    let banner = format!("<p class='warning' style='color:#a00;font-weight:bold'>{escaped}</p>");
    match html.find("<body>").map(|at| at + "<body>".len()) {
        Some(at) => format!("{}{banner}{}", &html[..at], &html[at..]),
        None => format!("{banner}{html}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn commands(cargo: bool, vars: &[(&str, &str)]) -> (String, String) {
        let place = Place {
            config: Path::new("/p/ccl-coverage.json"),
            workspace: Path::new("/p/target/ccl-coverage/p"),
            state_dir: Path::new("/cache/ccl-coverage"),
            root: Path::new("/tool"),
            cargo,
        };
        let set = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_string());
        let how = invocation_of(&place, Path::new("/here"), &set);
        let planned = [minimal_suite::PlannedTrial { name: "a", ignored: false }];
        (
            minimal_suite::command(&["a"], &planned, &how).display(),
            minimal_suite::run_command(&["a"], &planned, &how).display(),
        )
    }

    /// Issue #49: the minimal suite's command carried `CARGO_TARGET_DIR`,
    /// which made cargo compile the harness again, and had no form for the
    /// installed binary.
    #[test]
    fn the_minimal_suite_s_commands_carry_cargo_target_dir_only_where_cargo_was_given_it() {
        let config = "CCL_COV_CONFIG=/p/ccl-coverage.json CCL_COV_WORKSPACE=/p/target/ccl-coverage/p";
        // Nothing moved: neither variable.
        let (cargo, run) = commands(false, &[]);
        assert_eq!(run, format!("{config} ccl-coverage run --exact a"));
        assert!(!cargo.contains("CARGO_TARGET_DIR") && !cargo.contains("CCL_COV_CACHE_DIR"), "{cargo}");
        // The installed binary, the cache moved by CARGO_TARGET_DIR: both name the cache, not the target.
        let (cargo, run) = commands(false, &[("CARGO_TARGET_DIR", "/t")]);
        assert_eq!(run, format!("{config} CCL_COV_CACHE_DIR=/cache/ccl-coverage ccl-coverage run --exact a"));
        assert!(
            !cargo.contains("CARGO_TARGET_DIR") && cargo.contains("CCL_COV_CACHE_DIR=/cache/ccl-coverage"),
            "{cargo}"
        );
        // cargo given CARGO_TARGET_DIR: the cargo form keeps it (the harness is compiled there).
        let (cargo, run) = commands(true, &[("CARGO_TARGET_DIR", "t")]);
        assert!(cargo.contains("CARGO_TARGET_DIR=/here/t ") && !cargo.contains("CCL_COV_CACHE_DIR"), "{cargo}");
        assert!(!run.contains("CARGO_TARGET_DIR") && run.contains("CCL_COV_CACHE_DIR=/cache/ccl-coverage"), "{run}");
        // CCL_COV_CACHE_DIR: named by both.
        let (cargo, run) = commands(true, &[("CCL_COV_CACHE_DIR", "/c")]);
        assert!(
            cargo.contains("CCL_COV_CACHE_DIR=/cache/ccl-coverage") && !cargo.contains("CARGO_TARGET_DIR"),
            "{cargo}"
        );
        assert!(run.contains("CCL_COV_CACHE_DIR=/cache/ccl-coverage"), "{run}");
    }
}
