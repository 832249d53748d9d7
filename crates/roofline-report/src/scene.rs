//! A small display list in pixel coordinates. Chart layouts build a [`Scene`]; [`Scene::to_svg`] writes it as SVG
//! and `png::render` rasterizes the same scene, so both outputs show the same layout.

use std::fmt::Write as _;

/// An RGB colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    /// `#rrggbb`.
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// Black.
pub const BLACK: Rgb = Rgb(0, 0, 0);
/// White.
pub const WHITE: Rgb = Rgb(255, 255, 255);
/// Grey of axes text and leader lines.
pub const GREY: Rgb = Rgb(110, 110, 110);
/// Light grey of grid lines.
pub const GRID: Rgb = Rgb(225, 225, 225);

/// Horizontal text anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// `x` is the left edge.
    Start,
    /// `x` is the centre.
    Middle,
    /// `x` is the right edge.
    End,
}

/// One drawable item.
#[derive(Debug, Clone)]
pub enum Item {
    /// A polyline.
    Line {
        /// Vertices.
        pts: Vec<(f64, f64)>,
        /// Colour.
        color: Rgb,
        /// Stroke width, px.
        width: f64,
        /// Dashed.
        dash: bool,
    },
    /// A circle.
    Circle {
        /// Centre.
        c: (f64, f64),
        /// Radius, px.
        r: f64,
        /// Fill colour (None: hollow).
        fill: Option<Rgb>,
        /// Stroke colour and width.
        stroke: Option<(Rgb, f64)>,
    },
    /// An axis-aligned rectangle.
    Rect {
        /// Left, top, width, height.
        x: f64,
        /// Top.
        y: f64,
        /// Width.
        w: f64,
        /// Height.
        h: f64,
        /// Fill colour.
        fill: Option<Rgb>,
        /// Stroke colour and width.
        stroke: Option<(Rgb, f64)>,
    },
    /// Text; `y` is the baseline.
    Text {
        /// Anchor x.
        x: f64,
        /// Baseline y.
        y: f64,
        /// The text.
        text: String,
        /// px per em.
        size: f64,
        /// Colour.
        color: Rgb,
        /// Horizontal anchor.
        anchor: Anchor,
        /// Runs upwards (y-axis title).
        vertical: bool,
        /// SVG class.
        class: &'static str,
    },
    /// A group with an SVG class, id and `data-*` attributes.
    Group {
        /// SVG class.
        class: String,
        /// SVG id.
        id: Option<String>,
        /// `data-*` attributes (names without the `data-` prefix).
        data: Vec<(&'static str, String)>,
        /// Children.
        items: Vec<Item>,
    },
}

/// A picture: size and items, drawn in order.
#[derive(Debug, Clone)]
pub struct Scene {
    /// Width, px.
    pub width: f64,
    /// Height, px.
    pub height: f64,
    /// Items.
    pub items: Vec<Item>,
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn paint(fill: Option<Rgb>, stroke: Option<(Rgb, f64)>) -> String {
    let mut s = format!(r#" fill="{}""#, fill.map_or("none".to_string(), Rgb::hex));
    if let Some((c, w)) = stroke {
        let _ = write!(s, r#" stroke="{}" stroke-width="{w}""#, c.hex());
    }
    s
}

fn write_item(s: &mut String, it: &Item) {
    match it {
        Item::Line { pts, color, width, dash } => {
            let p: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = write!(
                s,
                r#"<polyline fill="none" stroke="{}" stroke-width="{width}"{} points="{}"/>"#,
                color.hex(),
                if *dash { r#" stroke-dasharray="5,4""# } else { "" },
                p.join(" ")
            );
        }
        Item::Circle { c, r, fill, stroke } => {
            let _ = write!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="{r}"{}/>"#, c.0, c.1, paint(*fill, *stroke));
        }
        Item::Rect { x, y, w, h, fill, stroke } => {
            let _ =
                write!(s, r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}"{}/>"#, paint(*fill, *stroke));
        }
        Item::Text { x, y, text, size, color, anchor, vertical, class } => {
            let a = match anchor {
                Anchor::Start => "start",
                Anchor::Middle => "middle",
                Anchor::End => "end",
            };
            let pos = if *vertical {
                format!(r#"transform="translate({x:.1},{y:.1}) rotate(-90)""#)
            } else {
                format!(r#"x="{x:.1}" y="{y:.1}""#)
            };
            let _ = write!(
                s,
                r#"<text class="{class}" {pos} font-size="{size}" text-anchor="{a}" fill="{}">{}</text>"#,
                color.hex(),
                esc(text)
            );
        }
        Item::Group { class, id, data, items } => {
            let _ = write!(s, r#"<g class="{}""#, esc(class));
            if let Some(id) = id {
                let _ = write!(s, r#" id="{}""#, esc(id));
            }
            for (k, v) in data {
                let _ = write!(s, r#" data-{k}="{}""#, esc(v));
            }
            s.push('>');
            for c in items {
                write_item(s, c);
            }
            s.push_str("</g>");
        }
    }
}

impl Scene {
    /// The scene as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        let (w, h) = (self.width, self.height);
        let mut s = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, Verdana, sans-serif"><rect width="100%" height="100%" fill="white"/>"#
        );
        for it in &self.items {
            write_item(&mut s, it);
            s.push('\n');
        }
        s.push_str("</svg>\n");
        s
    }
}
