//! Perplexity: exp of the mean negative log-likelihood of each token given the ones before it, over a text
//! longer than the context evaluated in overlapping windows (every token after the first scored exactly
//! once, each with up to `ctx - stride` tokens of history beyond its own window's start).

use serde::{Deserialize, Serialize};

use crate::model::Model;
use crate::EvalError;

/// Negative log-likelihood (nats) of `target` under the softmax of one row of logits, in f64.
pub fn token_nll(logits: &[f32], target: usize) -> f64 {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let lse = logits.iter().map(|&z| (z as f64 - m).exp()).sum::<f64>().ln() + m;
    lse - logits[target] as f64
}

/// One window of a strided evaluation: tokens `begin..end` go through the model, and the targets at
/// positions `score_from..end` (predicted from the logits one position earlier) are scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First token fed.
    pub begin: usize,
    /// One past the last token fed.
    pub end: usize,
    /// First target position scored (> `begin`).
    pub score_from: usize,
}

/// The windows covering `n` tokens with context `ctx` and step `stride` (`0 < stride <= ctx`; a step of
/// `ctx` becomes `ctx - 1`, since a window needs the token before its first target): targets `1..n` are each
/// scored once.
pub fn windows(n: usize, ctx: usize, stride: usize) -> Result<Vec<Window>, EvalError> {
    if ctx < 2 {
        return Err(EvalError::invalid("ctx", ctx, "at least 2 tokens"));
    }
    if stride == 0 || stride > ctx {
        return Err(EvalError::invalid("stride", stride, format!("1..={ctx} (the context)")));
    }
    if n < 2 {
        return Err(EvalError::invalid("text length", format!("{n} tokens"), "at least 2 tokens"));
    }
    let mut out = Vec::new();
    let mut prev_end = 1;
    let mut begin = 0;
    loop {
        let end = (begin + ctx).min(n);
        out.push(Window { begin, end, score_from: prev_end.max(begin + 1) });
        prev_end = end;
        if end == n {
            break;
        }
        // The next window must hold the token before its first target.
        begin = (begin + stride).min(end - 1);
    }
    Ok(out)
}

/// Result of one perplexity run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Perplexity {
    /// Sum of the negative log-likelihoods, nats.
    pub nll_sum: f64,
    /// Tokens scored.
    pub tokens_scored: usize,
    /// Mean NLL, nats per token.
    pub mean_nll: f64,
    /// `exp(mean_nll)`.
    pub ppl: f64,
}

impl Perplexity {
    /// From a sum and a count.
    pub fn from_sum(nll_sum: f64, tokens_scored: usize) -> Self {
        let mean_nll = nll_sum / tokens_scored.max(1) as f64;
        Perplexity { nll_sum, tokens_scored, mean_nll, ppl: mean_nll.exp() }
    }
}

/// Perplexity of `model` on `tokens`, windows of `ctx` tokens every `stride`.
pub fn perplexity(model: &Model, tokens: &[u32], ctx: usize, stride: usize) -> Result<Perplexity, EvalError> {
    let vocab = model.config().vocab;
    let mut sum = 0.0;
    let mut count = 0;
    for w in windows(tokens.len(), ctx, stride)? {
        let logits = model.forward(&tokens[w.begin..w.end], None)?;
        for (pos, &target) in tokens.iter().enumerate().take(w.end).skip(w.score_from) {
            let row = pos - 1 - w.begin;
            sum += token_nll(&logits[row * vocab..(row + 1) * vocab], target as usize);
            count += 1;
        }
    }
    Ok(Perplexity::from_sum(sum, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_logits_give_the_vocabulary_size() {
        let logits = vec![0.7f32; 50];
        let nll = token_nll(&logits, 3);
        assert!((nll - 50f64.ln()).abs() < 1e-12);
        assert!((Perplexity::from_sum(nll * 4.0, 4).ppl - 50.0).abs() < 1e-9);
    }

    #[test]
    fn hand_checked_two_tokens() {
        // logits ln 1, ln 3: p = 1/4, 3/4. Targets 1 then 0: NLL = ln(4/3) + ln 4; ppl = sqrt(16/3).
        let row = [0.0f32, 3f32.ln()];
        let a = token_nll(&row, 1);
        let b = token_nll(&row, 0);
        assert!((a - (4.0f64 / 3.0).ln()).abs() < 1e-7);
        assert!((b - 4f64.ln()).abs() < 1e-7);
        let p = Perplexity::from_sum(a + b, 2);
        assert!((p.ppl - (16.0f64 / 3.0).sqrt()).abs() < 1e-6, "{}", p.ppl);
    }

    #[test]
    fn large_logits_do_not_overflow() {
        let nll = token_nll(&[1000.0, 1000.0], 0);
        assert!((nll - 2f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn windows_score_every_target_once() {
        for (n, ctx, stride) in [(10, 4, 2), (10, 4, 4), (3, 8, 4), (1000, 128, 64), (129, 128, 100)] {
            let ws = windows(n, ctx, stride).unwrap();
            let mut seen = vec![0; n];
            for w in &ws {
                assert!(w.end - w.begin <= ctx && w.score_from > w.begin);
                for (p, s) in seen.iter_mut().enumerate().take(w.end).skip(w.score_from) {
                    let _ = p;
                    *s += 1;
                }
            }
            assert_eq!(seen[0], 0);
            assert!(seen[1..].iter().all(|&s| s == 1), "n={n} ctx={ctx} stride={stride}: {seen:?}");
        }
        assert_eq!(
            windows(10, 4, 2).unwrap()[1],
            Window { begin: 2, end: 6, score_from: 4 },
            "second window re-reads two tokens of history"
        );
        assert!(windows(10, 4, 5).is_err());
        assert!(windows(1, 4, 2).is_err());
    }
}
