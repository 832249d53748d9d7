//! PNG rendering with plotters' bitmap backend and the bundled DejaVu Sans (no system fonts needed).

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::{ChartSpec, ReportError};

static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

fn err<E: std::fmt::Display>(e: E) -> ReportError {
    ReportError::Draw(e.to_string())
}

/// Renders the roofline chart of `spec` to a PNG file at `path`.
pub fn roofline_png(spec: &ChartSpec, path: &std::path::Path) -> Result<(), ReportError> {
    let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    let hw = &spec.hardware;
    let roofs: Vec<_> = hw.peak_tflops.iter().collect();
    if roofs.is_empty() {
        return Err(ReportError::Empty(format!("hardware {} has no compute peaks", hw.key)));
    }
    let bw_tb = hw.memory_bandwidth_gb_s / 1000.0;
    let ymax = roofs.iter().map(|(_, p)| *p).fold(1.0, f64::max) * 2.0;
    let root = BitMapBackend::new(path, (spec.width, spec.height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let title = spec.title.clone().unwrap_or_else(|| format!("{} ({})", hw.name, hw.source));
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .margin_right(45)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((0.1f64..100000f64).log_scale(), (bw_tb * 0.05..ymax).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("Arithmetic intensity (FLOP/byte)")
        .y_desc("Throughput (TFLOP/s)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (i, (class, peak)) in roofs.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let ridge = peak / bw_tb;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.1, 0.1 * bw_tb), (ridge, *peak), (100000.0, *peak)],
                color.stroke_width(2),
            )))
            .map_err(err)?
            .label(format!("{} {peak} TFLOP/s, ridge {ridge:.0}", class.name()))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(std::iter::once(Circle::new((ridge, *peak), 4, color.filled()))).map_err(err)?;
    }
    let best = spec
        .points
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.prediction.time_us.total_cmp(&b.1.prediction.time_us))
        .map(|(i, _)| i);
    for (i, p) in spec.points.iter().enumerate() {
        let pr = &p.prediction;
        let xy = (pr.arithmetic_intensity, pr.flops as f64 / pr.time_us / 1e6);
        let (r, w) = if best == Some(i) { (8, 3) } else { (5, 1) };
        chart.draw_series(std::iter::once(Circle::new(xy, r, BLACK.stroke_width(w)))).map_err(err)?;
        // Points that land on the same spot share one label, so coincident formats do not overprint.
        let key = |q: &crate::DualPoint| {
            let t = q.prediction.flops as f64 / q.prediction.time_us / 1e6;
            ((q.prediction.arithmetic_intensity.log10() * 10.0).round() as i64, (t.log10() * 10.0).round() as i64)
        };
        let same: Vec<&str> = spec.points.iter().filter(|q| key(q) == key(p)).map(|q| q.label.as_str()).collect();
        if spec.points.iter().position(|q| key(q) == key(p)) == Some(i) {
            let groups_before = spec.points[..i]
                .iter()
                .enumerate()
                .filter(|(j, q)| spec.points.iter().position(|o| key(o) == key(q)) == Some(*j))
                .count() as i32;
            let dy = if groups_before % 2 == 0 { -18 } else { 8 };
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at(xy) + Text::new(short_label(&same), (10, dy), ("sans-serif", 12).into_font()),
                ))
                .map_err(err)?;
        }
        if let Some(m) = &p.measurement {
            let my = (xy.0, m.tflops);
            chart.draw_series(std::iter::once(PathElement::new(vec![xy, my], BLACK.mix(0.5)))).map_err(err)?;
            chart.draw_series(std::iter::once(Circle::new(my, 5, BLACK.filled()))).map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Joins up to three labels; more become `+N`.
fn short_label(labels: &[&str]) -> String {
    let mut s = labels.iter().take(3).copied().collect::<Vec<_>>().join(", ");
    if labels.len() > 3 {
        s.push_str(&format!(" +{}", labels.len() - 3));
    }
    s
}
