//! Kernel fusion in a prediction: an op that a serving engine runs inside another kernel (an RMSNorm in the
//! next GEMM's prologue, a residual add in the previous GEMM's epilogue, RoPE in the attention kernel) keeps
//! its bytes and FLOPs at the roofs but pays no launch overhead or memory start-up latency of its own.

use super::{ModelReport, OpKind, OpRow};

/// The op that does a fusable op's work in a fused engine: the next linear for a norm, the linear or
/// experts before it for a residual add, the attention after it for RoPE; `None` for every other op (or
/// when no such neighbour exists).
fn standard_host(ops: &[OpRow], i: usize) -> Option<usize> {
    let op = &ops[i];
    let is_gemm = |o: &OpRow| matches!(o.kind, OpKind::Linear | OpKind::Experts);
    match (op.kind, op.name.as_str()) {
        (OpKind::Norm, _) => ops.iter().enumerate().skip(i + 1).find(|(_, o)| is_gemm(o)).map(|(j, _)| j),
        (OpKind::Elementwise, "residual_add") => (0..i).rev().find(|&j| is_gemm(&ops[j])),
        (OpKind::Elementwise, "rotary_emb") => {
            ops.iter().enumerate().skip(i + 1).find(|(_, o)| o.kind == OpKind::Attention).map(|(j, _)| j)
        }
        _ => None,
    }
}

impl OpRow {
    /// Marks this op as running inside `host`: its prediction drops the fixed costs (launch overhead,
    /// memory start-up latency) and keeps `max(bytes / bandwidth, FLOPs / peak)`.
    pub fn fuse_into(&mut self, host: &str) {
        self.prediction = self.prediction.without_fixed_costs();
        self.total_time_us = self.prediction.time_us * self.count as f64;
        self.fused_into = Some(host.to_string());
    }
}

impl ModelReport {
    /// Applies the fusions serving engines make (see `standard_host`) and updates the totals.
    pub fn fuse_standard(&mut self) {
        let hosts: Vec<Option<usize>> = (0..self.ops.len()).map(|i| standard_host(&self.ops, i)).collect();
        for (i, host) in hosts.into_iter().enumerate() {
            if let Some(h) = host {
                let name = self.ops[h].name.clone();
                self.ops[i].fuse_into(&name);
            }
        }
        self.retotal();
    }

    /// Marks every op named `name` as running inside `host` (as a measured engine reports it) and updates
    /// the totals; false when the report has no such op.
    pub fn fuse(&mut self, name: &str, host: &str) -> bool {
        let mut any = false;
        for op in self.ops.iter_mut().filter(|o| o.name == name) {
            op.fuse_into(host);
            any = true;
        }
        if any {
            self.retotal();
        }
        any
    }

    /// [`ModelReport::fuse`] for only the rows named `name` whose nearest linear (or experts) op before them
    /// is named `after`: a MoE step fuses the attention's residual add into `o_proj` while the FFN's runs in
    /// the expert combine kernel. False when no row matches.
    pub fn fuse_after(&mut self, name: &str, after: &str, host: &str) -> bool {
        let is_gemm = |o: &OpRow| matches!(o.kind, OpKind::Linear | OpKind::Experts);
        let rows: Vec<usize> = (0..self.ops.len())
            .filter(|&i| self.ops[i].name == name)
            .filter(|&i| (0..i).rev().find(|&j| is_gemm(&self.ops[j])).is_some_and(|j| self.ops[j].name == after))
            .collect();
        for &i in &rows {
            self.ops[i].fuse_into(host);
        }
        if !rows.is_empty() {
            self.retotal();
        }
        !rows.is_empty()
    }

    /// Recomputes the time totals from the ops (the step's tokens stay what they were).
    fn retotal(&mut self) {
        let t = &mut self.totals;
        let old = t.time_us;
        let time_us: f64 = self.ops.iter().map(|o| o.total_time_us).sum();
        // Layers: the instance count of each layer group (every op of a group runs once per layer of it).
        let mut groups: Vec<(&str, u64)> = Vec::new();
        for o in self.ops.iter().filter(|o| o.group != "model") {
            if !groups.iter().any(|(g, _)| *g == o.group) {
                groups.push((&o.group, o.count));
            }
        }
        let n_layers: u64 = groups.iter().map(|(_, c)| c).sum();
        let layer_us: f64 = self.ops.iter().filter(|o| o.group != "model").map(|o| o.total_time_us).sum();
        let layers = if n_layers > 0 { layer_us / n_layers as f64 } else { 0.0 };
        // tokens/s = step tokens / time: the step tokens are tokens_per_s x old time.
        let tokens = t.tokens_per_s * old * 1e-6;
        t.time_us = time_us;
        t.time_per_layer_us = layers;
        t.tokens_per_s = if time_us > 0.0 { tokens / (time_us * 1e-6) } else { 0.0 };
        t.ttft_ms = t.ttft_ms.map(|_| time_us / 1e3);
        t.comm_share = if time_us > 0.0 { t.comm_time_us / time_us } else { 0.0 };
    }
}
