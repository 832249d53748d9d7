//! Operations and their exact FLOP and byte counts.

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::scheme::Scheme;

/// FLOPs and bytes of one op: all the roofline needs besides the hardware and the compute rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCost {
    /// Floating-point (or integer) operations; a multiply-add counts 2.
    pub flops: u64,
    /// Bytes moved through device memory at minimum: each input read once, each output written once.
    pub bytes: u64,
    /// Of `bytes`, those written (outputs); the rest are read. A profile with a read-stream bandwidth
    /// prices the two directions apart (`HardwareProfile::stream_time_us`).
    #[serde(default)]
    pub written: u64,
}

/// A (batched) matrix product `y[b] = x[b] · W[b]^T` with `x: M x K`, `W: N x K`, `y: M x N`.
///
/// M = 1 is a GEMV (a decode step). With `weights_shared`, one `W` serves the whole batch (read once), as
/// for a linear layer applied to `batch` independent inputs; otherwise each batch entry has its own
/// right-hand operand (attention's `Q·K^T`, MoE experts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gemm {
    /// Rows of the activations and output (tokens).
    pub m: u64,
    /// Output features (rows of `W`).
    pub n: u64,
    /// Reduction dimension (input features).
    pub k: u64,
    /// Number of independent products (1 for a plain GEMM).
    pub batch: u64,
    /// Whether one `W` serves every batch entry.
    pub weights_shared: bool,
    /// Operand formats.
    pub scheme: Scheme,
}

impl Gemm {
    /// A single GEMM `M x N x K`; every size must be at least 1.
    pub fn new(m: u64, n: u64, k: u64, scheme: Scheme) -> Result<Self, CoreError> {
        Self::batched(1, m, n, k, true, scheme)
    }

    /// A batched GEMM; every size must be at least 1.
    pub fn batched(
        batch: u64,
        m: u64,
        n: u64,
        k: u64,
        weights_shared: bool,
        scheme: Scheme,
    ) -> Result<Self, CoreError> {
        for (field, v) in [("m", m), ("n", n), ("k", k), ("batch", batch)] {
            if v == 0 {
                return Err(CoreError::invalid(field, v, "an integer >= 1"));
            }
        }
        let gemm = Gemm { m, n, k, batch, weights_shared, scheme };
        gemm.cost()?; // reject shapes whose counts overflow up front
        Ok(gemm)
    }

    /// `2 · batch · M · N · K`.
    pub fn flops(&self) -> Result<u64, CoreError> {
        [self.m, self.n, self.k, self.batch]
            .into_iter()
            .try_fold(2u64, |acc, v| acc.checked_mul(v))
            .ok_or(CoreError::Overflow { what: "FLOP count" })
    }

    /// Exact bytes: activations, weights (once if shared) and output, each at its format's storage size.
    pub fn bytes(&self) -> Result<u64, CoreError> {
        const OVERFLOW: CoreError = CoreError::Overflow { what: "byte count" };
        let s = self.scheme;
        let x = s.activations.storage_bytes(self.m, self.k)?;
        let w = s.weights.storage_bytes(self.n, self.k)?;
        let y = s.output.storage_bytes(self.m, self.n)?;
        let w_reads = if self.weights_shared { 1 } else { self.batch };
        let per_batch = x.checked_add(y).ok_or(OVERFLOW)?;
        per_batch
            .checked_mul(self.batch)
            .and_then(|b| w.checked_mul(w_reads).and_then(|wb| b.checked_add(wb)))
            .ok_or(OVERFLOW)
    }

    /// Bytes written: the output, once per batch entry.
    pub fn written(&self) -> Result<u64, CoreError> {
        let y = self.scheme.output.storage_bytes(self.m, self.n)?;
        y.checked_mul(self.batch).ok_or(CoreError::Overflow { what: "byte count" })
    }

    /// FLOPs and bytes together.
    pub fn cost(&self) -> Result<OpCost, CoreError> {
        Ok(OpCost { flops: self.flops()?, bytes: self.bytes()?, written: self.written()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;

    #[test]
    fn gemv_fp16_counts() {
        let g = Gemm::new(1, 4096, 4096, Scheme::uniform(Format::FP16)).unwrap();
        assert_eq!(g.flops().unwrap(), 2 * 4096 * 4096);
        assert_eq!(g.bytes().unwrap(), 4096 * 4096 * 2 + 4096 * 2 + 4096 * 2);
        assert_eq!(g.cost().unwrap().written, 4096 * 2);
    }

    #[test]
    fn batched_counts_weights_once_when_shared() {
        let s = Scheme::uniform(Format::FP16);
        let shared = Gemm::batched(4, 2, 8, 16, true, s).unwrap();
        let own = Gemm::batched(4, 2, 8, 16, false, s).unwrap();
        assert_eq!(shared.bytes().unwrap(), 4 * (2 * 16 * 2 + 2 * 8 * 2) + 8 * 16 * 2);
        assert_eq!(own.bytes().unwrap(), 4 * (2 * 16 * 2 + 2 * 8 * 2 + 8 * 16 * 2));
        assert_eq!(own.flops().unwrap(), 2 * 4 * 2 * 8 * 16);
        assert_eq!(shared.written().unwrap(), 4 * 2 * 8 * 2);
    }

    #[test]
    fn zero_and_overflow_rejected() {
        let s = Scheme::uniform(Format::FP16);
        let err = Gemm::new(0, 1, 1, s).unwrap_err().to_string();
        assert!(err.contains("m = 0"), "{err}");
        assert!(matches!(Gemm::new(u64::MAX / 2, 4, 4, s), Err(CoreError::Overflow { .. })));
        assert!(Gemm::new(1 << 22, 1 << 22, 1 << 22, s).is_err());
    }
}
