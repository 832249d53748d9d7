//! Hugging Face `config.json` -> the shapes a decoder-only transformer needs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::CoreError;

/// Attention flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Attention {
    /// Multi-head / grouped-query attention with a K and V cache per KV head.
    Gqa,
    /// DeepSeek multi-head latent attention: a compressed latent KV cache.
    Mla(Mla),
}

/// DeepSeek MLA dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mla {
    /// Rank of the query compression (`None`: plain q projection, as in DeepSeek-V2-Lite).
    pub q_lora_rank: Option<u64>,
    /// Rank of the KV latent (cached).
    pub kv_lora_rank: u64,
    /// Per-head query/key dimension without RoPE.
    pub qk_nope_head_dim: u64,
    /// Per-head RoPE dimension (the decoupled key part is cached, shared by all heads).
    pub qk_rope_head_dim: u64,
    /// Per-head value dimension.
    pub v_head_dim: u64,
}

/// Mixture-of-experts FFN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moe {
    /// Routed experts.
    pub experts: u64,
    /// Experts each token is routed to.
    pub top_k: u64,
    /// Intermediate size of one routed expert.
    pub expert_intermediate: u64,
    /// Shared (always active) experts.
    pub shared_experts: u64,
    /// Intermediate size of one shared expert.
    pub shared_intermediate: u64,
    /// The first this-many layers use a dense FFN instead (DeepSeek `first_k_dense_replace`).
    pub first_dense_layers: u64,
}

/// FFN shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mlp {
    /// SwiGLU: gate and up projections, SiLU(gate) * up, down projection.
    Gated,
    /// Two projections with GELU between (GPT-2, OPT).
    Plain,
}

/// The shapes of a decoder-only model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Display name (`_name` in presets, else the model type).
    pub name: String,
    /// `model_type` as in config.json.
    pub model_type: String,
    /// Hidden size.
    pub hidden: u64,
    /// Decoder layers.
    pub layers: u64,
    /// Query heads.
    pub heads: u64,
    /// Key/value heads (GQA); equals `heads` for MHA.
    pub kv_heads: u64,
    /// Per-head dimension.
    pub head_dim: u64,
    /// Dense FFN intermediate size.
    pub intermediate: u64,
    /// Vocabulary size.
    pub vocab: u64,
    /// Whether the LM head shares the embedding matrix.
    pub tie_embeddings: bool,
    /// Learned absolute position embeddings (GPT-2) of this many positions, if any.
    pub learned_positions: Option<u64>,
    /// FFN kind.
    pub mlp: Mlp,
    /// LayerNorm (with bias) instead of RMSNorm.
    pub layer_norm: bool,
    /// Attention kind.
    pub attention: Attention,
    /// Mixture of experts, if any.
    pub moe: Option<Moe>,
}

static PRESET_DOCS: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/model_presets.rs"));

fn field<'a>(v: &'a Value, key: &str, model_type: &str) -> Result<&'a Value, CoreError> {
    v.get(key).filter(|x| !x.is_null()).ok_or_else(|| CoreError::Profile {
        origin: "config.json".into(),
        message: format!("missing field `{key}` (required for model_type '{model_type}')"),
    })
}

fn uint(v: &Value, key: &str, model_type: &str) -> Result<u64, CoreError> {
    let x = field(v, key, model_type)?;
    match x.as_u64() {
        Some(n) if n > 0 => Ok(n),
        _ => Err(CoreError::invalid(format!("config.json {key}"), x, "an integer >= 1")),
    }
}

fn opt_uint(v: &Value, key: &str) -> Result<Option<u64>, CoreError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_u64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(CoreError::invalid(format!("config.json {key}"), x, "an integer >= 1 or null")),
        },
    }
}

/// The `model_type`s this parser understands.
pub const SUPPORTED: &[&str] = &[
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gpt2",
    "opt",
];

impl ModelConfig {
    /// Parses a Hugging Face `config.json` text.
    pub fn from_json(text: &str) -> Result<Self, CoreError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| CoreError::Profile { origin: "config.json".into(), message: e.to_string() })?;
        let mt = v.get("model_type").and_then(Value::as_str).ok_or_else(|| CoreError::Profile {
            origin: "config.json".into(),
            message: "missing field `model_type`".into(),
        })?;
        let name = v.get("_name").and_then(Value::as_str).unwrap_or(mt).to_string();
        let tie = v.get("tie_word_embeddings").and_then(Value::as_bool);
        match mt {
            "gpt2" => {
                let hidden = uint(&v, "n_embd", mt)?;
                let heads = uint(&v, "n_head", mt)?;
                Ok(ModelConfig {
                    name,
                    model_type: mt.into(),
                    hidden,
                    layers: uint(&v, "n_layer", mt)?,
                    heads,
                    kv_heads: heads,
                    head_dim: hidden / heads,
                    intermediate: opt_uint(&v, "n_inner")?.unwrap_or(4 * hidden),
                    vocab: uint(&v, "vocab_size", mt)?,
                    tie_embeddings: tie.unwrap_or(true),
                    learned_positions: Some(uint(&v, "n_positions", mt)?),
                    mlp: Mlp::Plain,
                    layer_norm: true,
                    attention: Attention::Gqa,
                    moe: None,
                })
            }
            "opt" => {
                let hidden = uint(&v, "hidden_size", mt)?;
                let heads = uint(&v, "num_attention_heads", mt)?;
                Ok(ModelConfig {
                    name,
                    model_type: mt.into(),
                    hidden,
                    layers: uint(&v, "num_hidden_layers", mt)?,
                    heads,
                    kv_heads: heads,
                    head_dim: hidden / heads,
                    intermediate: uint(&v, "ffn_dim", mt)?,
                    vocab: uint(&v, "vocab_size", mt)?,
                    tie_embeddings: tie.unwrap_or(true),
                    learned_positions: Some(uint(&v, "max_position_embeddings", mt)?),
                    mlp: Mlp::Plain,
                    layer_norm: true,
                    attention: Attention::Gqa,
                    moe: None,
                })
            }
            "llama" | "mistral" | "qwen2" | "qwen3" | "mixtral" | "qwen2_moe" | "qwen3_moe" | "deepseek_v2"
            | "deepseek_v3" => {
                let hidden = uint(&v, "hidden_size", mt)?;
                let heads = uint(&v, "num_attention_heads", mt)?;
                let kv_heads = opt_uint(&v, "num_key_value_heads")?.unwrap_or(heads);
                if heads % kv_heads != 0 {
                    return Err(CoreError::invalid(
                        "config.json num_key_value_heads",
                        kv_heads,
                        format!("a divisor of num_attention_heads ({heads})"),
                    ));
                }
                let head_dim = opt_uint(&v, "head_dim")?.unwrap_or(hidden / heads);
                let deepseek = mt.starts_with("deepseek");
                let attention = if deepseek {
                    Attention::Mla(Mla {
                        q_lora_rank: opt_uint(&v, "q_lora_rank")?,
                        kv_lora_rank: uint(&v, "kv_lora_rank", mt)?,
                        qk_nope_head_dim: uint(&v, "qk_nope_head_dim", mt)?,
                        qk_rope_head_dim: uint(&v, "qk_rope_head_dim", mt)?,
                        v_head_dim: uint(&v, "v_head_dim", mt)?,
                    })
                } else {
                    Attention::Gqa
                };
                let moe = match mt {
                    "mixtral" => Some(Moe {
                        experts: uint(&v, "num_local_experts", mt)?,
                        top_k: uint(&v, "num_experts_per_tok", mt)?,
                        expert_intermediate: uint(&v, "intermediate_size", mt)?,
                        shared_experts: 0,
                        shared_intermediate: 0,
                        first_dense_layers: 0,
                    }),
                    "qwen2_moe" | "qwen3_moe" => Some(Moe {
                        experts: uint(&v, "num_experts", mt)?,
                        top_k: uint(&v, "num_experts_per_tok", mt)?,
                        expert_intermediate: uint(&v, "moe_intermediate_size", mt)?,
                        shared_experts: u64::from(opt_uint(&v, "shared_expert_intermediate_size")?.is_some()),
                        shared_intermediate: opt_uint(&v, "shared_expert_intermediate_size")?.unwrap_or(0),
                        first_dense_layers: 0,
                    }),
                    _ if deepseek => match opt_uint(&v, "n_routed_experts")? {
                        Some(experts) => {
                            let expert_intermediate = uint(&v, "moe_intermediate_size", mt)?;
                            Some(Moe {
                                experts,
                                top_k: uint(&v, "num_experts_per_tok", mt)?,
                                expert_intermediate,
                                shared_experts: opt_uint(&v, "n_shared_experts")?.unwrap_or(0),
                                shared_intermediate: expert_intermediate,
                                first_dense_layers: v.get("first_k_dense_replace").and_then(Value::as_u64).unwrap_or(0),
                            })
                        }
                        None => None,
                    },
                    _ => None,
                };
                Ok(ModelConfig {
                    name,
                    model_type: mt.into(),
                    hidden,
                    layers: uint(&v, "num_hidden_layers", mt)?,
                    heads,
                    kv_heads,
                    head_dim,
                    intermediate: if moe.is_some() && mt == "mixtral" { 0 } else { uint(&v, "intermediate_size", mt)? },
                    vocab: uint(&v, "vocab_size", mt)?,
                    tie_embeddings: tie.unwrap_or(false),
                    learned_positions: None,
                    mlp: Mlp::Gated,
                    layer_norm: false,
                    attention,
                    moe,
                })
            }
            other => Err(CoreError::Profile {
                origin: "config.json".into(),
                message: format!("unsupported model_type '{other}'; supported: {}", SUPPORTED.join(", ")),
            }),
        }
    }

    /// The embedded presets: (key, config).
    pub fn presets() -> Result<Vec<(String, ModelConfig)>, CoreError> {
        PRESET_DOCS
            .iter()
            .map(|(file, doc)| Ok((file.trim_end_matches(".json").to_string(), ModelConfig::from_json(doc)?)))
            .collect()
    }

    /// A preset by key (`llama-3.1-8b`), case-insensitive.
    pub fn preset(key: &str) -> Result<ModelConfig, CoreError> {
        let presets = Self::presets()?;
        let known = presets.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(", ");
        presets
            .into_iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key.trim()))
            .map(|(_, c)| c)
            .ok_or_else(|| CoreError::invalid("model", key, format!("a preset ({known}) or a config.json file")))
    }
}
