//! What every llvm-cov invocation of one report shares (`ReportInputs`): its
//! tools, the merged profile, and exactly the objects the build manifest lists
//! as instrumented (found by their coverage-mapping sections), host first.

use crate::bail;
use crate::build::cache::BuildManifest;
use crate::coverage::ignore::IgnoreRule;
use crate::coverage::lcov::{self, Lcov};
use crate::coverage::llvm_export::SummaryExport;
use crate::coverage::source_names::SourceNames;
use crate::error::{Context, Result};
use crate::exec::process::Cmd;
use crate::workspace;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What every llvm-cov invocation of one report shares.
#[derive(Debug, Clone)]
pub struct ReportInputs {
    pub llvm_cov: PathBuf,
    pub cxxfilt: Option<PathBuf>,
    pub profdata: PathBuf,
    /// Host objects first, then device code objects.
    pub objects: Vec<PathBuf>,
    /// The files every llvm-cov call leaves out.
    pub ignore: IgnoreRule,
    pub title: String,
    /// The report's name of each file llvm-cov names.
    pub names: std::sync::Arc<SourceNames>,
}

impl ReportInputs {
    pub fn new(
        manifest: &BuildManifest,
        profdata: PathBuf,
        ignore: IgnoreRule,
        title: String,
        names: std::sync::Arc<SourceNames>,
    ) -> Result<Self> {
        if manifest.instrumented_objects().is_empty() {
            bail!("the build manifest lists no instrumented object; nothing to report on");
        }
        let objects = manifest.coverage_objects();
        for object in &objects {
            if !object.is_file() {
                bail!("instrumented object {} is gone; rebuild with `cargo test --test collectives`", object.display());
            }
        }
        Ok(ReportInputs {
            llvm_cov: manifest.toolchain.llvm_cov.path.clone(),
            cxxfilt: manifest.toolchain.cxxfilt(),
            profdata,
            objects,
            ignore,
            title,
            names,
        })
    }

    /// The same report over only `objects` (host or device totals).
    pub fn with_objects(&self, objects: Vec<PathBuf>) -> ReportInputs {
        ReportInputs { objects, ..self.clone() }
    }

    /// The same report over another profile (one trial's).
    pub(crate) fn with_profdata(&self, profdata: PathBuf) -> ReportInputs {
        ReportInputs { profdata, ..self.clone() }
    }

    /// `llvm-cov export -format=lcov`, as text, each file named as the report names it
    /// ([`SourceNames::lcov`]), once it is checked that llvm-cov kept only files the rule keeps.
    pub(crate) fn lcov_text(&self) -> Result<String> {
        let text = self.cmd("export").arg("-format=lcov").read()?;
        self.ignore.check_kept(text.lines().filter_map(|l| l.strip_prefix("SF:")))?;
        self.names.lcov(&text, "llvm-cov export -format=lcov")
    }

    /// `llvm-cov export -summary-only`, as text.
    fn summary_text(&self) -> Result<String> {
        self.cmd("export").arg("-summary-only").read()
    }

    /// `llvm-cov export -summary-only`, as types: llvm-cov's own totals.
    pub(crate) fn summary(&self) -> Result<SummaryExport> {
        SummaryExport::parse(&self.summary_text()?)
    }

    /// The model's summary of `model` (these objects' lcov), in the shape
    /// of `llvm-cov export -summary-only`, whose regions it keeps: as JSON
    /// text and as types.
    pub(crate) fn model_summary(&self, model: &Lcov) -> Result<(String, SummaryExport)> {
        let mut export: Value =
            serde_json::from_str(&self.summary_text()?).context("unexpected llvm-cov export -summary-only")?;
        crate::coverage::exports::apply(&mut export, model, &self.names, "llvm-cov export -summary-only")?;
        let text = serde_json::to_string(&export).expect("a JSON value serializes");
        let summary = SummaryExport::parse(&text)?;
        Ok((text, summary))
    }

    /// `llvm-cov <subcommand> -instr-profile=P <obj0> -object <obj1> ... [-ignore-filename-regex=R]`.
    fn cmd(&self, subcommand: &str) -> Cmd {
        let mut cmd =
            Cmd::new(&self.llvm_cov).arg(subcommand).arg(format!("-instr-profile={}", self.profdata.display()));
        for (i, object) in self.objects.iter().enumerate() {
            if i > 0 {
                cmd = cmd.arg("-object");
            }
            cmd = cmd.arg(object);
        }
        if let Some(arg) = self.ignore.llvm_cov_arg() {
            cmd = cmd.arg(arg);
        }
        cmd
    }

    /// The model's summary over these objects (their lcov export, and the
    /// summary export's regions), written to `out` and read as types.
    pub fn summary_json(&self, ws: &workspace::Workspace, out: &Path) -> Result<SummaryExport> {
        let model = lcov::parse_lcov(&self.lcov_text()?, "llvm-cov export -format=lcov")?;
        let (text, summary) = self.model_summary(&model)?;
        ws.write(out, text.as_bytes())?;
        Ok(summary)
    }

    /// The full llvm JSON export (per-file segments, branches, functions),
    /// its summaries the model's, as text (absolute paths).
    pub(crate) fn json(&self, model: &Lcov) -> Result<String> {
        let text = self.cmd("export").arg("-format=text").read()?;
        let mut export: Value = serde_json::from_str(&text).context("unexpected llvm-cov export -format=text")?;
        crate::coverage::exports::apply(&mut export, model, &self.names, "llvm-cov export -format=text")?;
        Ok(serde_json::to_string(&export).expect("a JSON value serializes"))
    }

    pub(crate) fn html(&self, out_dir: &Path) -> Result<PathBuf> {
        let mut cmd = self
            .cmd("show")
            .arg("-format=html")
            .arg(format!("-output-dir={}", out_dir.display()))
            .arg(format!("-project-title={}", self.title))
            .arg("-show-line-counts-or-regions")
            .arg("-show-branches=count");
        if let Some(filt) = &self.cxxfilt {
            cmd = cmd.arg(format!("-Xdemangler={}", filt.display()));
        }
        cmd.read()?;
        let index = out_dir.join("index.html");
        if !index.is_file() {
            bail!("llvm-cov show finished but wrote no {}", index.display());
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_after_the_first_use_dash_object() {
        let inputs = ReportInputs {
            llvm_cov: "/llvm/bin/llvm-cov".into(),
            cxxfilt: None,
            profdata: "/ws/report/coverage.profdata".into(),
            objects: vec!["/b/libccl.so".into(), "/b/libccl-tuner.so".into()],
            ignore: IgnoreRule::new(&["^/usr/".into(), "tmpxft_".into()]).unwrap(),
            title: "t".into(),
            names: Default::default(),
        };
        assert_eq!(
            inputs.cmd("export").argv(),
            [
                "/llvm/bin/llvm-cov",
                "export",
                "-instr-profile=/ws/report/coverage.profdata",
                "/b/libccl.so",
                "-object",
                "/b/libccl-tuner.so",
                "-ignore-filename-regex=^/usr/|tmpxft_"
            ]
        );
    }
}
