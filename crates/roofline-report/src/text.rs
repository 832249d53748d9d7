//! Text metrics and rasterization with the bundled DejaVu Sans (no system fonts, no fontconfig).
//!
//! The layout measures labels with the same font the PNG renderer draws them with, so label boxes computed by the
//! layout are the boxes that end up in the picture. SVG viewers use DejaVu Sans when installed, else a sans-serif
//! font of similar width.

use ab_glyph::{point, Font, FontRef, PxScale, ScaleFont};

static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

fn font() -> Option<FontRef<'static>> {
    FontRef::try_from_slice(FONT).ok()
}

/// Pixel scale of a font size given in px per em (as SVG's `font-size`).
fn scale(f: &FontRef<'_>, size: f64) -> PxScale {
    let upem = f.units_per_em().unwrap_or(2048.0);
    PxScale::from(size as f32 * f.height_unscaled() / upem)
}

/// Width in pixels of `s` at `size` px per em.
pub(crate) fn text_width(s: &str, size: f64) -> f64 {
    let Some(f) = font() else {
        return s.chars().count() as f64 * size * 0.62;
    };
    let sf = f.as_scaled(scale(&f, size));
    let mut w = 0.0f32;
    let mut prev = None;
    for c in s.chars() {
        let id = sf.glyph_id(c);
        if let Some(p) = prev {
            w += sf.kern(p, id);
        }
        w += sf.h_advance(id);
        prev = Some(id);
    }
    w as f64
}

/// Whether the bundled font has a glyph for `c`.
pub(crate) fn has_glyph(c: char) -> bool {
    font().is_some_and(|f| f.glyph_id(c).0 != 0)
}

/// Calls `put(x, y, coverage)` for every pixel of `s` drawn with its baseline starting at `(x, y)` (pixels, at
/// `size` px per em). With `vertical`, the text runs upwards (rotated -90 degrees about `(x, y)`).
pub(crate) fn rasterize(s: &str, x: f64, y: f64, size: f64, vertical: bool, mut put: impl FnMut(i32, i32, f32)) {
    let Some(f) = font() else { return };
    let sc = scale(&f, size);
    let sf = f.as_scaled(sc);
    let mut pen = 0.0f32;
    let mut prev = None;
    for c in s.chars() {
        let id = sf.glyph_id(c);
        if let Some(p) = prev {
            pen += sf.kern(p, id);
        }
        prev = Some(id);
        // Lay out at the origin in text space, then map each pixel to the image.
        let glyph = id.with_scale_and_position(sc, point(pen, 0.0));
        if let Some(o) = f.outline_glyph(glyph) {
            let b = o.px_bounds();
            o.draw(|gx, gy, cov| {
                let (u, v) = (b.min.x + gx as f32, b.min.y + gy as f32);
                let (px, py) = if vertical { (x + v as f64, y - u as f64) } else { (x + u as f64, y + v as f64) };
                put(px.floor() as i32, py.floor() as i32, cov);
            });
        }
        pen += sf.h_advance(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn width_grows_with_text_and_size() {
        let a = text_width("FP16", 12.0);
        assert!(a > 15.0 && a < 40.0, "{a}");
        assert!(text_width("FP16 FP16", 12.0) > 2.0 * a);
        assert!((text_width("FP16", 24.0) - 2.0 * a).abs() < 0.5);
    }

    #[test]
    fn rasterizes_pixels_inside_the_measured_box() {
        let (mut n, mut xmax, mut ymin) = (0, i32::MIN, i32::MAX);
        rasterize("Hello", 10.0, 30.0, 14.0, false, |x, y, c| {
            if c > 0.0 {
                n += 1;
                xmax = xmax.max(x);
                ymin = ymin.min(y);
            }
        });
        assert!(n > 50);
        assert!(xmax as f64 <= 10.0 + text_width("Hello", 14.0) + 1.0);
        assert!(ymin >= 30 - 14);
    }
}
