//! Greedy label placement: each label tries candidate boxes in order and takes the first that collides with no
//! placed label and no marker, preferring boxes that also cross no roof line.

use serde::Serialize;

/// An axis-aligned box in pixels (`x`, `y` = top-left).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BoxF {
    /// Left.
    pub x: f64,
    /// Top.
    pub y: f64,
    /// Width.
    pub w: f64,
    /// Height.
    pub h: f64,
}

impl BoxF {
    /// Whether the two boxes share any area.
    pub fn overlaps(&self, o: &BoxF) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }

    /// Whether `self` lies entirely inside `o`.
    pub fn inside(&self, o: &BoxF) -> bool {
        self.x >= o.x && self.y >= o.y && self.x + self.w <= o.x + o.w && self.y + self.h <= o.y + o.h
    }

    /// Centre.
    pub fn center(&self) -> (f64, f64) {
        (self.x + self.w / 2.0, self.y + self.h / 2.0)
    }

    /// Whether the segment `a`-`b` passes through the box (Liang-Barsky clipping).
    pub fn hits_segment(&self, a: (f64, f64), b: (f64, f64)) -> bool {
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let (mut t0, mut t1) = (0.0f64, 1.0f64);
        for (p, q) in
            [(-dx, a.0 - self.x), (dx, self.x + self.w - a.0), (-dy, a.1 - self.y), (dy, self.y + self.h - a.1)]
        {
            if p == 0.0 {
                if q < 0.0 {
                    return false;
                }
            } else {
                let r = q / p;
                if p < 0.0 {
                    t0 = t0.max(r);
                } else {
                    t1 = t1.min(r);
                }
            }
        }
        t0 <= t1
    }

    /// The point of the box nearest to `p` (where a leader line ends).
    pub fn nearest(&self, p: (f64, f64)) -> (f64, f64) {
        (p.0.clamp(self.x, self.x + self.w), p.1.clamp(self.y, self.y + self.h))
    }
}

/// Places boxes without overlap.
#[derive(Debug, Clone)]
pub(crate) struct Placer {
    /// Every label must lie inside this box.
    pub bounds: BoxF,
    /// Labels placed so far (never overlapped).
    pub placed: Vec<BoxF>,
    /// Markers (never covered).
    pub hard: Vec<BoxF>,
    /// Lines that labels should avoid when they can.
    pub soft: Vec<((f64, f64), (f64, f64))>,
    /// Leader lines drawn so far (never crossed by a label).
    pub leaders: Vec<((f64, f64), (f64, f64))>,
}

impl Placer {
    pub fn new(bounds: BoxF) -> Self {
        Placer { bounds, placed: Vec::new(), hard: Vec::new(), soft: Vec::new(), leaders: Vec::new() }
    }

    fn free(&self, b: &BoxF, strict: bool, leader: Option<((f64, f64), (f64, f64))>) -> bool {
        b.inside(&self.bounds)
            && !self.placed.iter().any(|p| p.overlaps(b))
            && !self.hard.iter().any(|p| p.overlaps(b))
            && !self.leaders.iter().any(|(a, c)| b.hits_segment(*a, *c))
            && leader.is_none_or(|(a, c)| !self.placed.iter().any(|p| p.hits_segment(a, c)))
            && (!strict || !self.soft.iter().any(|(a, c)| b.hits_segment(*a, *c)))
    }

    /// Takes the first candidate that is free and crosses no soft line, else the first that is free; records
    /// and returns it (with its index), or `None` when every candidate collides.
    pub fn place(&mut self, candidates: &[BoxF]) -> Option<(usize, BoxF)> {
        self.place_led(candidates, None, usize::MAX)
    }

    /// As [`Placer::place`], where candidates from index `leader_from` on are joined to `anchor` by a leader
    /// line: such a candidate is taken only if its leader crosses no placed label, and the leader is recorded
    /// so that later labels do not cover it.
    pub fn place_led(
        &mut self,
        candidates: &[BoxF],
        anchor: Option<(f64, f64)>,
        leader_from: usize,
    ) -> Option<(usize, BoxF)> {
        let leader = |i: usize, b: &BoxF| anchor.filter(|_| i >= leader_from).map(|a| (a, b.nearest(a)));
        let pick = (0..candidates.len())
            .find(|&i| self.free(&candidates[i], true, leader(i, &candidates[i])))
            .or_else(|| (0..candidates.len()).find(|&i| self.free(&candidates[i], false, leader(i, &candidates[i]))))?;
        let b = candidates[pick];
        if let Some(l) = leader(pick, &b) {
            self.leaders.push(l);
        }
        self.placed.push(b);
        Some((pick, b))
    }
}

/// Candidate boxes of size `w` x `h` around a marker at `c` of radius `r`: the eight compass positions at
/// growing distances (nearest first).
pub(crate) fn around(c: (f64, f64), r: f64, w: f64, h: f64) -> Vec<BoxF> {
    let mut out = Vec::new();
    for d in [r + 3.0, r + 12.0, r + 26.0, r + 44.0, r + 66.0, r + 95.0, r + 130.0] {
        let e = d * std::f64::consts::FRAC_1_SQRT_2;
        out.extend([
            BoxF { x: c.0 + d, y: c.1 - h / 2.0, w, h },     // right
            BoxF { x: c.0 + e, y: c.1 - e - h, w, h },       // upper right
            BoxF { x: c.0 + e, y: c.1 + e, w, h },           // lower right
            BoxF { x: c.0 - d - w, y: c.1 - h / 2.0, w, h }, // left
            BoxF { x: c.0 - e - w, y: c.1 - e - h, w, h },   // upper left
            BoxF { x: c.0 - e - w, y: c.1 + e, w, h },       // lower left
            BoxF { x: c.0 - w / 2.0, y: c.1 - d - h, w, h }, // above
            BoxF { x: c.0 - w / 2.0, y: c.1 + d, w, h },     // below
        ]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_and_segments() {
        let a = BoxF { x: 0.0, y: 0.0, w: 10.0, h: 10.0 };
        assert!(a.overlaps(&BoxF { x: 9.0, y: 9.0, w: 5.0, h: 5.0 }));
        assert!(!a.overlaps(&BoxF { x: 10.0, y: 0.0, w: 5.0, h: 5.0 }));
        assert!(a.hits_segment((-5.0, 5.0), (15.0, 5.0)));
        assert!(!a.hits_segment((-5.0, 20.0), (15.0, 20.0)));
        assert!(a.hits_segment((-5.0, -5.0), (15.0, 15.0)));
        assert!(!a.hits_segment((11.0, -5.0), (30.0, 15.0)));
    }

    #[test]
    fn placer_never_overlaps() {
        let mut p = Placer::new(BoxF { x: 0.0, y: 0.0, w: 400.0, h: 400.0 });
        p.hard.push(BoxF { x: 195.0, y: 195.0, w: 10.0, h: 10.0 });
        let mut got = Vec::new();
        for _ in 0..12 {
            if let Some((_, b)) = p.place(&around((200.0, 200.0), 5.0, 60.0, 14.0)) {
                got.push(b);
            }
        }
        assert!(got.len() >= 10);
        for (i, a) in got.iter().enumerate() {
            assert!(!a.overlaps(&p.hard[0]));
            for b in &got[i + 1..] {
                assert!(!a.overlaps(b));
            }
        }
    }
}
