//! Processes and the machine, below every stage: one command builder (`Cmd`),
//! secrets masked wherever a command or an environment is recorded, a trial's
//! processes found in `/proc`, the per-trial supervisor, signals in one place,
//! and the host's clock, name, GPUs and free space.

pub(crate) mod capped_log;
pub(crate) mod host;
pub(crate) mod interrupt;
pub mod process;
pub(crate) mod proctree;
pub(crate) mod redact;
pub mod supervisor;
