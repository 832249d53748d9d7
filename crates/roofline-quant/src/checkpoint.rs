//! Quantize a Hugging Face safetensors checkpoint into the compressed-tensors layout that vLLM loads, and read
//! such a checkpoint back.
//!
//! Layout (looked up in the sources, vllm-project/compressed-tensors at ac8e2ba and vllm-project/vllm):
//! - INT4 / INT8 weight-only, `format: "pack-quantized"`
//!   (`src/compressed_tensors/compressors/pack_quantized/base.py`, `.../pack_quantized/helpers.py`):
//!   `<m>.weight_packed` int32 `[rows, ceil(cols*bits/32)]`, the signed codes plus `2^(bits-1)` packed densely
//!   LSB first (element i at bit `i*bits` of the row, `pack_to_int32`); `<m>.weight_scale` in the model dtype,
//!   `[rows, cols/group]` (group) or `[rows, 1]` (channel); `<m>.weight_zero_point` int32 (asymmetric only),
//!   packed the same way along dim 0, `[ceil(rows*bits/32), groups]`; `<m>.weight_shape` int64 `[2]`.
//!   vLLM: `vllm/model_executor/layers/quantization/compressed_tensors/schemes/compressed_tensors_wNa16.py`
//!   (`weight_packed` packed_dim 1, `weight_zero_point` packed_dim 0, `weight_shape` of 2 int64).
//! - FP8 weight-only, `format: "float-quantized"`: `<m>.weight` float8_e4m3fn `[rows, cols]`,
//!   `<m>.weight_scale` float32 `[1]` (tensor) or `[rows, 1]` (channel)
//!   (`quantization/lifecycle/initialize.py` expected shapes; vLLM `compressed_tensors_w8a16_fp8.py`).
//! - NVFP4 weight-only, `format: "nvfp4-pack-quantized"` (`compressors/nvfp4/base.py`, `nvfp4/helpers.py`):
//!   `<m>.weight_packed` uint8 `[rows, cols/2]`, two E2M1 codes per byte, even column in the low nibble
//!   (`pack_fp4_to_uint8`); `<m>.weight_scale` float8_e4m3fn `[rows, cols/16]`; `<m>.weight_global_scale`
//!   float32 `[1]`, which *divides* the block scale (`forward_helpers.py`: `scale = scale / global_scale`), so
//!   it is `448 * 6 / amax` (`utils/helpers.py::generate_gparam`).
//!
//! `config.json` gains `quantization_config` with `quant_method: "compressed-tensors"`, `format`,
//! `quantization_status: "compressed"`, `config_groups` (`targets`, `weights`: `num_bits`, `type`, `symmetric`,
//! `strategy`, `group_size`, `dynamic`, ...; `input_activations: null` = weight-only), and `ignore`
//! (`quantization/quant_config.py`, `quant_scheme.py` presets W4A16_ASYM, W8A16, FP8, NVFP4A16).
//!
//! Tensors are read one at a time with positioned reads (no memory map, no `unsafe`), and output shards are
//! streamed: their headers are planned from the input headers, so memory stays near one tensor.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use roofline_core::Format;
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::Dtype;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use thiserror::Error;

use crate::codec::{
    dequantize, quantize_with, Codec, FloatKind, QuantError, QuantOptions, QuantizedTensor, ScaleDtype,
};
use crate::metrics::ErrorMetrics;
use crate::minifloat::E4M3;

/// Errors of checkpoint quantization and loading.
#[derive(Debug, Error)]
pub enum CheckpointError {
    /// A file could not be read or written (missing file, full disk, permissions).
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A JSON file or safetensors header could not be parsed.
    #[error("{path}: {msg}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        msg: String,
    },
    /// No `model.safetensors` nor `model.safetensors.index.json` in the directory.
    #[error("{0}: no model.safetensors or model.safetensors.index.json (only safetensors checkpoints are read)")]
    NoWeights(PathBuf),
    /// A weight to quantize has a dtype we cannot convert to f32.
    #[error("tensor {name}: dtype {dtype:?} cannot be read (quantizable weights must be F32, F16 or BF16)")]
    Dtype {
        /// Tensor.
        name: String,
        /// Its dtype.
        dtype: Dtype,
    },
    /// The input columns do not fill whole blocks or packed words.
    #[error("tensor {name}: shape {shape:?} is not divisible by the block of {scheme} (columns must be a multiple of {block})")]
    Shape {
        /// Tensor.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
        /// Scheme.
        scheme: String,
        /// Required multiple.
        block: usize,
    },
    /// An unknown scheme name.
    #[error("unknown scheme '{0}'; known: INT4 (= INT4_G128), INT4_G32, INT4_G64, INT8, FP8 (per tensor), FP8_CHANNEL, NVFP4")]
    Scheme(String),
    /// The output directory exists already.
    #[error("{0} exists; choose a new --out directory")]
    OutputExists(PathBuf),
    /// The codec refused the data (non-finite values).
    #[error("tensor {name}: {source}")]
    Codec {
        /// Tensor.
        name: String,
        /// The codec error.
        source: QuantError,
    },
    /// A written checkpoint does not have the expected tensors.
    #[error("{0}")]
    Layout(String),
}

type Result<T> = std::result::Result<T, CheckpointError>;

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io { path: path.to_path_buf(), source }
}

/// A weight quantization scheme that has a compressed-tensors layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Scheme {
    /// INT4 asymmetric, groups along a row (W4A16_ASYM), pack-quantized.
    Int4 {
        /// Group size (32, 64 or 128).
        group: usize,
    },
    /// INT8 symmetric per output channel (W8A16), pack-quantized.
    Int8,
    /// FP8 E4M3, float-quantized.
    Fp8 {
        /// One scale per output channel instead of one per tensor.
        per_channel: bool,
    },
    /// NVFP4 (NVFP4A16), nvfp4-pack-quantized.
    Nvfp4,
}

impl Scheme {
    /// Parses `INT4` / `W4A16` / `INT4_G32|64|128`, `INT8` / `W8A16`, `FP8` / `FP8_E4M3`, `FP8_CHANNEL`, `NVFP4`.
    pub fn parse(s: &str) -> Result<Scheme> {
        let key = s.trim().to_ascii_uppercase().replace('-', "_");
        Ok(match key.as_str() {
            "INT4" | "W4A16" | "INT4_G128" | "W4A16_ASYM" | "AWQ" => Scheme::Int4 { group: 128 },
            "INT4_G64" => Scheme::Int4 { group: 64 },
            "INT4_G32" => Scheme::Int4 { group: 32 },
            "INT8" | "W8A16" | "INT8_CHANNEL" => Scheme::Int8,
            "FP8" | "FP8_E4M3" | "FP8_TENSOR" | "FP8_E4M3_TENSOR" => Scheme::Fp8 { per_channel: false },
            "FP8_CHANNEL" | "FP8_E4M3_CHANNEL" => Scheme::Fp8 { per_channel: true },
            "NVFP4" | "NVFP4A16" | "FP4" => Scheme::Nvfp4,
            _ => return Err(CheckpointError::Scheme(s.to_string())),
        })
    }

    /// The scheme for a catalog format chosen by the recommender, and a note when the format has no
    /// compressed-tensors writer here and a neighbour of the same width is used. `None` keeps the layer
    /// unquantized (FP16/BF16/FP32).
    pub fn from_format(f: Format) -> (Option<Scheme>, Option<String>) {
        let sub = |s: Scheme, why: &str| (Some(s), Some(format!("{f} written as {}: {why}", s.name())));
        match f {
            Format::INT4 | Format::INT4_G128 => (Some(Scheme::Int4 { group: 128 }), None),
            Format::INT8 => (Some(Scheme::Int8), None),
            Format::FP8_E4M3 => (Some(Scheme::Fp8 { per_channel: false }), None),
            Format::NVFP4 => (Some(Scheme::Nvfp4), None),
            Format::FP8_E5M2 | Format::MXFP8_E4M3 | Format::MXFP8_E5M2 | Format::MXFP6_E2M3 | Format::MXFP6_E3M2 => {
                sub(Scheme::Fp8 { per_channel: true }, "no writer for this 6/8-bit float format")
            }
            Format::MXINT8 => sub(Scheme::Int8, "no MXINT8 writer"),
            Format::MXFP4 => sub(Scheme::Nvfp4, "no mxfp4-pack-quantized writer yet"),
            Format::NF4 => sub(Scheme::Int4 { group: 64 }, "vLLM loads NF4 only through bitsandbytes"),
            Format::INT2 => sub(Scheme::Int4 { group: 128 }, "vLLM's WNA16 kernels take 4 or 8 bits"),
            _ => (None, None),
        }
    }

    /// Canonical name.
    pub fn name(self) -> String {
        match self {
            Scheme::Int4 { group } => format!("INT4_G{group}"),
            Scheme::Int8 => "INT8".into(),
            Scheme::Fp8 { per_channel: false } => "FP8".into(),
            Scheme::Fp8 { per_channel: true } => "FP8_CHANNEL".into(),
            Scheme::Nvfp4 => "NVFP4".into(),
        }
    }

    /// The codec that quantizes this scheme.
    pub fn codec(self) -> Codec {
        match self {
            Scheme::Int4 { group } => Codec::IntGroupAsym { bits: 4, group },
            Scheme::Int8 => Codec::Int8PerChannel,
            Scheme::Fp8 { per_channel: false } => Codec::Fp8PerTensor(FloatKind::E4M3),
            Scheme::Fp8 { per_channel: true } => Codec::Fp8PerChannel(FloatKind::E4M3),
            Scheme::Nvfp4 => Codec::Nvfp4,
        }
    }

    /// The compressed-tensors format string (`config/base.py::CompressionFormat`).
    pub fn ct_format(self) -> &'static str {
        match self {
            Scheme::Int4 { .. } | Scheme::Int8 => "pack-quantized",
            Scheme::Fp8 { .. } => "float-quantized",
            Scheme::Nvfp4 => "nvfp4-pack-quantized",
        }
    }

    /// The `weights` QuantizationArgs of the config group (`quantization/quant_args.py`).
    pub fn weights_args(self) -> Value {
        let (bits, ty, sym, strategy, group) = match self {
            Scheme::Int4 { group } => (4, "int", false, "group", Some(group)),
            Scheme::Int8 => (8, "int", true, "channel", None),
            Scheme::Fp8 { per_channel } => (8, "float", true, if per_channel { "channel" } else { "tensor" }, None),
            Scheme::Nvfp4 => (4, "float", true, "tensor_group", Some(16)),
        };
        json!({
            "num_bits": bits, "type": ty, "symmetric": sym, "strategy": strategy, "group_size": group,
            "dynamic": false, "actorder": null, "block_structure": null, "observer": "minmax", "observer_kwargs": {},
        })
    }

    /// Columns must be a multiple of this (whole groups, whole packed int32 words).
    pub fn col_multiple(self) -> usize {
        match self {
            Scheme::Int4 { group } => group.max(8),
            Scheme::Int8 => 4,
            Scheme::Fp8 { .. } => 1,
            Scheme::Nvfp4 => 16,
        }
    }
}

/// Whether a tensor is the weight of a linear layer that we quantize: 2-D `*.weight`, not an embedding, norm,
/// MoE router gate (`mlp.gate`, `router`), nor `lm_head` unless `quantize_lm_head`.
pub fn is_quantizable(name: &str, shape: &[usize], quantize_lm_head: bool) -> bool {
    let Some(module) = name.strip_suffix(".weight") else { return false };
    if shape.len() != 2 {
        return false;
    }
    let last = module.rsplit('.').next().unwrap_or(module);
    let lower = module.to_ascii_lowercase();
    if lower.contains("embed") || lower.contains("norm") || lower.contains("router") || lower.ends_with("wte") {
        return false;
    }
    if last == "gate" || last == "shared_expert_gate" {
        return false; // MoE router (Mixtral `block_sparse_moe.gate`, Qwen-MoE `mlp.gate`), not `gate_proj`
    }
    if last == "lm_head" || module == "lm_head" {
        return quantize_lm_head;
    }
    true
}

/// One shard of the input checkpoint.
#[derive(Debug)]
struct Shard {
    path: PathBuf,
    file_name: String,
    data_start: u64,
    metadata: Metadata,
}

fn read_shard(path: &Path) -> Result<Shard> {
    let mut f = File::open(path).map_err(io_err(path))?;
    let mut n = [0u8; 8];
    f.read_exact(&mut n).map_err(io_err(path))?;
    let n = u64::from_le_bytes(n);
    if n > 100_000_000 {
        return Err(CheckpointError::Parse { path: path.into(), msg: format!("safetensors header of {n} bytes") });
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).map_err(io_err(path))?;
    let metadata: Metadata = serde_json::from_slice(&header)
        .map_err(|e| CheckpointError::Parse { path: path.into(), msg: format!("safetensors header: {e}") })?;
    let len = f.metadata().map_err(io_err(path))?.len();
    if 8 + n + metadata.data_len() as u64 > len {
        return Err(CheckpointError::Parse {
            path: path.into(),
            msg: format!("truncated: header promises {} data bytes, file has {}", metadata.data_len(), len - 8 - n),
        });
    }
    let file_name = path.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(Shard { path: path.to_path_buf(), file_name, data_start: 8 + n, metadata })
}

/// A Hugging Face model directory: `config.json` and its safetensors shards.
#[derive(Debug)]
pub struct SourceModel {
    dir: PathBuf,
    /// The parsed `config.json`.
    pub config: Value,
    shards: Vec<Shard>,
    indexed: bool,
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    serde_json::from_str(&text).map_err(|e| CheckpointError::Parse { path: path.into(), msg: e.to_string() })
}

impl SourceModel {
    /// Opens a model directory (`config.json` plus `model.safetensors` or `model.safetensors.index.json`).
    pub fn open(dir: &Path) -> Result<SourceModel> {
        let config = read_json(&dir.join("config.json"))?;
        let index = dir.join("model.safetensors.index.json");
        let (files, indexed) = if index.is_file() {
            let v = read_json(&index)?;
            let map = v
                .get("weight_map")
                .and_then(Value::as_object)
                .ok_or_else(|| CheckpointError::Parse { path: index.clone(), msg: "no weight_map object".into() })?;
            let mut files: Vec<String> = map.values().filter_map(|f| f.as_str().map(String::from)).collect();
            files.sort();
            files.dedup();
            (files, true)
        } else if dir.join("model.safetensors").is_file() {
            (vec!["model.safetensors".to_string()], false)
        } else {
            return Err(CheckpointError::NoWeights(dir.to_path_buf()));
        };
        let shards = files.iter().map(|f| read_shard(&dir.join(f))).collect::<Result<Vec<_>>>()?;
        Ok(SourceModel { dir: dir.to_path_buf(), config, shards, indexed })
    }

    /// Every tensor: (name, dtype, shape), shard by shard in file order.
    pub fn tensors(&self) -> Vec<(String, Dtype, Vec<usize>)> {
        self.shards
            .iter()
            .flat_map(|s| {
                s.metadata
                    .offset_keys()
                    .into_iter()
                    .filter_map(move |k| s.metadata.info(&k).map(|i| (k.clone(), i.dtype, i.shape.clone())))
            })
            .collect()
    }

    /// One tensor as f32 and its shape (F32, F16 or BF16 in the file), from whichever shard holds it;
    /// `Ok(None)` when no shard has `name`.
    pub fn read_f32(&self, name: &str) -> Result<Option<(Vec<f32>, Vec<usize>)>> {
        for shard in &self.shards {
            if let Some(info) = shard.metadata.info(name) {
                let bytes = read_raw(shard, info)?;
                return Ok(Some((to_f32(name, info.dtype, &bytes)?, info.shape.clone())));
            }
        }
        Ok(None)
    }

    /// The model directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn model_dtype(&self) -> ScaleDtype {
        match self.config.get("torch_dtype").or_else(|| self.config.get("dtype")).and_then(Value::as_str) {
            Some("float16") => ScaleDtype::F16,
            Some("float32") => ScaleDtype::F32,
            _ => ScaleDtype::BF16,
        }
    }
}

fn read_raw(shard: &Shard, info: &TensorInfo) -> Result<Vec<u8>> {
    let mut f = File::open(&shard.path).map_err(io_err(&shard.path))?;
    let (s, e) = info.data_offsets;
    f.seek(SeekFrom::Start(shard.data_start + s as u64)).map_err(io_err(&shard.path))?;
    let mut buf = vec![0u8; e - s];
    f.read_exact(&mut buf).map_err(io_err(&shard.path))?;
    Ok(buf)
}

/// Converts raw little-endian F32/F16/BF16 bytes to f32.
pub fn to_f32(name: &str, dtype: Dtype, bytes: &[u8]) -> Result<Vec<f32>> {
    Ok(match dtype {
        Dtype::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        Dtype::F16 => bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        Dtype::BF16 => {
            bytes.chunks_exact(2).map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)).collect()
        }
        other => return Err(CheckpointError::Dtype { name: name.into(), dtype: other }),
    })
}

fn scale_dtype_tag(sd: ScaleDtype) -> Dtype {
    match sd {
        ScaleDtype::F32 => Dtype::F32,
        ScaleDtype::F16 => Dtype::F16,
        ScaleDtype::BF16 => Dtype::BF16,
    }
}

fn scale_bytes(sd: ScaleDtype, v: &[f32]) -> Vec<u8> {
    match sd {
        ScaleDtype::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ScaleDtype::F16 => v.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect(),
        ScaleDtype::BF16 => v.iter().flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes()).collect(),
    }
}

/// Output tensors of one quantized weight: (suffix, dtype, shape).
fn planned(scheme: Scheme, rows: usize, cols: usize, sd: ScaleDtype) -> Vec<(&'static str, Dtype, Vec<usize>)> {
    match scheme {
        Scheme::Int4 { group } => vec![
            ("weight_packed", Dtype::I32, vec![rows, (cols * 4).div_ceil(32)]),
            ("weight_scale", scale_dtype_tag(sd), vec![rows, cols / group]),
            ("weight_shape", Dtype::I64, vec![2]),
            ("weight_zero_point", Dtype::I32, vec![(rows * 4).div_ceil(32), cols / group]),
        ],
        Scheme::Int8 => vec![
            ("weight_packed", Dtype::I32, vec![rows, (cols * 8).div_ceil(32)]),
            ("weight_scale", scale_dtype_tag(sd), vec![rows, 1]),
            ("weight_shape", Dtype::I64, vec![2]),
        ],
        Scheme::Fp8 { per_channel } => vec![
            ("weight", Dtype::F8_E4M3, vec![rows, cols]),
            ("weight_scale", Dtype::F32, if per_channel { vec![rows, 1] } else { vec![1] }),
        ],
        Scheme::Nvfp4 => vec![
            ("weight_packed", Dtype::U8, vec![rows, cols / 2]),
            ("weight_scale", Dtype::F8_E4M3, vec![rows, cols / 16]),
            ("weight_global_scale", Dtype::F32, vec![1]),
        ],
    }
}

/// Dense LSB-first packing of `bits`-bit codes, `per_line` codes per line, into int32 words
/// (`pack_to_int32`; each line padded to whole words).
fn pack_int32(codes: impl Fn(usize, usize) -> u32, lines: usize, per_line: usize, bits: usize) -> Vec<u8> {
    let words = (per_line * bits).div_ceil(32);
    let mut out = vec![0u32; lines * words];
    for l in 0..lines {
        for i in 0..per_line {
            let bit = i * bits;
            let v = codes(l, i) & ((1 << bits) - 1);
            out[l * words + bit / 32] |= v << (bit % 32);
            if bit % 32 + bits > 32 {
                out[l * words + bit / 32 + 1] |= v >> (32 - bit % 32);
            }
        }
    }
    out.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn unpack_int32(bytes: &[u8], line: usize, words: usize, i: usize, bits: usize) -> u32 {
    let word = |w: usize| {
        let o = (line * words + w) * 4;
        u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]])
    };
    let bit = i * bits;
    let mut v = word(bit / 32) >> (bit % 32);
    if bit % 32 + bits > 32 {
        v |= word(bit / 32 + 1) << (32 - bit % 32);
    }
    v & ((1 << bits) - 1)
}

/// Code `i` of row `r` of a quantized tensor (unsigned as packed by compressed-tensors).
fn ct_code(q: &QuantizedTensor, r: usize, i: usize) -> u32 {
    let row = &q.codes[r * q.row_bytes..(r + 1) * q.row_bytes];
    match q.codec.bits() {
        4 => u32::from((row[i / 2] >> (4 * (i % 2))) & 0xf),
        // INT8: two's complement code -> q + 128 (pack_to_int32's offset)
        _ => u32::from(row[i] ^ 0x80),
    }
}

/// The output tensors' bytes of one quantized weight, in the order of [`planned`].
fn encode_tensors(scheme: Scheme, q: &QuantizedTensor, sd: ScaleDtype) -> Vec<Vec<u8>> {
    let (rows, cols) = (q.rows, q.cols);
    let shape: Vec<u8> = [rows as i64, cols as i64].iter().flat_map(|v| v.to_le_bytes()).collect();
    match scheme {
        Scheme::Int4 { group } => {
            let g = cols / group;
            vec![
                pack_int32(|r, i| ct_code(q, r, i), rows, cols, 4),
                scale_bytes(sd, &q.scales),
                shape,
                // zero points [rows, groups] packed along dim 0: line = group, element = row
                transpose_words(
                    &pack_int32(|gi, r| u32::from(q.zeros[r * g + gi]), g, rows, 4),
                    g,
                    (rows * 4).div_ceil(32),
                ),
            ]
        }
        Scheme::Int8 => vec![pack_int32(|r, i| ct_code(q, r, i), rows, cols, 8), scale_bytes(sd, &q.scales), shape],
        Scheme::Fp8 { per_channel } => vec![
            q.codes.clone(),
            if per_channel { scale_bytes(ScaleDtype::F32, &q.scales) } else { q.tensor_scale.to_le_bytes().to_vec() },
        ],
        Scheme::Nvfp4 => vec![
            q.codes.clone(),
            q.scales.iter().map(|&s| E4M3.encode(s) as u8).collect(),
            (1.0f32 / q.tensor_scale).to_le_bytes().to_vec(),
        ],
    }
}

/// `[lines, words]` int32 matrix (as bytes) transposed to `[words, lines]`.
fn transpose_words(bytes: &[u8], lines: usize, words: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes.len()];
    for l in 0..lines {
        for w in 0..words {
            let (src, dst) = ((l * words + w) * 4, (w * lines + l) * 4);
            out[dst..dst + 4].copy_from_slice(&bytes[src..src + 4]);
        }
    }
    out
}

/// Per-tensor result of `quantize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerReport {
    /// Weight tensor name (`model.layers.0.self_attn.q_proj.weight`).
    pub name: String,
    /// Scheme used.
    pub scheme: String,
    /// Output channels.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// Error of the dequantized weight against the source.
    pub metrics: ErrorMetrics,
    /// Bytes of the source tensor.
    pub bytes_in: u64,
    /// Bytes of the quantized tensors written.
    pub bytes_out: u64,
}

/// Summary of a quantized checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantizeReport {
    /// The written directory.
    pub out: PathBuf,
    /// Quantized weights.
    pub layers: Vec<LayerReport>,
    /// Tensors copied unchanged (embeddings, norms, lm_head, ...).
    pub kept: Vec<String>,
    /// Other files copied (tokenizer, generation config, ...).
    pub copied_files: Vec<String>,
    /// Notes (scheme substitutions, skipped files).
    pub notes: Vec<String>,
    /// Bytes of all tensors in.
    pub total_bytes_in: u64,
    /// Bytes of all tensors out.
    pub total_bytes_out: u64,
}

/// Progress of [`quantize_checkpoint`]: one call per tensor.
#[derive(Debug, Clone)]
pub struct Progress<'a> {
    /// Tensors done (including this one).
    pub done: usize,
    /// Tensors in total.
    pub total: usize,
    /// This tensor.
    pub name: &'a str,
}

/// How to quantize: the scheme of each quantizable weight (`None` keeps it).
pub struct Plan<'a> {
    /// Scheme for a weight, given its module name (`model.layers.0.mlp.down_proj`), rows and cols.
    pub scheme_for: &'a dyn Fn(&str, usize, usize) -> Option<Scheme>,
    /// Quantize `lm_head` too.
    pub quantize_lm_head: bool,
}

/// Quantizes the model in `src` into a new directory `out` (written under a temporary name next to it and
/// renamed at the end; removed on any error).
pub fn quantize_checkpoint(
    src: &Path,
    out: &Path,
    plan: &Plan<'_>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<QuantizeReport> {
    if out.exists() {
        return Err(CheckpointError::OutputExists(out.to_path_buf()));
    }
    let model = SourceModel::open(src)?;
    let name = out.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
    let tmp = out.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
    match write_all(&model, &tmp, plan, progress) {
        Ok(mut report) => {
            std::fs::rename(&tmp, out).map_err(|e| {
                let _ = std::fs::remove_dir_all(&tmp);
                CheckpointError::Io { path: out.to_path_buf(), source: e }
            })?;
            report.out = out.to_path_buf();
            Ok(report)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

fn write_all(
    model: &SourceModel,
    tmp: &Path,
    plan: &Plan<'_>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<QuantizeReport> {
    let sd = model.model_dtype();
    let total = model.tensors().len();
    let mut done = 0;
    let mut report = QuantizeReport {
        out: tmp.to_path_buf(),
        layers: Vec::new(),
        kept: Vec::new(),
        copied_files: Vec::new(),
        notes: Vec::new(),
        total_bytes_in: 0,
        total_bytes_out: 0,
    };
    let mut weight_map = BTreeMap::new();
    let mut tensor_bytes = 0u64;
    let mut groups: BTreeMap<Scheme, Vec<String>> = BTreeMap::new();
    let mut ignore = Vec::new();
    for shard in &model.shards {
        // 1. plan: the scheme of every tensor and the output header
        let mut items = Vec::new(); // (input name, Option<scheme>)
        let mut out_infos: Vec<(String, TensorInfo)> = Vec::new();
        let mut offset = 0usize;
        for key in shard.metadata.offset_keys() {
            let Some(info) = shard.metadata.info(&key) else { continue };
            let module = key.strip_suffix(".weight").unwrap_or(&key).to_string();
            let scheme = if is_quantizable(&key, &info.shape, plan.quantize_lm_head) {
                (plan.scheme_for)(&module, info.shape[0], info.shape[1])
            } else {
                None
            };
            let mut push = |n: String, dtype: Dtype, shape: Vec<usize>| {
                let size = shape.iter().product::<usize>() * dtype.bitsize() / 8;
                out_infos.push((n, TensorInfo { dtype, shape, data_offsets: (offset, offset + size) }));
                offset += size;
            };
            match scheme {
                Some(s) => {
                    let (rows, cols) = (info.shape[0], info.shape[1]);
                    if !matches!(info.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
                        return Err(CheckpointError::Dtype { name: key.clone(), dtype: info.dtype });
                    }
                    if cols % s.col_multiple() != 0 {
                        return Err(CheckpointError::Shape {
                            name: key.clone(),
                            shape: info.shape.clone(),
                            scheme: s.name(),
                            block: s.col_multiple(),
                        });
                    }
                    for (suffix, dtype, shape) in planned(s, rows, cols, sd) {
                        push(format!("{module}.{suffix}"), dtype, shape);
                    }
                    groups.entry(s).or_default().push(module.clone());
                }
                None => {
                    if is_quantizable(&key, &info.shape, true) {
                        ignore.push(module.clone());
                    }
                    push(key.clone(), info.dtype, info.shape.clone());
                }
            }
            items.push((key, scheme));
        }
        let metadata = Metadata::new(Some(HashMap::from([("format".to_string(), "pt".to_string())])), out_infos)
            .map_err(|e| CheckpointError::Layout(format!("planned header of {}: {e}", shard.file_name)))?;
        for k in metadata.offset_keys() {
            weight_map.insert(k, shard.file_name.clone());
        }
        // 2. stream: header, then each tensor's bytes
        let path = tmp.join(&shard.file_name);
        let file = File::create(&path).map_err(io_err(&path))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let mut header = serde_json::to_string(&metadata)
            .map_err(|e| CheckpointError::Layout(format!("header of {}: {e}", shard.file_name)))?;
        while header.len() % 8 != 0 {
            header.push(' ');
        }
        w.write_all(&(header.len() as u64).to_le_bytes()).map_err(io_err(&path))?;
        w.write_all(header.as_bytes()).map_err(io_err(&path))?;
        let mut written = 0usize;
        for (key, scheme) in items {
            let info = shard.metadata.info(&key).ok_or_else(|| CheckpointError::Layout(key.clone()))?;
            let raw = read_raw(shard, info)?;
            report.total_bytes_in += raw.len() as u64;
            match scheme {
                None => {
                    w.write_all(&raw).map_err(io_err(&path))?;
                    written += raw.len();
                    report.kept.push(key.clone());
                }
                Some(s) => {
                    let (rows, cols) = (info.shape[0], info.shape[1]);
                    let x = to_f32(&key, info.dtype, &raw)?;
                    drop(raw);
                    let q = quantize_scheme(s, &x, rows, cols, sd)
                        .map_err(|source| CheckpointError::Codec { name: key.clone(), source })?;
                    let metrics = ErrorMetrics::of(&x, &dequantize(&q));
                    let mut bytes_out = 0u64;
                    for t in encode_tensors(s, &q, sd) {
                        w.write_all(&t).map_err(io_err(&path))?;
                        written += t.len();
                        bytes_out += t.len() as u64;
                    }
                    report.layers.push(LayerReport {
                        name: key.clone(),
                        scheme: s.name(),
                        rows,
                        cols,
                        metrics,
                        bytes_in: (info.data_offsets.1 - info.data_offsets.0) as u64,
                        bytes_out,
                    });
                }
            }
            done += 1;
            progress(Progress { done, total, name: &key });
        }
        if written != metadata.data_len() {
            return Err(CheckpointError::Layout(format!(
                "{}: wrote {written} data bytes, header says {}",
                shard.file_name,
                metadata.data_len()
            )));
        }
        w.flush().map_err(io_err(&path))?;
        w.into_inner().map_err(|e| io_err(&path)(e.into_error()))?.sync_all().map_err(io_err(&path))?;
        report.total_bytes_out += (8 + header.len() + written) as u64;
        tensor_bytes += written as u64;
    }
    if model.indexed {
        // total_size: bytes of tensor data, as transformers' save_pretrained writes it
        let index = json!({"metadata": {"total_size": tensor_bytes}, "weight_map": weight_map});
        write_json(&tmp.join("model.safetensors.index.json"), &index)?;
    }
    let mut config = model.config.clone();
    if !groups.is_empty() {
        config["quantization_config"] = quantization_config(&groups, &ignore);
    }
    write_json(&tmp.join("config.json"), &config)?;
    copy_other_files(&model.dir, tmp, &mut report)?;
    Ok(report)
}

/// Quantizes with the options a checkpoint needs: scales rounded to the model dtype (INT), NVFP4's global
/// scale chosen so that `1 / weight_global_scale` reproduces it exactly.
pub fn quantize_scheme(
    scheme: Scheme,
    x: &[f32],
    rows: usize,
    cols: usize,
    model_dtype: ScaleDtype,
) -> std::result::Result<QuantizedTensor, QuantError> {
    let mut opts = QuantOptions::default();
    match scheme {
        Scheme::Int4 { .. } | Scheme::Int8 => opts.scale_dtype = model_dtype,
        Scheme::Nvfp4 => {
            let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            if amax > 0.0 && amax.is_finite() {
                let global = 448.0 * 6.0 / amax;
                if global.is_finite() {
                    opts.tensor_scale = Some(1.0 / global);
                }
            }
        }
        Scheme::Fp8 { .. } => {}
    }
    quantize_with(scheme.codec(), x, rows, cols, &opts)
}

/// The `quantization_config` block of `config.json`: one config group per scheme, targets = the exact module
/// names (vLLM matches targets against layer names, class names or `re:` patterns), `ignore` = linear layers
/// left unquantized. Several schemes make the top-level format `mixed-precision`, each group carrying its own.
pub fn quantization_config(groups: &BTreeMap<Scheme, Vec<String>>, ignore: &[String]) -> Value {
    let single = groups.len() == 1;
    let mut cg = serde_json::Map::new();
    for (i, (s, modules)) in groups.iter().enumerate() {
        let targets: Vec<Value> =
            if single { vec![json!("Linear")] } else { modules.iter().map(|m| json!(m)).collect() };
        cg.insert(
            format!("group_{i}"),
            json!({
                "targets": targets, "weights": s.weights_args(), "input_activations": null,
                "output_activations": null, "format": s.ct_format(),
            }),
        );
    }
    let format = match groups.keys().next() {
        Some(s) if single => s.ct_format(),
        _ => "mixed-precision",
    };
    json!({
        "quant_method": "compressed-tensors",
        "format": format,
        "quantization_status": "compressed",
        "config_groups": cg,
        "ignore": ignore,
        "kv_cache_scheme": null,
        "global_compression_ratio": null,
        "sparsity_config": {},
    })
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| CheckpointError::Layout(e.to_string()))?;
    std::fs::write(path, text + "\n").map_err(io_err(path))
}

fn copy_other_files(src: &Path, dst: &Path, report: &mut QuantizeReport) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(src).map_err(io_err(src))?.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if !path.is_file() || name == "config.json" || name == "model.safetensors.index.json" {
            continue;
        }
        let weights = [".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".ckpt"];
        if weights.iter().any(|x| name.ends_with(x)) {
            if !name.ends_with(".safetensors") {
                report.notes.push(format!("skipped {name} (other-format weights)"));
            }
            continue;
        }
        std::fs::copy(&path, dst.join(&name)).map_err(io_err(&path))?;
        report.copied_files.push(name);
    }
    Ok(())
}

/// A weight read back from a written checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedWeight {
    /// Module name (`model.layers.0.mlp.down_proj`).
    pub module: String,
    /// Scheme inferred from the stored tensors.
    pub scheme: Scheme,
    /// The codes and scales as our codec represents them.
    pub tensor: QuantizedTensor,
}

/// A compressed-tensors checkpoint read back: the quantized weights and the plain tensors.
#[derive(Debug)]
pub struct LoadedCheckpoint {
    /// `config.json`.
    pub config: Value,
    /// Quantized weights, by module name.
    pub weights: BTreeMap<String, LoadedWeight>,
    /// Every stored tensor: name -> (dtype, shape).
    pub tensors: BTreeMap<String, (Dtype, Vec<usize>)>,
}

impl LoadedCheckpoint {
    /// The dequantized weight of a module (f32, row-major), as our codec decodes it.
    pub fn dequantize(&self, module: &str) -> Option<Vec<f32>> {
        self.weights.get(module).map(|w| dequantize(&w.tensor))
    }
}

/// Reads a checkpoint written by [`quantize_checkpoint`] (all shards; validated by the `safetensors` crate)
/// and rebuilds each quantized weight.
pub fn load_checkpoint(dir: &Path) -> Result<LoadedCheckpoint> {
    let config = read_json(&dir.join("config.json"))?;
    let index = dir.join("model.safetensors.index.json");
    let files: Vec<String> = if index.is_file() {
        let v = read_json(&index)?;
        let mut f: Vec<String> = v["weight_map"]
            .as_object()
            .map(|m| m.values().filter_map(|x| x.as_str().map(String::from)).collect())
            .unwrap_or_default();
        f.sort();
        f.dedup();
        f
    } else {
        vec!["model.safetensors".into()]
    };
    let mut raw: BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)> = BTreeMap::new();
    for f in files {
        let path = dir.join(&f);
        let bytes = std::fs::read(&path).map_err(io_err(&path))?;
        let st = safetensors::SafeTensors::deserialize(&bytes)
            .map_err(|e| CheckpointError::Parse { path: path.clone(), msg: e.to_string() })?;
        for (name, view) in st.tensors() {
            raw.insert(name, (view.dtype(), view.shape().to_vec(), view.data().to_vec()));
        }
    }
    let tensors = raw.iter().map(|(k, (d, s, _))| (k.clone(), (*d, s.clone()))).collect();
    let mut weights = BTreeMap::new();
    let modules: Vec<String> = raw.keys().filter_map(|k| k.strip_suffix(".weight_scale").map(String::from)).collect();
    for m in modules {
        let get = |s: &str| raw.get(&format!("{m}.{s}"));
        let missing = |s: &str| CheckpointError::Layout(format!("{m}: no {m}.{s}"));
        let scale = get("weight_scale").ok_or_else(|| missing("weight_scale"))?;
        let w = if let Some(packed) = get("weight_packed") {
            if let Some(global) = get("weight_global_scale") {
                // NVFP4
                let (rows, half_cols) = (packed.1[0], packed.1[1]);
                let g = f32::from_le_bytes(global.2[..4].try_into().map_err(|_| missing("weight_global_scale"))?);
                let tensor = QuantizedTensor {
                    codec: Codec::Nvfp4,
                    rows,
                    cols: half_cols * 2,
                    codes: packed.2.clone(),
                    row_bytes: half_cols,
                    scales: scale.2.iter().map(|&b| E4M3.decode(u32::from(b))).collect(),
                    zeros: Vec::new(),
                    tensor_scale: 1.0 / g,
                    double_quant: None,
                };
                LoadedWeight { module: m.clone(), scheme: Scheme::Nvfp4, tensor }
            } else {
                // pack-quantized INT4 / INT8
                let shape = get("weight_shape").ok_or_else(|| missing("weight_shape"))?;
                let dims: Vec<i64> =
                    shape.2.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect();
                let [rows, cols] = dims[..] else { return Err(missing("weight_shape [2]")) };
                let (rows, cols) = (rows as usize, cols as usize);
                let words = packed.1[1];
                let bits = words * 32 / cols.max(1);
                let sd = match scale.0 {
                    Dtype::BF16 => Dtype::BF16,
                    Dtype::F16 => Dtype::F16,
                    _ => Dtype::F32,
                };
                let scales = to_f32(&m, sd, &scale.2)?;
                let row_bytes = (cols * bits).div_ceil(8);
                let mut codes = vec![0u8; rows * row_bytes];
                for r in 0..rows {
                    for i in 0..cols {
                        let v = unpack_int32(&packed.2, r, words, i, bits) as u8;
                        if bits == 4 {
                            codes[r * row_bytes + i / 2] |= v << (4 * (i % 2));
                        } else {
                            codes[r * row_bytes + i] = v ^ 0x80;
                        }
                    }
                }
                let (scheme, codec, zeros) = if bits == 4 {
                    let groups = scale.1[1];
                    let zp = get("weight_zero_point").ok_or_else(|| missing("weight_zero_point"))?;
                    let zwords = zp.1[0];
                    // stored [zwords, groups]; line g of the packed-along-rows layout is column g
                    let mut zeros = vec![0u8; rows * groups];
                    let zt = transpose_words(&zp.2, zwords, groups);
                    for g in 0..groups {
                        for r in 0..rows {
                            zeros[r * groups + g] = unpack_int32(&zt, g, zwords, r, 4) as u8;
                        }
                    }
                    let group = cols / groups.max(1);
                    (Scheme::Int4 { group }, Codec::IntGroupAsym { bits: 4, group }, zeros)
                } else {
                    (Scheme::Int8, Codec::Int8PerChannel, Vec::new())
                };
                let tensor = QuantizedTensor {
                    codec,
                    rows,
                    cols,
                    codes,
                    row_bytes,
                    scales,
                    zeros,
                    tensor_scale: 1.0,
                    double_quant: None,
                };
                LoadedWeight { module: m.clone(), scheme, tensor }
            }
        } else {
            // float-quantized FP8
            let wt = get("weight").ok_or_else(|| missing("weight"))?;
            let (rows, cols) = (wt.1[0], wt.1[1]);
            let scales = to_f32(&m, Dtype::F32, &scale.2)?;
            let per_channel = scale.1 != [1];
            let tensor = QuantizedTensor {
                codec: if per_channel {
                    Codec::Fp8PerChannel(FloatKind::E4M3)
                } else {
                    Codec::Fp8PerTensor(FloatKind::E4M3)
                },
                rows,
                cols,
                codes: wt.2.clone(),
                row_bytes: cols,
                scales: if per_channel { scales.clone() } else { Vec::new() },
                zeros: Vec::new(),
                tensor_scale: if per_channel { 1.0 } else { scales[0] },
                double_quant: None,
            };
            LoadedWeight { module: m.clone(), scheme: Scheme::Fp8 { per_channel }, tensor }
        };
        weights.insert(m, w);
    }
    Ok(LoadedCheckpoint { config, weights, tensors })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_to_int32_order() {
        // compressed-tensors pack_to_int32: element i at bit i*bits of the row, little-endian words
        let b = pack_int32(|_, i| i as u32 + 1, 1, 8, 4);
        assert_eq!(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), 0x8765_4321);
        let b = pack_int32(|_, i| [0x80u32, 0x01, 0xff, 0x7f][i], 1, 4, 8);
        assert_eq!(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), 0x7fff_0180);
        // a width that crosses words: 6 bits, 32 elements = 6 words, round trip
        let codes: Vec<u32> = (0..64).map(|i| (i * 37 + 5) % 64).collect();
        let b = pack_int32(|l, i| codes[l * 32 + i], 2, 32, 6);
        assert_eq!(b.len(), 2 * 6 * 4);
        for l in 0..2 {
            for i in 0..32 {
                assert_eq!(unpack_int32(&b, l, 6, i, 6), codes[l * 32 + i]);
            }
        }
        // zero points packed along dim 0: [rows, groups] -> [rows/8, groups], word (w, g) holds rows 8w..8w+7
        let (rows, groups) = (16, 3);
        let z = |r: usize, g: usize| ((r + 3 * g) % 16) as u32;
        let t = transpose_words(&pack_int32(|g, r| z(r, g), groups, rows, 4), groups, rows / 8);
        for w in 0..rows / 8 {
            for g in 0..groups {
                let o = (w * groups + g) * 4;
                let word = u32::from_le_bytes([t[o], t[o + 1], t[o + 2], t[o + 3]]);
                for k in 0..8 {
                    assert_eq!((word >> (4 * k)) & 0xf, z(8 * w + k, g), "w {w} g {g} k {k}");
                }
            }
        }
    }

    #[test]
    fn mixed_precision_config() {
        let mut groups = BTreeMap::new();
        groups.insert(Scheme::Int4 { group: 128 }, vec!["model.layers.0.mlp.down_proj".to_string()]);
        groups.insert(Scheme::Fp8 { per_channel: false }, vec!["model.layers.0.self_attn.q_proj".to_string()]);
        let c = quantization_config(&groups, &["lm_head".to_string()]);
        assert_eq!(c["format"], "mixed-precision");
        let g0 = &c["config_groups"]["group_0"];
        assert_eq!(g0["format"], "pack-quantized");
        assert_eq!(g0["targets"], json!(["model.layers.0.mlp.down_proj"]));
        assert_eq!(c["config_groups"]["group_1"]["format"], "float-quantized");
        assert_eq!(c["config_groups"]["group_1"]["weights"]["strategy"], "tensor");
        assert_eq!(c["ignore"], json!(["lm_head"]));
        let single = quantization_config(&BTreeMap::from([(Scheme::Nvfp4, vec!["a".to_string()])]), &[]);
        assert_eq!(single["format"], "nvfp4-pack-quantized");
        assert_eq!(single["config_groups"]["group_0"]["targets"], json!(["Linear"]));
    }

    #[test]
    fn schemes_parse_and_map_formats() {
        assert_eq!(Scheme::parse("w4a16").unwrap(), Scheme::Int4 { group: 128 });
        assert_eq!(Scheme::parse("int4_g32").unwrap(), Scheme::Int4 { group: 32 });
        assert_eq!(Scheme::parse("fp8-channel").unwrap(), Scheme::Fp8 { per_channel: true });
        assert!(Scheme::parse("int3").unwrap_err().to_string().contains("NVFP4"));
        for s in ["INT4_G64", "INT8", "FP8", "FP8_CHANNEL", "NVFP4"] {
            assert_eq!(Scheme::parse(s).unwrap().name(), s);
        }
        assert_eq!(Scheme::from_format(Format::NVFP4), (Some(Scheme::Nvfp4), None));
        assert_eq!(Scheme::from_format(Format::BF16), (None, None));
        let (s, note) = Scheme::from_format(Format::MXFP4);
        assert_eq!(s, Some(Scheme::Nvfp4));
        assert!(note.unwrap().contains("MXFP4"));
    }
}
