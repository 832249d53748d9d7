//! Rules of the CUDA sources that no compiler checks (no GPU needed).
//!
//! Programmatic dependent launch: a kernel may start while the previous kernel of the stream still runs, and
//! reads what that kernel wrote only after `griddepcontrol.wait` (`pdl_wait`). ptxas takes read-only loads
//! (`ld.global.nc`: `__ldg`, and what nvcc makes of loads through `const __restrict__` pointers) as loads of
//! memory no grid writes while the kernel runs, and may schedule them above the wait: session 28 found an
//! x-in-registers GEMV's x loads ahead of the wait (ACQBULK) in its SASS, and a model-bench LM head that had
//! read the residual stream before the final norm wrote it. So the read-only path (`__ldg`, and the inline
//! `ld.global.nc` of `ld_weights`) is kept for what no kernel writes (weight codes, their scales and zero
//! points), and the buffers earlier kernels write are read with `ld_dep` or plain loads through pointers that
//! are not `__restrict__`.

use std::path::PathBuf;

/// Every `.cu` / `.cuh` source of the crate, as (file name, text).
fn sources() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/kernels");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "cu" || x == "cuh"))
        .map(|p| {
            let name = p.file_name().expect("a file name").to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        })
        .collect();
    out.sort();
    out
}

/// The text inside the parentheses that open at byte `open` of `s` (`s[open] == '('`).
fn parenthesized(s: &str, open: usize) -> &str {
    let mut depth = 0;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &s[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    &s[open + 1..]
}

/// Code without its `//` comments (the sources use no block comments).
fn code(text: &str) -> String {
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_read_only_path_reads_only_weights_and_their_tables() {
    // `ldg_bytes` (weight_only_xreg.cu) loads through its `p`, a pointer into the codes or scale tables.
    let weight_tables = ["scales", "zeros", "meta"];
    let ldg_bytes_forms = ["(const uint4*)p", "(const uint2*)p", "(const u32*)p", "(const u16*)p", "p"];
    let mut seen = 0;
    let mut wrong = Vec::new();
    for (name, text) in sources() {
        let text = code(&text);
        for (at, _) in text.match_indices("__ldg(") {
            seen += 1;
            let arg = parenthesized(&text, at + "__ldg".len()).trim();
            if !(weight_tables.iter().any(|t| arg.contains(t)) || ldg_bytes_forms.contains(&arg)) {
                wrong.push(format!("{name}: __ldg({arg})"));
            }
        }
    }
    assert!(seen > 10, "the scan found only {seen} __ldg calls: did the sources move?");
    assert!(
        wrong.is_empty(),
        "__ldg on something an earlier kernel may write (use ld_dep after pdl_wait):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn read_only_asm_loads_are_weight_loads() {
    // `ld.global.nc` written out in inline PTX: only the weight loaders of wo_prims.cuh, and those only on
    // weight-code pointers (`w`, `wt`, `wl`: the codes of a row, a tile, a lane); and the read-stream
    // calibration's loader (read_stream.cu's `ld_stream`), only on its `src`, a buffer the host fills and no
    // kernel writes.
    let mut wrong = Vec::new();
    let mut calls = 0;
    for (name, text) in sources() {
        let text = code(&text);
        for (at, _) in text.match_indices("ld.global.nc") {
            let function = text[..at].rfind("__device__").map(|i| &text[i..at]).unwrap_or("");
            let weights = name == "wo_prims.cuh" && function.contains("ld_weights");
            let calibration = name == "read_stream.cu" && function.contains("ld_stream");
            if !(weights || calibration) {
                wrong.push(format!("{name}: ld.global.nc outside ld_weights"));
            }
        }
        for (at, _) in text.match_indices("ld_stream(") {
            if text[..at].ends_with("uint4 ") {
                continue; // the definition
            }
            let arg = parenthesized(&text, at + "ld_stream".len()).trim();
            if name != "read_stream.cu" || !arg.starts_with("src") {
                wrong.push(format!("{name}: ld_stream({arg})"));
            }
        }
        for call in ["ld_weights(", "ld_weights_l1("] {
            for (at, _) in text.match_indices(call) {
                if text[..at].ends_with("uint4 ") {
                    continue; // the definition
                }
                calls += 1;
                let arg = parenthesized(&text, at + call.len() - 1).trim();
                let base = arg.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or("");
                if !["w", "wt", "wl"].contains(&base) {
                    wrong.push(format!("{name}: {call}{arg})"));
                }
            }
        }
    }
    assert!(calls >= 5, "the scan found only {calls} weight loads: did the sources move?");
    assert!(wrong.is_empty(), "read-only loads of what may not be weights:\n{}", wrong.join("\n"));
}

#[test]
fn buffers_earlier_kernels_write_are_not_restrict_const() {
    // Parameter names of the activations (FP16), partial sums and routing tables one kernel of a step writes and
    // the next reads. (The KV cache pointers of the cluster attention stay `const __restrict__` where they read,
    // before the wait and by design, only rows no kernel of the step writes.)
    let produced = ["x", "delta", "qkv", "part", "gu", "logits", "wts", "rows", "shared", "h"];
    let mut wrong = Vec::new();
    for (name, text) in sources() {
        let text = code(&text);
        for (at, _) in text.match_indices("__restrict__") {
            let before = &text[..at];
            let decl_start = before.rfind(['(', ',', ';', '{']).map_or(0, |i| i + 1);
            let decl = before[decl_start..].trim();
            let param = text[at + "__restrict__".len()..]
                .trim_start()
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("");
            // Weight codes and tables (uint4, u8) are never an earlier kernel's output (ffn_fused's `gu` is
            // gate_up's codes).
            let weights = decl.split_whitespace().nth(1).is_some_and(|t| t.starts_with("uint4") || t.starts_with("u8"));
            if decl.starts_with("const") && !weights && produced.contains(&param) {
                wrong.push(format!("{name}: {decl} __restrict__ {param}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "const __restrict__ on a buffer an earlier kernel writes (its loads may run before pdl_wait):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scan_sees_what_it_rejects() {
    let text = "__global__ void k(const u16* __restrict__ x, const u8* __restrict__ scales) { v = __ldg(x + i); }";
    let at = text.find("__ldg(").expect("an __ldg");
    assert_eq!(parenthesized(text, at + "__ldg".len()), "x + i");
    assert_eq!(code("a; // b\nc"), "a; \nc");
}
