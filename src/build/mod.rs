//! The shared build: the build cache (the toolchain and device decision,
//! the build key, the cached and locked instrumented build, its manifest) and
//! RCCL's `install.sh` flags.

pub mod cache;
pub(crate) mod rccl;
