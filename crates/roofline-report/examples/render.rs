//! Renders the seeds' decode (1x4096x4096) and prefill (2048x4096x4096) examples on `seed-gb10`, all formats.
//! Usage: `cargo run -p roofline-report --example render -- OUT_DIR`.

use roofline_core::{predict_report, DualPoint, Gemm, HardwareProfile, PredictRequest};
use roofline_report::{roofline_png, roofline_svg, ChartSpec};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let hw = HardwareProfile::preset("seed-gb10")?;
    for (name, m) in [("decode", 1), ("prefill", 2048)] {
        let req = PredictRequest { m, n: 4096, k: 4096, batch: 1, schemes: vec![] };
        let rep = predict_report(&req, &hw)?;
        let points = rep
            .rows
            .iter()
            .map(|r| {
                Ok(DualPoint {
                    label: r.label.clone(),
                    gemm: Gemm::batched(1, m, 4096, 4096, true, r.scheme)?,
                    prediction: r.prediction.clone(),
                    measurement: None,
                })
            })
            .collect::<Result<Vec<_>, roofline_core::CoreError>>()?;
        let mut spec = ChartSpec::new(hw.clone(), points);
        spec.title = Some(format!("{name} {m}x4096x4096 on {} (source: {})", hw.name, hw.source));
        std::fs::write(format!("{dir}/{name}.svg"), roofline_svg(&spec)?)?;
        roofline_png(&spec, std::path::Path::new(&format!("{dir}/{name}.png")))?;
    }
    Ok(())
}
