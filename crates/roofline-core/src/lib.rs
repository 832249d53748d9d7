//! # roofline-core
//!
//! Pure roofline math shared by every front end of `roofline`:
//!
//! * [`format`]: the catalog of number formats (element bits, block scales, exact storage bytes);
//! * [`hardware`]: hardware profiles (embedded datasheet presets, user TOML files, custom ASICs);
//!
//! Architecture invariant: this crate does no I/O (beyond parsing strings handed to it), knows nothing of
//! CUDA, HTTP or the terminal, and never panics on user input.

pub mod error;
pub mod format;
pub mod hardware;

pub use error::CoreError;
pub use format::{Format, FormatSpec};
pub use hardware::{ComputeClass, HardwareProfile};
