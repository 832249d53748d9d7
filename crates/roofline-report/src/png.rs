//! PNG rendering of a [`Scene`]: shapes with plotters' bitmap backend, text with the bundled DejaVu Sans
//! (no system fonts needed), drawn at twice the size and averaged down for smooth edges.

use plotters::prelude::*;

use crate::scene::{Anchor, Item, Rgb, Scene};
use crate::{text, ReportError};

/// Supersampling factor.
const SS: f64 = 2.0;

fn err<E: std::fmt::Display>(e: E) -> ReportError {
    ReportError::Draw(e.to_string())
}

fn col(c: Rgb) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

fn pt(p: (f64, f64)) -> (i32, i32) {
    ((p.0 * SS).round() as i32, (p.1 * SS).round() as i32)
}

fn draw<DB: DrawingBackend>(area: &DrawingArea<DB, plotters::coord::Shift>, it: &Item) -> Result<(), ReportError> {
    match it {
        Item::Line { pts, color, width, dash } => {
            let style = col(*color).stroke_width(((width * SS).round() as u32).max(1));
            if *dash {
                for seg in pts.windows(2) {
                    let (a, b) = (seg[0], seg[1]);
                    let len = ((b.0 - a.0).powi(2) + (b.1 - a.1).powi(2)).sqrt();
                    let mut t = 0.0;
                    while t < len {
                        let t1 = (t + 5.0).min(len);
                        let p = |t: f64| (a.0 + (b.0 - a.0) * t / len, a.1 + (b.1 - a.1) * t / len);
                        area.draw(&PathElement::new(vec![pt(p(t)), pt(p(t1))], style)).map_err(err)?;
                        t += 9.0;
                    }
                }
            } else {
                area.draw(&PathElement::new(pts.iter().map(|p| pt(*p)).collect::<Vec<_>>(), style)).map_err(err)?;
            }
        }
        Item::Circle { c, r, fill, stroke } => {
            let rr = (r * SS).round() as u32;
            if let Some(f) = fill {
                area.draw(&Circle::new(pt(*c), rr, col(*f).filled())).map_err(err)?;
            }
            if let Some((s, w)) = stroke {
                area.draw(&Circle::new(pt(*c), rr, col(*s).stroke_width(((w * SS).round() as u32).max(1))))
                    .map_err(err)?;
            }
        }
        Item::Rect { x, y, w, h, fill, stroke } => {
            let (a, b) = (pt((*x, *y)), pt((x + w, y + h)));
            if let Some(f) = fill {
                area.draw(&Rectangle::new([a, b], col(*f).filled())).map_err(err)?;
            }
            if let Some((s, sw)) = stroke {
                area.draw(&Rectangle::new([a, b], col(*s).stroke_width(((sw * SS).round() as u32).max(1))))
                    .map_err(err)?;
            }
        }
        Item::Text { x, y, text: t, size, color, anchor, vertical, .. } => {
            let w = text::text_width(t, *size);
            let shift = match anchor {
                Anchor::Start => 0.0,
                Anchor::Middle => w / 2.0,
                Anchor::End => w,
            };
            let (x0, y0) = if *vertical { (*x, y + shift) } else { (x - shift, *y) };
            let c = col(*color);
            let mut res = Ok(());
            text::rasterize(t, x0 * SS, y0 * SS, size * SS, *vertical, |px, py, cov| {
                if cov > 0.0 && res.is_ok() {
                    res = area.draw_pixel((px, py), &c.mix(cov.min(1.0) as f64)).map_err(err);
                }
            });
            res?;
        }
        Item::Group { items, .. } => {
            for c in items {
                draw(area, c)?;
            }
        }
    }
    Ok(())
}

/// Rasterizes `scene` to PNG bytes.
pub(crate) fn render(scene: &Scene) -> Result<Vec<u8>, ReportError> {
    let (w, h) = (scene.width.round() as u32, scene.height.round() as u32);
    if w == 0 || h == 0 || w > 20000 || h > 20000 {
        return Err(ReportError::Draw(format!("image size {w}x{h} out of range")));
    }
    let (bw, bh) = (w * SS as u32, h * SS as u32);
    let mut big = vec![255u8; (bw * bh * 3) as usize];
    {
        let area = BitMapBackend::with_buffer(&mut big, (bw, bh)).into_drawing_area();
        for it in &scene.items {
            draw(&area, it)?;
        }
        area.present().map_err(err)?;
    }
    // Box-filter down to the final size.
    let s = SS as u32;
    let mut small = vec![0u8; (w * h * 3) as usize];
    for y in 0..h {
        for x in 0..w {
            for ch in 0..3 {
                let mut sum = 0u32;
                for dy in 0..s {
                    for dx in 0..s {
                        sum += big[(((y * s + dy) * bw + x * s + dx) * 3 + ch) as usize] as u32;
                    }
                }
                small[((y * w + x) * 3 + ch) as usize] = (sum / (s * s)) as u8;
            }
        }
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Best);
        enc.set_filter(png::FilterType::Paeth);
        enc.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
        let mut wr = enc.write_header().map_err(err)?;
        wr.write_image_data(&small).map_err(err)?;
    }
    Ok(out)
}
