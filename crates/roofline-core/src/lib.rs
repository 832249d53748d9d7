//! # roofline-core
//!
//! Pure roofline math shared by every front end of `roofline`:
//!
//! * [`mod@format`]: the catalog of number formats (element bits, block scales, exact storage bytes);
//! * [`hardware`]: hardware profiles (embedded datasheet presets, user TOML files, custom ASICs);
//! * [`scheme`]: which format each operand of an op uses, and which compute rate applies;
//! * [`op`]: the operations we count (GEMM, GEMV, batched GEMM) and their exact FLOP and byte counts;
//! * [`mod@predict`]: roofline predictions of an op on a hardware profile;
//! * [`recommend`]: the auto-quantizer (rank schemes under memory/accuracy constraints, with a reason);
//! * [`tiling`]: tile, wave, occupancy and L2 model of a GEMM kernel (an efficiency factor on the roofline);
//! * [`dual`]: measurements and the prediction/measurement pairs (`DualPoint`) built from them.
//!
//! Architecture invariant: this crate does no I/O (beyond parsing strings handed to it), knows nothing of
//! CUDA, HTTP or the terminal, and never panics on user input.

pub mod dual;
pub mod error;
pub mod format;
pub mod hardware;
pub mod model;
pub mod op;
pub mod predict;
pub mod recommend;
pub mod scheme;
pub mod tiling;

pub use dual::{DualPoint, Measurement, PowerStats};
pub use error::CoreError;
pub use format::{Format, FormatSpec};
pub use hardware::{ComputeClass, HardwareProfile};
pub use op::{Gemm, OpCost};
pub use predict::{
    predict, predict_cost, predict_report, Bound, PredictReport, PredictRequest, PredictRow, Prediction,
};
pub use scheme::{ExecMode, Execution, Scheme};
