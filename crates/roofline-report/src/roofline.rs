//! Layout of the log-log roofline chart: roofs, ridge points, points and decluttered labels.

use roofline_core::{ComputeClass, DualPoint};
use serde::Serialize;

use crate::place::{around, BoxF, Placer};
use crate::scene::{Anchor, Item, Rgb, Scene, BLACK, GREY, GRID, WHITE};
use crate::text::{has_glyph, text_width};
use crate::{ChartSpec, ReportError};

/// Roof colours (colour-blind friendly, Okabe-Ito then Tableau).
pub(crate) const PALETTE: [Rgb; 10] = [
    Rgb(0, 114, 178),
    Rgb(213, 94, 0),
    Rgb(0, 158, 115),
    Rgb(204, 121, 167),
    Rgb(230, 159, 0),
    Rgb(86, 180, 233),
    Rgb(148, 103, 189),
    Rgb(140, 86, 75),
    Rgb(188, 189, 34),
    Rgb(127, 127, 127),
];
const MEM: Rgb = Rgb(70, 70, 70);
const MINOR: Rgb = Rgb(242, 242, 242);
const LABEL: f64 = 11.0;
const PANEL: f64 = 250.0;
const MAX_TEXT_LABELS: usize = 12;
const MAX_LABEL_W: f64 = 210.0;

/// What a label names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LabelKind {
    /// A compute roof (format and peak).
    Roof,
    /// A ridge point.
    Ridge,
    /// The memory roof (bandwidth).
    Memory,
    /// A point or a group of coincident points (names, or a number in the key).
    Point,
}

/// A label drawn inside the plot area, with its box in pixels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelBox {
    /// What it labels.
    pub kind: LabelKind,
    /// Its text (lines joined by newlines).
    pub text: String,
    /// Its box.
    pub bbox: BoxF,
    /// Leader line from the labelled mark to the box, when the label sits away from it.
    pub leader: Option<((f64, f64), (f64, f64))>,
}

/// The computed roofline chart: the scene to draw and the labels placed in the plot area.
#[derive(Debug, Clone)]
pub struct RooflineLayout {
    /// What to draw.
    pub scene: Scene,
    /// Labels inside the plot area (none overlaps another).
    pub labels: Vec<LabelBox>,
    /// Whether some points are numbered (their names listed in the key beside the plot) because names did not fit.
    pub numbered: bool,
    /// Number of points drawn (points with no positive FLOPs or time cannot sit on log axes and are skipped).
    pub points_drawn: usize,
}

fn line_h(size: f64) -> f64 {
    (size * 1.25).round()
}

/// Wraps `names` (joined by ", ") into lines no wider than `max_w` at `size`.
pub(crate) fn wrap(names: &[String], size: f64, max_w: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for (i, n) in names.iter().enumerate() {
        let piece = if i + 1 < names.len() { format!("{n},") } else { n.clone() };
        let cand = if cur.is_empty() { piece.clone() } else { format!("{cur} {piece}") };
        if !cur.is_empty() && text_width(&cand, size) > max_w {
            lines.push(std::mem::take(&mut cur));
            cur = piece;
        } else {
            cur = cand;
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// Text lines placed with their top-left corner at the box's corner.
fn text_block(b: &BoxF, lines: &[String], size: f64, color: Rgb, class: &'static str) -> Vec<Item> {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| Item::Text {
            x: b.x + 1.0,
            y: b.y + 1.0 + size * 0.93 + i as f64 * line_h(size),
            text: l.clone(),
            size,
            color,
            anchor: Anchor::Start,
            vertical: false,
            class,
        })
        .collect()
}

fn block_size(lines: &[String], size: f64) -> (f64, f64) {
    let w = lines.iter().map(|l| text_width(l, size)).fold(0.0, f64::max);
    (w + 2.0, lines.len() as f64 * line_h(size) + 2.0)
}

fn fmt_tick(v: f64) -> String {
    if v >= 1e4 {
        format!("{}k", v / 1e3)
    } else if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let d = (-v.log10()).round() as usize;
        format!("{v:.d$}")
    }
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The roofs of the hardware, equal peaks merged (`FP16/BF16`).
pub(crate) struct RoofGroup {
    pub classes: Vec<ComputeClass>,
    pub peak: f64,
    pub color: Rgb,
}

pub(crate) fn roof_groups(spec: &ChartSpec) -> Vec<RoofGroup> {
    let mut groups: Vec<RoofGroup> = Vec::new();
    for (c, p) in spec.hardware.peak_tflops.iter() {
        if !(p.is_finite() && p > 0.0) {
            continue;
        }
        if let Some(g) = groups.iter_mut().find(|g| (g.peak - p).abs() <= 0.005 * p) {
            g.classes.push(c);
        } else {
            let color = PALETTE[groups.len() % PALETTE.len()];
            groups.push(RoofGroup { classes: vec![c], peak: p, color });
        }
    }
    groups
}

impl RoofGroup {
    pub fn name(&self) -> String {
        self.classes.iter().map(|c| c.name()).collect::<Vec<_>>().join("/")
    }
}

/// Indices of the best points of each shape (fastest, ties included; measured times when every point of the shape is measured),
/// for shapes with at least two points.
pub(crate) fn best_points(points: &[DualPoint]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for p in points {
        let key = (p.gemm.m, p.gemm.n, p.gemm.k, p.gemm.batch);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let members: Vec<usize> = (0..points.len())
            .filter(|&i| {
                let g = &points[i].gemm;
                (g.m, g.n, g.k, g.batch) == key
            })
            .collect();
        if members.len() < 2 {
            continue;
        }
        let all_measured = members.iter().all(|&i| points[i].measurement.is_some());
        let t = |i: usize| match (&points[i].measurement, all_measured) {
            (Some(m), true) => m.time_us,
            _ => points[i].prediction.time_us,
        };
        // Ties (within 0.1%) are all best.
        let tmin = members.iter().map(|&i| t(i)).fold(f64::INFINITY, f64::min);
        out.extend(members.iter().copied().filter(|&i| t(i) <= tmin * 1.001));
    }
    out
}

/// Point names as drawn: the label, with the shape appended (`FP16 1x4096x4096`) when the same label occurs
/// with several shapes (a sweep's points), so every name on the chart is unambiguous.
pub(crate) fn display_names(points: &[DualPoint]) -> Vec<String> {
    let shape = |p: &DualPoint| (p.gemm.m, p.gemm.n, p.gemm.k, p.gemm.batch);
    points
        .iter()
        .map(|p| {
            let ambiguous = points.iter().any(|q| q.label == p.label && shape(q) != shape(p));
            if ambiguous {
                let g = &p.gemm;
                let b = if g.batch > 1 { format!("x{}", g.batch) } else { String::new() };
                format!("{} {}x{}x{}{b}", p.label, g.m, g.n, g.k)
            } else {
                p.label.clone()
            }
        })
        .collect()
}

fn star() -> &'static str {
    if has_glyph('★') {
        "★ "
    } else {
        "best: "
    }
}

/// A pixel position.
type Px = (f64, f64);

/// A memory slope's label: `text` beside the line `d`, at the first free spot of `fractions` along it (above
/// and left of the line, then below and right), in the memory roofs' colour; `None` where nothing is free.
fn slope_label(
    placer: &mut Placer,
    d: (Px, Px),
    fractions: &[f64],
    text: String,
    class: &'static str,
) -> Option<(Vec<Item>, LabelBox)> {
    let lines = vec![text.clone()];
    let (bw_, bh) = block_size(&lines, LABEL);
    let cands: Vec<BoxF> = fractions
        .iter()
        .flat_map(|f| {
            let (x, y) = (d.0 .0 + (d.1 .0 - d.0 .0) * f, d.0 .1 + (d.1 .1 - d.0 .1) * f);
            [BoxF { x: x - bw_ - 4.0, y: y - bh - 4.0, w: bw_, h: bh }, BoxF { x: x + 6.0, y: y + 4.0, w: bw_, h: bh }]
        })
        .collect();
    let (_, bx) = placer.place(&cands)?;
    Some((
        text_block(&bx, &lines, LABEL, MEM, class),
        LabelBox { kind: LabelKind::Memory, text, bbox: bx, leader: None },
    ))
}

struct Cluster {
    members: Vec<usize>,
    names: Vec<String>,
    anchor: (f64, f64),
    best: bool,
}

/// Computes the roofline chart of `spec`.
pub fn roofline_layout(spec: &ChartSpec) -> Result<RooflineLayout, ReportError> {
    let hw = &spec.hardware;
    let groups = roof_groups(spec);
    if groups.is_empty() {
        return Err(ReportError::Empty(format!("hardware {} has no compute peaks", hw.key)));
    }
    let bw_tb = hw.memory_bandwidth_gb_s / 1000.0;
    if !(bw_tb.is_finite() && bw_tb > 0.0) {
        return Err(ReportError::Empty(format!("hardware {} has no memory bandwidth", hw.key)));
    }
    // The read-stream roof, TB/s, where the profile measured one.
    let read_tb = hw.read_bandwidth_gb_s.map(|r| r / 1000.0).filter(|r| r.is_finite() && *r > 0.0);
    // Points that can sit on log axes.
    let pts: Vec<(usize, f64, f64, Option<f64>)> = spec
        .points
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let pr = &p.prediction;
            let tf = pr.flops as f64 / pr.time_us / 1e6;
            let ok = pr.arithmetic_intensity.is_finite() && pr.arithmetic_intensity > 0.0 && tf.is_finite() && tf > 0.0;
            let m = p.measurement.as_ref().map(|m| m.tflops).filter(|t| t.is_finite() && *t > 0.0);
            ok.then_some((i, pr.arithmetic_intensity, tf, m))
        })
        .collect();
    let ridges: Vec<f64> = groups.iter().map(|g| g.peak / bw_tb).collect();
    let min_ridge = ridges.iter().copied().fold(f64::INFINITY, f64::min);
    let max_ridge = ridges.iter().copied().fold(0.0, f64::max);
    let max_peak = groups.iter().map(|g| g.peak).fold(0.0, f64::max);
    // Axes: every point, every roof and a decade of memory slope below the lowest ridge.
    let min_peak = groups.iter().map(|g| g.peak).fold(f64::INFINITY, f64::min);
    let ai_min = pts.iter().map(|p| p.1).fold(min_ridge / 10.0, f64::min);
    let ai_max = pts.iter().map(|p| p.1).fold(max_ridge, f64::max);
    let tf_min = pts.iter().flat_map(|p| [Some(p.2), p.3]).flatten().fold(min_peak, f64::min);
    let tf_max = pts.iter().flat_map(|p| [Some(p.2), p.3]).flatten().fold(max_peak, f64::max);
    let (x0, x1) = ((ai_min / 1.5).log10().floor(), (ai_max * 3.0).log10().ceil());
    let (y0, y1) = ((tf_min / 1.5).log10().floor(), (tf_max * 3.0).log10());

    let best: Vec<usize> = if spec.mark_best { best_points(&spec.points) } else { Vec::new() };
    let display = display_names(&spec.points);

    // Clusters of coincident points (same predicted and measured pixel within 3 px) share one label.
    // Positions depend on the plot box, which depends on the panel height; compute in unit space first.
    let (w, mut h) = (spec.width.max(500) as f64, spec.height.max(350) as f64);
    let title = spec.title.clone().unwrap_or_else(|| format!("{} (source: {})", hw.name, hw.source));

    // Try names first; fall back to numbers when names do not fit.
    let attempt = |numbered: bool, h: f64| -> Option<(RooflineLayout, f64)> {
        let (l, r, t, b) = (72.0, w - PANEL - 16.0, 58.0, h - 58.0);
        let px = |ai: f64| l + (ai.log10() - x0) / (x1 - x0) * (r - l);
        let py = |tf: f64| b - (tf.log10() - y0) / (y1 - y0) * (b - t);
        let mut items: Vec<Item> = Vec::new();
        let mut labels: Vec<LabelBox> = Vec::new();
        let mut placer = Placer::new(BoxF { x: l + 2.0, y: t + 2.0, w: r - l - 4.0, h: b - t - 4.0 });

        // Title, scaled down to fit.
        let tsize = (16.0 * (w - 20.0) / text_width(&title, 16.0).max(1.0)).clamp(10.0, 16.0);
        items.push(Item::Text {
            x: w / 2.0,
            y: 30.0,
            text: title.clone(),
            size: tsize,
            color: BLACK,
            anchor: Anchor::Middle,
            vertical: false,
            class: "title",
        });
        // Grid, ticks, axes.
        let mut grid = Vec::new();
        // Decades, plus 2 and 5 (lighter; labelled when the axis spans few decades).
        let few_x = x1 - x0 <= 2.5;
        let few_y = y1 - y0 <= 2.5;
        for d in (x0 as i32)..=(x1 as i32) {
            for mult in [1.0, 2.0, 5.0] {
                let v = mult * 10f64.powi(d);
                if v.log10() > x1 + 1e-9 {
                    continue;
                }
                let x = px(v);
                let major = mult == 1.0;
                let color = if major { GRID } else { MINOR };
                grid.push(Item::Line { pts: vec![(x, t), (x, b)], color, width: 1.0, dash: false });
                if major || few_x {
                    grid.push(Item::Text {
                        x,
                        y: b + 17.0,
                        text: fmt_tick(v),
                        size: if major { 12.0 } else { 10.5 },
                        color: if major { BLACK } else { GREY },
                        anchor: Anchor::Middle,
                        vertical: false,
                        class: "tick",
                    });
                }
            }
        }
        for d in (y0 as i32)..=(y1.floor() as i32) {
            for mult in [1.0, 2.0, 5.0] {
                let v = mult * 10f64.powi(d);
                if v.log10() > y1 {
                    continue;
                }
                let y = py(v);
                let major = mult == 1.0;
                let color = if major { GRID } else { MINOR };
                grid.push(Item::Line { pts: vec![(l, y), (r, y)], color, width: 1.0, dash: false });
                if major || few_y {
                    grid.push(Item::Text {
                        x: l - 6.0,
                        y: y + 4.0,
                        text: fmt_tick(v),
                        size: if major { 12.0 } else { 10.5 },
                        color: if major { BLACK } else { GREY },
                        anchor: Anchor::End,
                        vertical: false,
                        class: "tick",
                    });
                }
            }
        }
        items.push(Item::Group { class: "grid".into(), id: None, data: vec![], items: grid });
        items.push(Item::Rect { x: l, y: t, w: r - l, h: b - t, fill: None, stroke: Some((BLACK, 1.0)) });
        items.push(Item::Text {
            x: (l + r) / 2.0,
            y: h - 18.0,
            text: "Arithmetic intensity (FLOP/byte)".into(),
            size: 13.0,
            color: BLACK,
            anchor: Anchor::Middle,
            vertical: false,
            class: "x-label",
        });
        items.push(Item::Text {
            x: 20.0,
            y: (t + b) / 2.0,
            text: "Throughput (TFLOP/s)".into(),
            size: 13.0,
            color: BLACK,
            anchor: Anchor::Middle,
            vertical: true,
            class: "y-label",
        });

        // Roofs: one shared memory slope, a flat roof per group.
        let ymin_v = 10f64.powf(y0);
        let xs = 10f64.powf(x0).max(ymin_v / bw_tb);
        let diag_end = max_ridge.min(10f64.powf(x1));
        let diag = ((px(xs), py(xs * bw_tb)), (px(diag_end), py(diag_end * bw_tb)));
        placer.soft.push(diag);
        items.push(Item::Group {
            class: "memory-roof".into(),
            id: None,
            data: vec![("bandwidth-gb-s", format!("{}", hw.memory_bandwidth_gb_s))],
            items: vec![Item::Line { pts: vec![diag.0, diag.1], color: MEM, width: 2.0, dash: false }],
        });
        // A measured read stream (`roofline calibrate`): the roof of an op that only reads (a decode GEMV),
        // dashed beside the copy's, up to the highest peak.
        let read_diag = read_tb.map(|rtb| {
            let xs = 10f64.powf(x0).max(ymin_v / rtb);
            let end = (max_peak / rtb).min(10f64.powf(x1));
            ((px(xs), py(xs * rtb)), (px(end), py(end * rtb)))
        });
        if let (Some(d), Some(rb)) = (read_diag, hw.read_bandwidth_gb_s) {
            placer.soft.push(d);
            items.push(Item::Group {
                class: "read-roof".into(),
                id: None,
                data: vec![("read-bandwidth-gb-s", format!("{rb}"))],
                items: vec![Item::Line { pts: vec![d.0, d.1], color: MEM, width: 1.5, dash: true }],
            });
        }
        let mut ridge_marks = Vec::new();
        for (g, ridge) in groups.iter().zip(&ridges) {
            let (rx, ry) = (px(*ridge), py(g.peak));
            placer.soft.push(((rx, ry), (r, ry)));
            placer.hard.push(BoxF { x: rx - 5.0, y: ry - 5.0, w: 10.0, h: 10.0 });
            ridge_marks.push((rx, ry));
            for c in &g.classes {
                items.push(Item::Group {
                    class: "roof".into(),
                    id: None,
                    data: vec![
                        ("format", c.name().to_string()),
                        ("peak-tflops", format!("{}", g.peak)),
                        ("ridge-ai", format!("{ridge:.3}")),
                    ],
                    items: vec![
                        Item::Line { pts: vec![(rx, ry), (r, ry)], color: g.color, width: 2.0, dash: false },
                        Item::Circle { c: (rx, ry), r: 4.0, fill: Some(g.color), stroke: Some((WHITE, 1.0)) },
                    ],
                });
            }
        }

        // Point markers (obstacles for every label).
        let pos: Vec<(Px, Option<Px>)> =
            pts.iter().map(|&(_, ai, tf, m)| ((px(ai), py(tf)), m.map(|m| (px(ai), py(m))))).collect();
        for (j, (p, m)) in pos.iter().enumerate() {
            placer.hard.push(BoxF { x: p.0 - 7.0, y: p.1 - 7.0, w: 14.0, h: 14.0 });
            if let Some(m) = m {
                placer.hard.push(BoxF { x: m.0 - 6.0, y: m.1 - 6.0, w: 12.0, h: 12.0 });
            }
            if best.contains(&pts[j].0) {
                let c = m.unwrap_or(*p);
                placer.hard.push(BoxF { x: c.0 - 10.5, y: c.1 - 10.5, w: 21.0, h: 21.0 });
            }
        }

        // Roof labels, memory label, ridge labels.
        for (g, ridge) in groups.iter().zip(&ridges) {
            let (rx, ry) = (px(*ridge), py(g.peak));
            let text = format!("{} {} TFLOP/s", g.name(), fmt_num(g.peak));
            let lines = vec![text.clone()];
            let (bw_, bh) = block_size(&lines, LABEL);
            // Right end of the roof first, then sliding left along it; above the line, then below.
            let mut xs_ = Vec::new();
            let mut x = r - 6.0 - bw_;
            while x >= rx + 8.0 {
                xs_.push(x);
                x -= 16.0;
            }
            xs_.push(rx + 8.0);
            let mut cands: Vec<BoxF> = xs_.iter().map(|&x| BoxF { x, y: ry - 3.0 - bh, w: bw_, h: bh }).collect();
            cands.extend(xs_.iter().map(|&x| BoxF { x, y: ry + 3.0, w: bw_, h: bh }));
            // Left of the ridge point, above the memory slope.
            cands.push(BoxF { x: rx - 10.0 - bw_, y: ry - bh / 2.0, w: bw_, h: bh });
            cands.push(BoxF { x: rx - 10.0 - bw_, y: ry - 4.0 - bh, w: bw_, h: bh });
            if let Some((_, bx)) = placer.place(&cands) {
                items.push(Item::Group {
                    class: "roof-label".into(),
                    id: None,
                    data: vec![("formats", g.name())],
                    items: text_block(&bx, &lines, LABEL, g.color, "roof-label"),
                });
                labels.push(LabelBox { kind: LabelKind::Roof, text, bbox: bx, leader: None });
            }
        }
        let text = format!("memory {} GB/s", fmt_num(hw.memory_bandwidth_gb_s));
        if let Some((it, label)) =
            slope_label(&mut placer, diag, &[0.5, 0.35, 0.65, 0.2, 0.8, 0.1], text, "memory-label")
        {
            items.extend(it);
            labels.push(label);
        }
        if let (Some(d), Some(rb)) = (read_diag, hw.read_bandwidth_gb_s) {
            let text = format!("reads {} GB/s", fmt_num(rb));
            if let Some((it, label)) = slope_label(&mut placer, d, &[0.3, 0.45, 0.15, 0.6, 0.75], text, "read-label") {
                items.extend(it);
                labels.push(label);
            }
        }
        for (g, ridge) in groups.iter().zip(&ridges) {
            let (rx, ry) = (px(*ridge), py(g.peak));
            let text = format!("ridge {}", fmt_num(*ridge));
            let lines = vec![text.clone()];
            let (bw_, bh) = block_size(&lines, LABEL - 1.0);
            let mut cands = vec![
                BoxF { x: rx + 6.0, y: ry + 4.0, w: bw_, h: bh },
                BoxF { x: rx - 6.0 - bw_, y: ry - 4.0 - bh, w: bw_, h: bh },
                BoxF { x: rx + 6.0, y: ry - 4.0 - bh, w: bw_, h: bh },
                BoxF { x: rx - bw_ / 2.0, y: ry + 8.0, w: bw_, h: bh },
            ];
            cands.extend(around((rx, ry), 4.0, bw_, bh));
            if let Some((i, bx)) = placer.place_led(&cands, Some((rx, ry)), 4) {
                let mut it = text_block(&bx, &lines, LABEL - 1.0, g.color, "ridge-label");
                if i >= 4 {
                    it.insert(
                        0,
                        Item::Line { pts: vec![(rx, ry), bx.nearest((rx, ry))], color: GREY, width: 0.8, dash: false },
                    );
                }
                items.push(Item::Group {
                    class: "ridge-label".into(),
                    id: None,
                    data: vec![("formats", g.name()), ("ridge-ai", format!("{ridge:.3}"))],
                    items: it,
                });
                labels.push(LabelBox {
                    kind: LabelKind::Ridge,
                    text,
                    bbox: bx,
                    leader: (i >= 4).then(|| ((rx, ry), bx.nearest((rx, ry)))),
                });
            }
        }

        // Clusters of coincident points.
        let mut clusters: Vec<Cluster> = Vec::new();
        for (j, &(i, ..)) in pts.iter().enumerate() {
            let (p, m) = pos[j];
            let close = |a: (f64, f64), b: (f64, f64)| (a.0 - b.0).abs() <= 3.0 && (a.1 - b.1).abs() <= 3.0;
            let found = clusters.iter_mut().find(|c| {
                let (cp, cm) = pos[c.members[0]];
                close(cp, p)
                    && match (cm, m) {
                        (None, None) => true,
                        (Some(a), Some(b)) => close(a, b),
                        _ => false,
                    }
            });
            let is_best = best.contains(&i);
            let name = if is_best { format!("{}{}", star(), display[i]) } else { display[i].clone() };
            match found {
                Some(c) => {
                    c.members.push(j);
                    if !c.names.contains(&name) {
                        c.names.push(name);
                    }
                    c.best |= is_best;
                }
                None => clusters.push(Cluster { members: vec![j], names: vec![name], anchor: p, best: is_best }),
            }
        }
        // Best first, then left to right.
        clusters.sort_by(|a, b| b.best.cmp(&a.best).then(a.anchor.0.total_cmp(&b.anchor.0)));
        if !numbered && clusters.len() > MAX_TEXT_LABELS {
            return None;
        }

        // Point markers.
        let mut point_items = Vec::new();
        for (j, &(i, ai, _, _)) in pts.iter().enumerate() {
            let p = &spec.points[i];
            let (pp, mp) = pos[j];
            let color = groups.iter().find(|g| g.classes.contains(&p.prediction.compute)).map_or(GREY, |g| g.color);
            let is_best = best.contains(&i);
            let mut data = vec![
                ("label", p.label.clone()),
                ("time-us", format!("{:.3}", p.prediction.time_us)),
                ("ai", format!("{ai:.3}")),
                ("bound", p.prediction.bound.as_str().to_string()),
                ("compute", p.prediction.compute.name().to_string()),
            ];
            let mut it = Vec::new();
            if let (Some(mp), Some(m)) = (mp, &p.measurement) {
                data.push(("measured-us", format!("{:.3}", m.time_us)));
                it.push(Item::Line { pts: vec![pp, mp], color: GREY, width: 1.0, dash: false });
            }
            it.push(Item::Circle { c: pp, r: 5.0, fill: Some(WHITE), stroke: Some((color, 2.0)) });
            if let Some(mp) = mp {
                it.push(Item::Circle { c: mp, r: 4.5, fill: Some(color), stroke: Some((BLACK, 0.8)) });
            }
            if is_best {
                it.push(Item::Circle { c: mp.unwrap_or(pp), r: 8.5, fill: None, stroke: Some((BLACK, 1.8)) });
            }
            point_items.push(Item::Group {
                class: if is_best { "point best".into() } else { "point".into() },
                id: Some(format!("point-{i}")),
                data,
                items: it,
            });
        }
        items.extend(point_items);

        // Point labels.
        let mut key = Vec::new();
        let mut label_items = Vec::new();
        for c in clusters.iter() {
            // One star in front when every name of the group is best, else a star on each best name.
            let st = star();
            let names: Vec<String> = if c.names.len() > 1 && c.names.iter().all(|n| n.starts_with(st)) {
                c.names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| if i == 0 { n.clone() } else { n[st.len()..].to_string() })
                    .collect()
            } else {
                c.names.clone()
            };
            let (p, m) = pos[c.members[0]];
            // Measured points are labelled at the measurement (the filled marker), others at the prediction.
            let anchor = m.unwrap_or(p);
            // Names where they fit (at most four lines); else a number, named in the key.
            let mut got = None;
            if !numbered {
                let lines = wrap(&names, LABEL, MAX_LABEL_W);
                let (bw_, bh) = block_size(&lines, LABEL);
                if lines.len() <= 4 {
                    got = placer.place_led(&around(anchor, 5.0, bw_, bh), Some(anchor), 8).map(|(k, b)| (k, b, lines));
                }
            }
            if got.is_none() {
                let lines = vec![format!("{}", key.len() + 1)];
                let (bw_, bh) = block_size(&lines, LABEL);
                got = placer.place_led(&around(anchor, 5.0, bw_, bh), Some(anchor), 8).map(|(k, b)| (k, b, lines));
                if got.is_some() {
                    key.push((key.len() + 1, names.clone()));
                }
            }
            let Some((k, bx, lines)) = got else {
                if numbered {
                    continue;
                }
                return None;
            };
            let members: Vec<String> = c.members.iter().map(|&j| format!("point-{}", pts[j].0)).collect();
            let mut it = Vec::new();
            if k >= 8 {
                it.push(Item::Line { pts: vec![anchor, bx.nearest(anchor)], color: GREY, width: 0.8, dash: false });
            }
            it.extend(text_block(&bx, &lines, LABEL, BLACK, "point-label"));
            label_items.push(Item::Group {
                class: "label".into(),
                id: None,
                data: vec![("for", members.join(" "))],
                items: it,
            });
            labels.push(LabelBox {
                kind: LabelKind::Point,
                text: lines.join("\n"),
                bbox: bx,
                leader: (k >= 8).then(|| (anchor, bx.nearest(anchor))),
            });
        }
        items.extend(label_items);

        // Panel beside the plot: roofs, marker meanings, key.
        let px0 = w - PANEL + 4.0;
        let mut y = t + 4.0;
        let mut panel = Vec::new();
        let head = |panel: &mut Vec<Item>, y: &mut f64, s: &str| {
            panel.push(Item::Text {
                x: px0,
                y: *y + 12.0,
                text: s.into(),
                size: 13.0,
                color: BLACK,
                anchor: Anchor::Start,
                vertical: false,
                class: "legend-head",
            });
            *y += 20.0;
        };
        let entry = |panel: &mut Vec<Item>, y: &mut f64, s: &str, indent: f64| {
            panel.push(Item::Text {
                x: px0 + indent,
                y: *y + 11.0,
                text: s.into(),
                size: 11.5,
                color: BLACK,
                anchor: Anchor::Start,
                vertical: false,
                class: "legend",
            });
            *y += 15.0;
        };
        head(&mut panel, &mut y, "Roofs (ridge in FLOP/byte)");
        panel.push(Item::Line {
            pts: vec![(px0, y + 7.0), (px0 + 22.0, y + 7.0)],
            color: MEM,
            width: 2.0,
            dash: false,
        });
        entry(&mut panel, &mut y, &format!("memory {} GB/s", fmt_num(hw.memory_bandwidth_gb_s)), 28.0);
        if let (Some(_), Some(rb)) = (read_tb, hw.read_bandwidth_gb_s) {
            panel.push(Item::Line {
                pts: vec![(px0, y + 7.0), (px0 + 22.0, y + 7.0)],
                color: MEM,
                width: 1.5,
                dash: true,
            });
            entry(&mut panel, &mut y, &format!("reads {} GB/s (read-only ops)", fmt_num(rb)), 28.0);
        }
        for (g, ridge) in groups.iter().zip(&ridges) {
            panel.push(Item::Line {
                pts: vec![(px0, y + 7.0), (px0 + 22.0, y + 7.0)],
                color: g.color,
                width: 2.0,
                dash: false,
            });
            let one = format!("{}: {} TFLOP/s, ridge {}", g.name(), fmt_num(g.peak), fmt_num(*ridge));
            if text_width(&one, 11.5) <= PANEL - 36.0 {
                entry(&mut panel, &mut y, &one, 28.0);
            } else {
                entry(&mut panel, &mut y, &format!("{}:", g.name()), 28.0);
                entry(&mut panel, &mut y, &format!("{} TFLOP/s, ridge {}", fmt_num(g.peak), fmt_num(*ridge)), 28.0);
            }
        }
        y += 8.0;
        head(&mut panel, &mut y, "Points");
        panel.push(Item::Circle { c: (px0 + 11.0, y + 7.0), r: 5.0, fill: Some(WHITE), stroke: Some((GREY, 2.0)) });
        entry(&mut panel, &mut y, "predicted (hollow)", 28.0);
        if pos.iter().any(|(_, m)| m.is_some()) {
            panel.push(Item::Circle { c: (px0 + 11.0, y + 7.0), r: 4.5, fill: Some(GREY), stroke: Some((BLACK, 0.8)) });
            entry(&mut panel, &mut y, "measured (filled)", 28.0);
        }
        if !best.is_empty() {
            panel.push(Item::Circle { c: (px0 + 11.0, y + 7.0), r: 7.0, fill: None, stroke: Some((BLACK, 2.0)) });
            entry(&mut panel, &mut y, &format!("{}fastest of its shape", star()), 28.0);
        }
        entry(&mut panel, &mut y, "colour = roof it runs on", 0.0);
        if !key.is_empty() {
            y += 8.0;
            head(&mut panel, &mut y, "Key");
            for (n, names) in &key {
                let lines = wrap(names, 11.5, PANEL - 40.0);
                for (i, line) in lines.iter().enumerate() {
                    if i == 0 {
                        panel.push(Item::Text {
                            x: px0 + 20.0,
                            y: y + 11.0,
                            text: format!("{n}"),
                            size: 11.5,
                            color: BLACK,
                            anchor: Anchor::End,
                            vertical: false,
                            class: "legend-key",
                        });
                    }
                    entry(&mut panel, &mut y, line, 26.0);
                }
            }
        }
        items.push(Item::Group { class: "legend".into(), id: None, data: vec![], items: panel });
        let needed = y + 20.0;
        Some((
            RooflineLayout {
                scene: Scene { width: w, height: h, items },
                labels,
                numbered: !key.is_empty(),
                points_drawn: pts.len(),
            },
            needed,
        ))
    };

    // Names first; numbers (with the names in the key) when names do not fit. Grow the picture when the panel
    // needs more height.
    for numbered in [false, true] {
        for tries in 0..4 {
            match attempt(numbered, h) {
                Some((lay, needed)) if needed <= h || (numbered && tries == 3) => return Ok(lay),
                Some((_, needed)) => h = needed.ceil(),
                None => break,
            }
        }
    }
    Err(ReportError::Draw("could not lay out the chart".into()))
}
