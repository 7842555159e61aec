//! The shared build: the fixture (the toolchain and device decision resolved,
//! the build key, the cached and locked instrumented build, its manifest) and
//! RCCL's `install.sh` flags.

pub mod fixture;
pub(crate) mod rccl;
