//! Plain-text and CSV renderings of a [`ModelReport`] (the CLI prints these; the server returns JSON).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::ModelReport;

fn header(r: &ModelReport) -> String {
    let q = &r.request;
    format!(
        "{} on {} [{}]: {} B={} S={} TP={}; weights {}, activations {}, KV {}{}\n",
        r.model,
        r.hardware_name,
        r.hardware,
        q.phase,
        q.batch,
        q.seq,
        q.tp,
        q.weights,
        q.activations,
        q.kv,
        if q.fused { "; fused engine (norms, residual adds, RoPE inside their neighbours)" } else { "" }
    )
}

/// One row per op (per layer group), with its share of the step.
pub fn render_by_op(r: &ModelReport) -> String {
    let mut s = header(r);
    let _ = writeln!(
        s,
        "{:<28} {:<20} {:>5} {:>10} {:>10} {:>9} {:>8} {:>10} {:>11} {:>6}  runs in",
        "op", "group", "x", "FLOPs", "bytes", "AI", "bound", "time_us", "total_us", "share"
    );
    for o in &r.ops {
        let p = &o.prediction;
        let _ = writeln!(
            s,
            "{:<28} {:<20} {:>5} {:>10.3e} {:>10.3e} {:>9.2} {:>8} {:>10.2} {:>11.1} {:>5.1}%  {}",
            o.name,
            o.group,
            o.count,
            p.flops as f64,
            p.bytes as f64,
            p.arithmetic_intensity,
            p.bound.as_str(),
            p.time_us,
            o.total_time_us,
            100.0 * o.total_time_us / r.totals.time_us,
            o.fused_into.as_deref().unwrap_or("")
        );
    }
    s.push_str(&render_totals(r));
    s
}

/// Time per layer group and op kind.
pub fn render_by_layer(r: &ModelReport) -> String {
    let mut s = header(r);
    let mut groups: Vec<(String, u64, f64, BTreeMap<String, f64>)> = Vec::new();
    for o in &r.ops {
        if groups.last().is_none_or(|g| g.0 != o.group) {
            groups.push((o.group.clone(), o.count, 0.0, BTreeMap::new()));
        }
        if let Some(g) = groups.last_mut() {
            g.2 += o.prediction.time_us;
            *g.3.entry(format!("{:?}", o.kind).to_lowercase()).or_default() += o.prediction.time_us;
        }
    }
    let _ = writeln!(
        s,
        "{:<22} {:>7} {:>14} {:>12}  breakdown per layer (us)",
        "group", "layers", "us / layer", "total_us"
    );
    for (g, count, per, kinds) in groups {
        let parts: Vec<String> = kinds.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
        let _ = writeln!(s, "{:<22} {:>7} {:>14.2} {:>12.1}  {}", g, count, per, per * count as f64, parts.join(", "));
    }
    s.push_str(&render_totals(r));
    s
}

/// The totals block.
pub fn render_totals(r: &ModelReport) -> String {
    let t = &r.totals;
    let mut s = String::new();
    let _ = writeln!(s, "step time        {:.1} us ({:.2} us per layer)", t.time_us, t.time_per_layer_us);
    match t.ttft_ms {
        Some(ms) => {
            let _ = writeln!(s, "time to 1st tok  {ms:.2} ms ({:.0} prompt tokens/s)", t.tokens_per_s);
        }
        None => {
            let _ = writeln!(s, "decode           {:.1} tokens/s", t.tokens_per_s);
        }
    }
    let _ = writeln!(
        s,
        "params           {:.3e}; weights {:.2} GB (read this step {:.2} GB)",
        t.params as f64,
        t.weight_bytes as f64 / 1e9,
        t.weight_bytes_read as f64 / 1e9
    );
    let _ = writeln!(
        s,
        "KV cache         {} B/token; {:.2} GB at S={} x B={}",
        t.kv_bytes_per_token,
        t.kv_bytes_at_seq as f64 / 1e9,
        r.request.seq,
        r.request.batch
    );
    let fit = match (t.fits, t.headroom_gb, t.hardware_memory_gb) {
        (Some(true), Some(h), Some(m)) => format!("fits in {m} GB ({h:.1} GB free)"),
        (Some(false), Some(h), Some(m)) => format!("DOES NOT FIT in {m} GB (short by {:.1} GB)", -h),
        _ => "hardware memory unknown".to_string(),
    };
    let _ = writeln!(s, "memory per GPU   {:.2} GB: {fit}", t.memory_per_gpu_gb);
    let _ = writeln!(
        s,
        "KV crossover     S_cross = {:.0} tokens at B={} (KV reads overtake weight reads; {:.0} against all weights incl. embedding)",
        t.s_cross_tokens, r.request.batch, t.s_cross_all_weights_tokens
    );
    if r.request.tp > 1 {
        let _ = writeln!(s, "communication    {:.1} us ({:.1}% of the step)", t.comm_time_us, 100.0 * t.comm_share);
    }
    s
}

/// One CSV record per op.
pub fn to_csv(r: &ModelReport) -> String {
    let mut s =
        String::from("op,group,kind,count,flops,bytes,ai,bound,time_us,total_time_us,weight_bytes,fused_into\n");
    for o in &r.ops {
        let p = &o.prediction;
        let _ = writeln!(
            s,
            "{},{},{:?},{},{},{},{},{},{},{},{},{}",
            o.name.replace(',', ";"),
            o.group,
            o.kind,
            o.count,
            p.flops,
            p.bytes,
            p.arithmetic_intensity,
            p.bound.as_str(),
            p.time_us,
            o.total_time_us,
            o.weight_bytes,
            o.fused_into.as_deref().unwrap_or("")
        );
    }
    s
}
