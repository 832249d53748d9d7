//! Fake quantization: every linear weight of the decoder layers goes through a roofline-quant codec and back
//! to f32, so the forward pass sees exactly the values a kernel would dequantize. Embeddings, the LM head and
//! the norms stay as loaded (the usual weight-only recipe); activations stay f32.

use std::collections::BTreeMap;

use roofline_quant::{dequantize, quantize, Codec};

use crate::model::{Linear, LlamaWeights, Proj};
use crate::EvalError;

/// Per-input-channel scales kept explicit (not folded into a previous op): the layer computes
/// `Q(W diag(s)) (x / s)`, which fake quantization realises as `dequant(Q(W diag(s))) diag(1/s)`.
pub type ExplicitScales = BTreeMap<(usize, Proj), Vec<f32>>;

/// `dequant(quant(W diag(s))) diag(1/s)` (`s = None`: plain round trip).
pub fn fake_quant_linear(l: &Linear, codec: Codec, s: Option<&[f32]>) -> Result<Vec<f32>, EvalError> {
    if let Some(s) = s {
        if s.len() != l.cols {
            return Err(EvalError::invalid("input scales", s.len(), format!("{} (the input features)", l.cols)));
        }
        let mut scaled = l.clone();
        scaled.scale_cols(s);
        let mut w = dequantize(&quantize(codec, &scaled.w, l.rows, l.cols)?);
        let inv: Vec<f32> = s.iter().map(|v| 1.0 / v).collect();
        for row in w.chunks_mut(l.cols) {
            for (v, f) in row.iter_mut().zip(&inv) {
                *v *= f;
            }
        }
        Ok(w)
    } else {
        Ok(dequantize(&quantize(codec, &l.w, l.rows, l.cols)?))
    }
}

/// Replaces every decoder linear weight of `w` by its fake-quantized value under `codec`, with the explicit
/// input scales of `explicit` where given.
pub fn fake_quantize(w: &mut LlamaWeights, codec: Codec, explicit: &ExplicitScales) -> Result<(), EvalError> {
    for (li, layer) in w.layers.iter_mut().enumerate() {
        for p in Proj::ALL {
            let lin = layer.proj_mut(p);
            let s = explicit.get(&(li, p)).map(Vec::as_slice);
            lin.w = fake_quant_linear(lin, codec, s)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_scales_of_one_are_plain_rtn() {
        let w: Vec<f32> = (0..4 * 256).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
        let l = Linear::new(w, 4, 256).unwrap();
        let codec = Codec::parse("INT4_G128").unwrap();
        let a = fake_quant_linear(&l, codec, None).unwrap();
        let b = fake_quant_linear(&l, codec, Some(&[1.0; 256])).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, l.w, "INT4 changes the weights");
        assert!(fake_quant_linear(&l, codec, Some(&[1.0; 3])).is_err());
    }
}
