//! Which MPI a launcher drives: a launcher whose config says `"flavor":
//! "auto"` is resolved, for `mpirun`, from what its program answers to
//! `--version` (Open MPI: `mpirun (Open MPI) 4.1.4`; MPICH's Hydra: `HYDRA
//! build details:`), once per program and run. The flavour decides how the
//! environment is forwarded (`-x NAME` or `-genv NAME VALUE`), whether root
//! needs `--allow-run-as-root` (Open MPI only) and srun's `--mpi=`.

use crate::bail;
use crate::config::{LauncherConfig, LauncherKind, MpiFlavor};
use crate::error::Result;
use crate::exec::process::Cmd;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// The program a launcher runs: its `program`, else `mpirun`/`srun`.
pub(crate) fn program(launcher: &LauncherConfig) -> &str {
    match (&launcher.program, launcher.kind) {
        (Some(p), _) => p,
        (None, LauncherKind::Srun) => "srun",
        (None, LauncherKind::Mpirun | LauncherKind::Direct) => "mpirun",
    }
}

/// `launcher` with an `auto` flavour of `mpirun` replaced by the detected
/// one; any other launcher as it is (srun's `auto` leaves `--mpi=` to the
/// cluster).
pub(crate) fn resolve(launcher: &LauncherConfig) -> Result<Cow<'_, LauncherConfig>> {
    if launcher.kind != LauncherKind::Mpirun || launcher.flavor != MpiFlavor::Auto {
        return Ok(Cow::Borrowed(launcher));
    }
    let flavor = detect(program(launcher))?;
    Ok(Cow::Owned(LauncherConfig { flavor, ..launcher.clone() }))
}

/// `program --version`, read once per program.
fn detect(program: &str) -> Result<MpiFlavor> {
    static SEEN: Mutex<Option<HashMap<String, MpiFlavor>>> = Mutex::new(None);
    if let Some(flavor) = SEEN.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert_default().get(program) {
        return Ok(*flavor);
    }
    let cmd = Cmd::new(program).arg("--version");
    let text = cmd.read_all()?;
    let Some(flavor) = flavor_of(&text) else {
        bail!(
            "`{}` names neither Open MPI nor MPICH (Hydra), so the launcher's \"flavor\": \"auto\" cannot be \
             resolved; set \"flavor\" to \"openmpi\" or \"mpich\". It printed:\n{}",
            cmd.display(),
            crate::exec::process::indent_tail(&text, crate::exec::process::TAIL_LINES)
        );
    };
    SEEN.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert_default().insert(program.to_string(), flavor);
    Ok(flavor)
}

/// The flavour a `--version` text names.
fn flavor_of(version: &str) -> Option<MpiFlavor> {
    if version.contains("Open MPI") || version.contains("OpenRTE") {
        Some(MpiFlavor::Openmpi)
    } else if ["HYDRA", "MPICH", "Intel(R) MPI"].iter().any(|name| version.contains(name)) {
        Some(MpiFlavor::Mpich)
    } else {
        None
    }
}

/// srun's `--mpi=` plugin for programs built against `flavor`: Open MPI
/// needs PMIx, MPICH PMI2 (without it every rank runs alone as rank 0).
pub(crate) fn srun_plugin(flavor: MpiFlavor) -> Option<&'static str> {
    match flavor {
        MpiFlavor::Openmpi => Some("pmix"),
        MpiFlavor::Mpich => Some("pmi2"),
        MpiFlavor::Auto => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_texts_name_the_flavor() {
        assert_eq!(flavor_of("mpirun (Open MPI) 4.1.4\n\nReport bugs to"), Some(MpiFlavor::Openmpi));
        assert_eq!(flavor_of("HYDRA build details:\n    Version: 4.0.2"), Some(MpiFlavor::Mpich));
        assert_eq!(flavor_of("Intel(R) MPI Library for Linux* OS, Version 2021.9"), Some(MpiFlavor::Mpich));
        assert_eq!(flavor_of("slurm 22.05.8"), None);
    }

    #[test]
    fn auto_is_resolved_from_the_program_and_explicit_flavors_are_kept() {
        let auto = LauncherConfig {
            kind: LauncherKind::Mpirun,
            program: Some("/nonexistent/mpirun".into()),
            flavor: MpiFlavor::Auto,
            args: Vec::new(),
            program_args: Vec::new(),
            nodes: 1,
            gpus_per_task: 0,
        };
        let err = resolve(&auto).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/mpirun --version"), "{err}");
        let explicit = LauncherConfig { flavor: MpiFlavor::Mpich, ..auto.clone() };
        assert_eq!(resolve(&explicit).unwrap().flavor, MpiFlavor::Mpich);
        let srun = LauncherConfig { kind: LauncherKind::Srun, ..auto };
        assert_eq!(resolve(&srun).unwrap().flavor, MpiFlavor::Auto);
    }
}
