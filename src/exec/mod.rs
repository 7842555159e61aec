//! Processes and the machine, below every stage: one command builder (`Cmd`),
//! secrets masked wherever a command or an environment is recorded, a trial's
//! processes found in `/proc` and its cgroup, which runs are alive (by lock,
//! not pid), the per-trial supervisor, signals in one place, and the host's
//! clock, name, GPUs and free space.

pub(crate) mod capped_log;
pub(crate) mod cgroup;
pub(crate) mod host;
pub(crate) mod interrupt;
pub(crate) mod owner;
pub mod process;
pub(crate) mod proctree;
pub(crate) mod redact;
pub mod supervisor;
