//! Processes and the machine, below every stage: one command builder (`Cmd`),
//! secrets masked wherever a command or an environment is recorded, a trial's
//! processes found in `/proc`, the per-trial supervisor, signals in one place,
//! and the host's clock, name, GPUs and free space.

pub mod host;
pub mod interrupt;
pub mod process;
pub mod proctree;
pub mod redact;
pub mod supervisor;
