//! Coverage data: raw profiles and their per-trial merge.

pub mod profiles;
