//! Which CUDA sources this build carries. The kernels are compiled into the binary (`include_str!`) and
//! built by NVRTC at run time, so a binary copied to a GPU machine runs the sources it was built from, not
//! the ones beside it: [`kernel_sources_hash`] names them, printed by `roofline --version` and in every
//! weight-only measurement's kernel line, so that a table can be traced to its kernels (and a stale binary
//! caught: session 25 timed an experiment's switch on a binary that predated the experiment).

use std::sync::OnceLock;

/// `(name, text)` of each named file of `src/kernels`.
macro_rules! kernel_files {
    ($($name:literal),* $(,)?) => { [$(($name, include_str!(concat!("kernels/", $name)))),*] };
}

/// Every file of `src/kernels`, in name order (a unit test checks the list against the folder).
const SOURCES: [(&str, &str); 14] = kernel_files![
    "attn_cluster.cuh",
    "attn_qkv.cu",
    "bulk_stream.cu",
    "decode_ops.cu",
    "ffn_fused.cu",
    "read_stream.cu",
    "weight_only_gemv.cu",
    "weight_only_mma.cu",
    "weight_only_xreg.cu",
    "wo_common.cuh",
    "wo_prims.cuh",
    "wo_ring.cu",
    "wo_splitk.cuh",
    "wo_stream.cuh",
];

/// FNV-1a (64-bit) over every kernel source's name and text, as 16 hex digits: equal for two binaries
/// exactly when they carry the same CUDA sources. `ROOFLINE_NVRTC_EXTRA` options are not part of it.
pub fn kernel_sources_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| format!("{:016x}", fnv1a(SOURCES.iter().flat_map(|(n, s)| [n.as_bytes(), s.as_bytes()]))))
}

fn fnv1a<'a>(parts: impl Iterator<Item = &'a [u8]>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain(&[0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_file_is_hashed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/kernels");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .expect("kernels folder")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let listed: Vec<&str> = SOURCES.iter().map(|(n, _)| *n).collect();
        assert_eq!(files, listed, "SOURCES must list every file of src/kernels");
        for (name, text) in SOURCES {
            let on_disk = std::fs::read_to_string(dir.join(name)).expect("kernel file");
            assert_eq!(on_disk, text, "{name}");
        }
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let h = kernel_sources_hash();
        assert_eq!(h.len(), 16);
        assert!(h.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(h, kernel_sources_hash());
        // FNV-1a's published test vector, and a change of one byte or of where a file ends changes it.
        assert_eq!(fnv1a([b"a".as_slice()].into_iter()), fnv1a_raw(b"a\0"));
        assert_ne!(fnv1a([b"ab".as_slice(), b"c"].into_iter()), fnv1a([b"a".as_slice(), b"bc"].into_iter()));
        assert_eq!(fnv1a_raw(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_raw(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    fn fnv1a_raw(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    }
}
