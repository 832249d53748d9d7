//! Embeds every `data/hardware/*.toml` and `data/models/*.json` preset into the library as static tables,
//! so presets need no file at run time and a new preset is a new data file, nothing else.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    embed("hardware", "toml", "hardware_presets.rs");
    embed("models", "json", "model_presets.rs");
}

/// Writes `OUT_DIR/<out>`: a `&[(file name, contents)]` of every `data/<sub>/*.<ext>`.
fn embed(sub: &str, ext: &str, out_name: &str) {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let dir = manifest.join("../../data").join(sub);
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    let mut out = String::from("&[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let abs = f.canonicalize().expect("canonical path");
        let name = f.file_name().and_then(|n| n.to_str()).expect("utf-8 file name");
        writeln!(out, "    ({name:?}, include_str!({:?})),", abs.display().to_string()).expect("write");
    }
    out.push_str("]\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join(out_name);
    std::fs::write(dest, out).expect("write embedded presets");
}
