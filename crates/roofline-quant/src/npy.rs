//! `.npy` input and output of 2-D weight matrices (rows = output channels), through the `npyz` crate.
//!
//! Reads float32, float16 and bfloat16 (little or big endian, C or Fortran order) and converts to f32; writes
//! float32. NumPy has no native bfloat16: `ml_dtypes.bfloat16` arrays are saved by `np.save` with the descr
//! `<V2` (two raw bytes), so a 2-byte raw (`V2`) array is read as bfloat16. Any other dtype or a rank other than
//! 2 is a clear error.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use npyz::{DType, TypeChar, WriterBuilder};
use thiserror::Error;

/// Errors of `.npy` I/O.
#[derive(Debug, Error)]
pub enum NpyError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A dtype other than float32, float16 or bfloat16.
    #[error("{path}: dtype {dtype} is not supported; use float32, float16 or bfloat16 (ml_dtypes, saved as V2)")]
    Dtype {
        /// The file.
        path: PathBuf,
        /// The dtype found.
        dtype: String,
    },
    /// Not a 2-D array.
    #[error("{path}: expected a 2-D array (rows = output channels, columns = input features), got shape {shape:?}")]
    Rank {
        /// The file.
        path: PathBuf,
        /// The shape found.
        shape: Vec<u64>,
    },
    /// The data is shorter than the header says.
    #[error("{path}: truncated data: {got} bytes, the header needs {want}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes present.
        got: usize,
        /// Bytes needed.
        want: usize,
    },
}

/// Element type of an `.npy` file that we read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NpyDtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16 (stored as 2 raw bytes).
    BF16,
}

/// A 2-D f32 matrix read from `.npy`, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// `rows * cols` values, row-major.
    pub data: Vec<f32>,
    /// The dtype the file held.
    pub dtype: NpyDtype,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> NpyError + '_ {
    move |source| NpyError::Io { path: path.to_path_buf(), source }
}

/// Reads a 2-D float32/float16/bfloat16 `.npy` file as f32.
pub fn read_matrix(path: &Path) -> Result<Matrix, NpyError> {
    let file = File::open(path).map_err(io(path))?;
    let npy = npyz::NpyFile::new(BufReader::new(file)).map_err(io(path))?;
    let shape = npy.shape().to_vec();
    let fortran = npy.order() == npyz::Order::Fortran;
    let dtype = npy.dtype();
    let (kind, big) = match &dtype {
        DType::Plain(t) => {
            let big = t.endianness() == npyz::Endianness::Big;
            match (t.type_char(), t.size_field()) {
                (TypeChar::Float, 4) => (NpyDtype::F32, big),
                (TypeChar::Float, 2) => (NpyDtype::F16, big),
                (TypeChar::RawData, 2) => (NpyDtype::BF16, big),
                _ => return Err(NpyError::Dtype { path: path.to_path_buf(), dtype: t.to_string() }),
            }
        }
        other => return Err(NpyError::Dtype { path: path.to_path_buf(), dtype: format!("{other:?}") }),
    };
    let [rows, cols] = shape[..] else {
        return Err(NpyError::Rank { path: path.to_path_buf(), shape });
    };
    let too_big = || NpyError::Rank { path: path.to_path_buf(), shape: shape.clone() };
    let rows = usize::try_from(rows).map_err(|_| too_big())?;
    let cols = usize::try_from(cols).map_err(|_| too_big())?;
    let n = rows.checked_mul(cols).ok_or_else(too_big)?;
    let width = if kind == NpyDtype::F32 { 4 } else { 2 };
    let want = n.checked_mul(width).ok_or_else(too_big)?;
    let mut bytes = Vec::with_capacity(want);
    npy.into_inner().take(want as u64).read_to_end(&mut bytes).map_err(io(path))?;
    if bytes.len() < want {
        return Err(NpyError::Truncated { path: path.to_path_buf(), got: bytes.len(), want });
    }
    let values: Vec<f32> = match kind {
        NpyDtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| {
                let b = [b[0], b[1], b[2], b[3]];
                if big {
                    f32::from_be_bytes(b)
                } else {
                    f32::from_le_bytes(b)
                }
            })
            .collect(),
        NpyDtype::F16 | NpyDtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| {
                let h = if big { u16::from_be_bytes([b[0], b[1]]) } else { u16::from_le_bytes([b[0], b[1]]) };
                if kind == NpyDtype::F16 {
                    half::f16::from_bits(h).to_f32()
                } else {
                    f32::from_bits(u32::from(h) << 16)
                }
            })
            .collect(),
    };
    let data = if fortran && rows > 1 && cols > 1 {
        // column-major on disk: element (r, c) is at c * rows + r
        let mut t = vec![0f32; n];
        for (i, v) in values.into_iter().enumerate() {
            t[(i % rows) * cols + i / rows] = v;
        }
        t
    } else {
        values
    };
    Ok(Matrix { rows, cols, data, dtype: kind })
}

/// Writes a `rows x cols` row-major f32 matrix as a float32 `.npy` file.
pub fn write_matrix(path: &Path, data: &[f32], rows: usize, cols: usize) -> Result<(), NpyError> {
    if rows.checked_mul(cols) != Some(data.len()) {
        return Err(NpyError::Rank { path: path.to_path_buf(), shape: vec![rows as u64, cols as u64] });
    }
    let file = File::create(path).map_err(io(path))?;
    let mut w = BufWriter::new(file);
    {
        let mut writer = npyz::WriteOptions::new()
            .default_dtype()
            .shape(&[rows as u64, cols as u64])
            .writer(&mut w)
            .begin_nd()
            .map_err(io(path))?;
        writer.extend(data.iter().copied()).map_err(io(path))?;
        writer.finish().map_err(io(path))?;
    }
    w.flush().map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built `.npy` (format 1.0) with the given descr, shape and raw data.
    fn npy_bytes(descr: &str, shape: &str, fortran: bool, data: &[u8]) -> Vec<u8> {
        let mut header = format!("{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}", {
            if fortran {
                "True"
            } else {
                "False"
            }
        });
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((header.len() as u16).to_le_bytes());
        out.extend(header.as_bytes());
        out.extend(data);
        out
    }

    #[test]
    fn reads_f32_f16_bf16_and_fortran_order_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let vals = [1.0f32, -2.5, 0.375, 3.0, 65504.0, -0.0];
        // float32, C order
        let p = dir.path().join("a.npy");
        let raw: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&p, npy_bytes("<f4", "(2, 3)", false, &raw)).unwrap();
        let m = read_matrix(&p).unwrap();
        assert_eq!((m.rows, m.cols, m.dtype), (2, 3, NpyDtype::F32));
        assert_eq!(m.data, vals);
        // float16 big endian
        let raw: Vec<u8> = vals.iter().flat_map(|v| half::f16::from_f32(*v).to_bits().to_be_bytes()).collect();
        std::fs::write(&p, npy_bytes(">f2", "(2, 3)", false, &raw)).unwrap();
        assert_eq!(read_matrix(&p).unwrap().data, vals);
        // bfloat16 as ml_dtypes saves it (V2)
        let raw: Vec<u8> = vals.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect();
        std::fs::write(&p, npy_bytes("|V2", "(3, 2)", false, &raw)).unwrap();
        let m = read_matrix(&p).unwrap();
        assert_eq!((m.rows, m.cols, m.dtype), (3, 2, NpyDtype::BF16));
        assert_eq!(m.data[..4], vals[..4]);
        // Fortran order: the file holds columns
        let col_major = [vals[0], vals[3], vals[1], vals[4], vals[2], vals[5]];
        let raw: Vec<u8> = col_major.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&p, npy_bytes("<f4", "(2, 3)", true, &raw)).unwrap();
        assert_eq!(read_matrix(&p).unwrap().data, vals);
        // write then read back, bit for bit
        let q = dir.path().join("b.npy");
        write_matrix(&q, &vals, 3, 2).unwrap();
        let m = read_matrix(&q).unwrap();
        assert_eq!((m.rows, m.cols), (3, 2));
        assert_eq!(m.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), vals.map(f32::to_bits).to_vec());
        // our writer's header is what NumPy writes
        let bytes = std::fs::read(&q).unwrap();
        assert!(
            String::from_utf8_lossy(&bytes[..128]).contains("'descr': '<f4', 'fortran_order': False, 'shape': (3, 2")
        );
    }

    #[test]
    fn clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.npy");
        std::fs::write(&p, npy_bytes("<i4", "(2, 2)", false, &[0; 16])).unwrap();
        let e = read_matrix(&p).unwrap_err().to_string();
        assert!(e.contains("dtype <i4 is not supported"), "{e}");
        std::fs::write(&p, npy_bytes("<f4", "(2, 2, 2)", false, &[0; 32])).unwrap();
        let e = read_matrix(&p).unwrap_err().to_string();
        assert!(e.contains("expected a 2-D array") && e.contains("[2, 2, 2]"), "{e}");
        std::fs::write(&p, npy_bytes("<f4", "(4,)", false, &[0; 16])).unwrap();
        assert!(matches!(read_matrix(&p), Err(NpyError::Rank { .. })));
        std::fs::write(&p, npy_bytes("<f4", "(2, 2)", false, &[0; 12])).unwrap();
        assert!(matches!(read_matrix(&p), Err(NpyError::Truncated { got: 12, want: 16, .. })));
        let e = read_matrix(&dir.path().join("missing.npy")).unwrap_err().to_string();
        assert!(e.contains("missing.npy"), "{e}");
        std::fs::write(&p, b"not an npy file").unwrap();
        assert!(matches!(read_matrix(&p), Err(NpyError::Io { .. })));
    }
}
