//! Coverage data: raw profiles and their per-trial merge, and llvm-cov's
//! summary export as types.

pub mod lcov;
pub mod llvm_export;
pub mod profiles;
pub(crate) mod sass;
