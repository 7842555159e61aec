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
use crate::exec::process::{Cmd, Limits};
use crate::workspace;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// A warning llvm-cov wrote while it made the report, with what it means:
/// llvm-cov succeeds and leaves out what it warns about, so the totals
/// would move and nobody would say why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LlvmCovWarning {
    /// As llvm-cov wrote it, without `warning: `.
    pub(crate) warning: String,
    /// How many functions it concerns, when it says.
    pub(crate) functions: Option<u64>,
    pub(crate) explanation: String,
}

impl LlvmCovWarning {
    pub(crate) fn of(line: &str) -> LlvmCovWarning {
        let warning = line.trim().trim_start_matches("warning:").trim().to_string();
        let mismatched = warning
            .strip_suffix(" functions have mismatched data")
            .or_else(|| warning.strip_suffix(" function has mismatched data"))
            .and_then(|n| n.trim().parse::<u64>().ok());
        let explanation = match mismatched {
            Some(n) => format!(
                "{n} functions of the instrumented objects have no matching profile data: the profile holds a \
                 function of the same name compiled otherwise (inline code of a header compiled into two \
                 instrumented objects, such as the library and an instrumented test program, with a different \
                 body or different flags; or a profile from another build). llvm-cov leaves these functions out of \
                 every total; see docs/reports.md#llvm-cov-warnings"
            ),
            None => "llvm-cov said so while making the report; its totals may leave out what it names \
                     (see docs/reports.md#llvm-cov-warnings)"
                .to_string(),
        };
        LlvmCovWarning { warning, functions: mismatched, explanation }
    }

    /// The warning and what it means, for a person.
    pub(crate) fn text(&self) -> String {
        format!("llvm-cov warns: {}: {}", self.warning, self.explanation)
    }
}

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
    /// Every warning llvm-cov wrote on these inputs, once each.
    warnings: Arc<Mutex<BTreeSet<String>>>,
    /// `llvm-cov export -summary-only`'s text, made once: the merge reads
    /// its warnings before the model's summary uses it.
    summary: Arc<OnceLock<String>>,
    /// The report's name of each file llvm-cov names.
    pub names: Arc<SourceNames>,
}

impl ReportInputs {
    /// `entry`: the command the person ran, which a hint names.
    /// `objects`: what the report measures ([`BuildManifest::measured`]).
    pub fn new(
        manifest: &BuildManifest,
        objects: Vec<PathBuf>,
        profdata: PathBuf,
        ignore: IgnoreRule,
        title: String,
        entry: crate::reporter::Entry,
        names: Arc<SourceNames>,
    ) -> Result<Self> {
        if manifest.instrumented_objects().is_empty() {
            bail!("the build manifest lists no instrumented object; nothing to report on");
        }
        for object in &objects {
            if !object.is_file() {
                bail!("instrumented object {} is gone; rebuild with `{}`", object.display(), entry.trials());
            }
        }
        let (llvm_cov, cxxfilt) = (manifest.toolchain.llvm_cov.path.clone(), manifest.toolchain.cxxfilt());
        Ok(ReportInputs { names, ..ReportInputs::of(llvm_cov, cxxfilt, profdata, objects, ignore, title) })
    }

    /// From its parts, without a build manifest (tests of one llvm-cov).
    pub fn of(
        llvm_cov: PathBuf,
        cxxfilt: Option<PathBuf>,
        profdata: PathBuf,
        objects: Vec<PathBuf>,
        ignore: IgnoreRule,
        title: String,
    ) -> ReportInputs {
        ReportInputs {
            llvm_cov,
            cxxfilt,
            profdata,
            objects,
            ignore,
            title,
            warnings: Arc::default(),
            summary: Arc::default(),
            names: Arc::default(),
        }
    }

    /// The same report over only `objects` (host or device totals): its
    /// warnings are the report's, its summary its own.
    pub fn with_objects(&self, objects: Vec<PathBuf>) -> ReportInputs {
        ReportInputs { objects, summary: Arc::default(), ..self.clone() }
    }

    /// The same report over another profile (one trial's): its warnings are
    /// that profile's, not the merged report's.
    pub(crate) fn with_profdata(&self, profdata: PathBuf) -> ReportInputs {
        ReportInputs { profdata, summary: Arc::default(), warnings: Arc::default(), ..self.clone() }
    }

    /// Runs `cmd` (llvm-cov), keeping every warning it writes on stderr.
    fn run(&self, cmd: Cmd) -> Result<String> {
        let (stdout, stderr) = cmd.read_both()?;
        let warnings = stderr.lines().filter(|l| l.trim_start().starts_with("warning:")).map(str::trim);
        self.warnings.lock().unwrap_or_else(PoisonError::into_inner).extend(warnings.map(String::from));
        Ok(stdout)
    }

    /// The warnings llvm-cov wrote on these inputs so far, explained.
    pub(crate) fn warnings(&self) -> Vec<LlvmCovWarning> {
        self.warnings.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|w| LlvmCovWarning::of(w)).collect()
    }

    /// `llvm-cov export -format=lcov`, as text, each file named as the report names it
    /// ([`SourceNames::lcov`]), once it is checked that llvm-cov kept only files the rule keeps.
    pub(crate) fn lcov_text(&self) -> Result<String> {
        let text = self.run(self.cmd("export").arg("-format=lcov"))?;
        lcov::check_file_names(&text, &self.summary()?.file_names())?;
        self.ignore.check_kept(text.lines().filter_map(|l| l.strip_prefix("SF:")))?;
        self.names.lcov(&text, "llvm-cov export -format=lcov")
    }

    /// `llvm-cov export -summary-only`, as text, run once.
    pub(crate) fn summary_text(&self) -> Result<String> {
        if let Some(text) = self.summary.get() {
            return Ok(text.clone());
        }
        let text = self.run(self.cmd("export").arg("-summary-only"))?;
        Ok(self.summary.get_or_init(|| text).clone())
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
        crate::coverage::model_totals::apply(&mut export, model, &self.names, "llvm-cov export -summary-only")?;
        let text = serde_json::to_string(&export).expect("a JSON value serializes");
        let summary = SummaryExport::parse(&text)?;
        Ok((text, summary))
    }

    /// `llvm-cov <subcommand> -instr-profile=P <obj0> -object <obj1> ... [-ignore-filename-regex=R]`.
    fn cmd(&self, subcommand: &str) -> Cmd {
        let mut cmd = Cmd::new(&self.llvm_cov)
            .limits(Limits::LLVM_TOOL)
            .arg(subcommand)
            .arg(format!("-instr-profile={}", self.profdata.display()));
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
        let text = self.run(self.cmd("export").arg("-format=text"))?;
        let mut export: Value = serde_json::from_str(&text).context("unexpected llvm-cov export -format=text")?;
        crate::coverage::model_totals::apply(&mut export, model, &self.names, "llvm-cov export -format=text")?;
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
        self.run(cmd)?;
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
    fn warnings_are_explained_and_counted() {
        let w = LlvmCovWarning::of("warning: 10 functions have mismatched data");
        assert_eq!((w.warning.as_str(), w.functions), ("10 functions have mismatched data", Some(10)));
        assert!(w.text().starts_with("llvm-cov warns: 10 functions have mismatched data: 10 functions of the instrumented objects have no matching profile data"), "{}", w.text());
        let other = LlvmCovWarning::of("warning: /src/gone.cc: No such file or directory");
        assert_eq!((other.warning.as_str(), other.functions), ("/src/gone.cc: No such file or directory", None));
    }

    #[test]
    fn objects_after_the_first_use_dash_object() {
        let inputs = ReportInputs {
            llvm_cov: "/llvm/bin/llvm-cov".into(),
            cxxfilt: None,
            profdata: "/ws/report/coverage.profdata".into(),
            objects: vec!["/b/libccl.so".into(), "/b/libccl-tuner.so".into()],
            ignore: IgnoreRule::new(&["^/usr/".into(), "tmpxft_".into()]).unwrap(),
            title: "t".into(),
            warnings: Arc::default(),
            summary: Arc::default(),
            names: Arc::default(),
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
