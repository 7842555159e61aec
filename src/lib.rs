pub mod config;
pub mod error;
pub mod expand;
pub mod template;
