//! Embeds every `data/hardware/*.toml` preset into the library as a static table, so presets need no file
//! at run time and a new preset is a new TOML file, nothing else.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let dir = manifest.join("../../data/hardware");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
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
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("hardware_presets.rs");
    std::fs::write(dest, out).expect("write hardware_presets.rs");
}
