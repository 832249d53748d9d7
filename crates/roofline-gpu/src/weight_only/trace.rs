//! The ring GEMV's timeline from inside the kernel (`wo_ring.cu`'s `EXP_RING_TRACE`, a probe build whose y holds
//! it instead of the product): each CTA's words parsed into times, and the summary `examples/ring_trace.rs` prints.
//!
//! Each CTA writes `(n / 2) / ctas` 32-bit words (two f16 outputs a word) from word `c x words` of y: the
//! globaltimer's low 32 bits (ns) at its start ([`GT_START`]) and end ([`GT_END`]), its SM ([`SMID`]), and the SM's
//! clock (raw: one counter for all the CTA's warps) at its start ([`START`]), its barriers initialized ([`INIT`]),
//! its scale tables' copies issued ([`SCALES_ISSUED`]), the CTA's barrier passed by the producer ([`SYNCED`]), its
//! scales landed ([`SCALES_LANDED`]), x packed ([`X_PACKED`]) and its end ([`END`]); then for each unit u, from word
//! [`UNITS`] + 3u: its copies issued, its `full` barrier passed and its decode done.

use serde::Serialize;

/// Word of a CTA's timeline: the globaltimer (ns, low 32 bits) at its start.
pub const GT_START: usize = 0;
/// Word: the clock at x packed (consumer warp 0).
pub const X_PACKED: usize = 1;
/// Word: the clock at the CTA's end (after the consumers' last sync).
pub const END: usize = 2;
/// Word: the globaltimer at the CTA's end.
pub const GT_END: usize = 3;
/// Word: the clock at the barriers initialized.
pub const INIT: usize = 4;
/// Word: the clock at thread 0's scale-table copies issued.
pub const SCALES_ISSUED: usize = 5;
/// Word: the clock at the CTA's barrier passed (the producer's lane 0).
pub const SYNCED: usize = 6;
/// Word: the clock at thread 0's share of the scales landed.
pub const SCALES_LANDED: usize = 7;
/// Word: the clock at the CTA's start (thread 0), which the others are taken from.
pub const START: usize = 8;
/// Word: the SM the CTA ran on (`%smid`).
pub const SMID: usize = 9;
/// Word of unit 0's first time; unit u's three (copies issued, barrier passed, decode done) follow from
/// `UNITS + 3 u`.
pub const UNITS: usize = 10;

/// Units a CTA's timeline of `words` words holds (0 where it holds none).
pub fn traced_units(words: usize) -> usize {
    words.saturating_sub(UNITS) / 3
}

/// One unit of a CTA, us from the CTA's start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct UnitTimes {
    /// Its copies issued by the producer.
    pub issued: f64,
    /// Its `full` barrier passed (its bytes landed) by the first warp of its consumer class.
    pub landed: f64,
    /// Its decode done by that warp.
    pub decoded: f64,
}

/// One CTA's timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CtaTimes {
    /// The CTA (block index).
    pub cta: usize,
    /// The SM it ran on.
    pub sm: u32,
    /// Its start, us after the first CTA's (globaltimer).
    pub start: f64,
    /// Its end, us after the first CTA's start (globaltimer).
    pub end: f64,
    /// Us from its start (its clock): barriers initialized, scale copies issued, the CTA's barrier passed by the
    /// producer, scales landed, x packed, its end.
    pub init: f64,
    /// See [`CtaTimes::init`].
    pub scales_issued: f64,
    /// See [`CtaTimes::init`].
    pub synced: f64,
    /// See [`CtaTimes::init`].
    pub scales_landed: f64,
    /// See [`CtaTimes::init`].
    pub x_packed: f64,
    /// See [`CtaTimes::init`].
    pub done: f64,
    /// Its traced units in order (its first `traced_units` units).
    pub units: Vec<UnitTimes>,
    /// Units it streamed in all (more than `units` holds where its timeline ran out of words).
    pub unit_count: usize,
}

/// Every CTA's timeline of one launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// The clock the CTAs ran at, MHz: the median CTA's cycles from start to end over its globaltimer ns.
    pub mhz: f64,
    /// The CTAs, by block index.
    pub ctas: Vec<CtaTimes>,
}

/// The median of `v` (the timing harness's: of the middle two where even; NaN for none).
fn median(v: Vec<f64>) -> f64 {
    crate::timing::stats(v).median_us
}

impl Timeline {
    /// Parses y's bits (`y`, f16 words as the kernel left them) of a launch of `ctas` CTAs, CTA c having streamed
    /// `unit_count(c)` units; `fallback_mhz` is the clock taken where no CTA's globaltimer moved.
    pub fn parse(
        y: &[u16],
        ctas: usize,
        unit_count: impl Fn(usize) -> usize,
        fallback_mhz: f64,
    ) -> Result<Timeline, String> {
        if ctas == 0 {
            return Err("no CTAs".into());
        }
        let words = y.len() / 2 / ctas;
        if words < UNITS + 3 {
            return Err(format!(
                "{} outputs over {ctas} CTAs leave {words} words a CTA for its timeline ({} needed)",
                y.len(),
                UNITS + 3
            ));
        }
        let word = |c: usize, i: usize| -> u32 {
            let at = 2 * (c * words + i);
            u32::from(y[at]) | (u32::from(y[at + 1]) << 16)
        };
        // Signed: a warp may record its point a few cycles before thread 0 records the CTA's start (session 64's
        // loads-alone build did, which read as 2.18 s while unsigned).
        let cycles = |c: usize, i: usize| f64::from(word(c, i).wrapping_sub(word(c, START)) as i32);
        let mhz = median(
            (0..ctas)
                .filter(|&c| word(c, GT_END) != word(c, GT_START))
                .map(|c| 1e3 * cycles(c, END) / f64::from(word(c, GT_END).wrapping_sub(word(c, GT_START))))
                .collect(),
        );
        let mhz = if mhz > 0.0 { mhz } else { fallback_mhz };
        if mhz <= 0.0 {
            return Err("no clock: neither the CTAs' globaltimer nor a fallback".into());
        }
        // The first CTA's start, as the globaltimer's low 32 bits allow (every CTA starts within far less than 4 s of it).
        let t0 =
            (0..ctas).map(|c| word(c, GT_START)).min_by_key(|t| t.wrapping_sub(word(0, GT_START)) as i32).unwrap_or(0);
        let gt = |c: usize, i: usize| f64::from(word(c, i).wrapping_sub(t0)) / 1e3;
        let traced = traced_units(words);
        let ctas = (0..ctas)
            .map(|c| {
                let us = |i: usize| cycles(c, i) / mhz;
                let unit_count = unit_count(c);
                CtaTimes {
                    cta: c,
                    sm: word(c, SMID),
                    start: gt(c, GT_START),
                    end: gt(c, GT_END),
                    init: us(INIT),
                    scales_issued: us(SCALES_ISSUED),
                    synced: us(SYNCED),
                    scales_landed: us(SCALES_LANDED),
                    x_packed: us(X_PACKED),
                    done: us(END),
                    units: (0..unit_count.min(traced))
                        .map(|u| UnitTimes {
                            issued: us(UNITS + 3 * u),
                            landed: us(UNITS + 3 * u + 1),
                            decoded: us(UNITS + 3 * u + 2),
                        })
                        .collect(),
                    unit_count,
                }
            })
            .collect();
        Ok(Timeline { mhz, ctas })
    }

    /// The summary `ring_trace` prints: the CTAs' ends, the prologue's medians, per unit the median CTA's times, the
    /// tail (a CTA's end less its last unit's landing) and the CTAs that end last.
    pub fn summary(&self, last: usize) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let ends: Vec<f64> = self.ctas.iter().map(|c| c.end).collect();
        let fold = |f: fn(f64, f64) -> f64, init: f64| ends.iter().copied().fold(init, f);
        let _ = writeln!(s, "clock: {:.0} MHz (the CTAs' cycles over their globaltimer ns)", self.mhz);
        let _ = writeln!(
            s,
            "CTAs start within {:.2} us and end {:.2} (first) / {:.2} (median) / {:.2} (last) us after the first start",
            self.ctas.iter().map(|c| c.start).fold(0.0, f64::max),
            fold(f64::min, f64::MAX),
            median(ends.clone()),
            fold(f64::max, 0.0)
        );
        let med = |f: fn(&CtaTimes) -> f64| median(self.ctas.iter().map(f).collect());
        let _ = writeln!(
            s,
            "median us after a CTA's start: barriers initialized {:.2}, scale copies issued {:.2}, the CTA's barrier \
             passed {:.2}, scales landed {:.2}, x packed {:.2}, done {:.2}",
            med(|c| c.init),
            med(|c| c.scales_issued),
            med(|c| c.synced),
            med(|c| c.scales_landed),
            med(|c| c.x_packed),
            med(|c| c.done)
        );
        let _ = writeln!(s, "unit  CTAs  issued  landed  decoded  landed-issued  decoded-landed   [median us]");
        let most = self.ctas.iter().map(|c| c.units.len()).max().unwrap_or(0);
        for u in 0..most {
            let of: Vec<&UnitTimes> = self.ctas.iter().filter_map(|c| c.units.get(u)).collect();
            let m = |f: fn(&UnitTimes) -> f64| median(of.iter().map(|t| f(t)).collect());
            let _ = writeln!(
                s,
                "{u:4} {:5} {:7.2} {:7.2} {:8.2} {:14.2} {:15.2}",
                of.len(),
                m(|t| t.issued),
                m(|t| t.landed),
                m(|t| t.decoded),
                m(|t| t.landed - t.issued),
                m(|t| t.decoded - t.landed)
            );
        }
        // The tail of each CTA whose units were all traced.
        let whole: Vec<&CtaTimes> =
            self.ctas.iter().filter(|c| c.unit_count > 0 && c.units.len() == c.unit_count).collect();
        let tails: Vec<f64> = whole.iter().filter_map(|c| c.units.last().map(|u| c.done - u.landed)).collect();
        let _ = writeln!(
            s,
            "last unit ({} CTAs): landed {:.2}, decoded {:.2} (median us); end - last landing: median {:.2}, max {:.2}",
            whole.len(),
            median(whole.iter().filter_map(|c| c.units.last().map(|u| u.landed)).collect()),
            median(whole.iter().filter_map(|c| c.units.last().map(|u| u.decoded)).collect()),
            median(tails.clone()),
            tails.iter().copied().fold(0.0, f64::max)
        );
        let mut order: Vec<&CtaTimes> = self.ctas.iter().collect();
        order.sort_by(|a, b| b.end.total_cmp(&a.end));
        for c in order.into_iter().take(last) {
            let (landed, decoded) = c.units.last().map_or((f64::NAN, f64::NAN), |u| (u.landed, u.decoded));
            let _ = writeln!(
                s,
                "CTA {:3} (SM {:3}) ends {:.2} us: started {:.2}, x {:.2}, last traced unit landed {landed:.2} decoded \
                 {decoded:.2}, done {:.2} (us from its start)",
                c.cta, c.sm, c.end, c.start, c.x_packed, c.done
            );
        }
        s
    }
}

/// How the CTAs' lateness (a CTA's end less its launch's median end) repeats over launches of one plan: whether the
/// CTAs that end last are the same ones (by block index or by SM) each launch, or the ones with more units.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spread {
    /// Launches compared.
    pub launches: usize,
    /// Per launch, the last CTA's end less the first's, us.
    pub widths: Vec<f64>,
    /// The mean over consecutive launches of the Pearson correlation of their CTAs' lateness, by block index (1: the
    /// same CTAs are late each launch; 0: no relation).
    pub by_cta: f64,
    /// The same, by SM (a SM's CTAs' mean lateness in each launch; SMs in both launches).
    pub by_sm: f64,
    /// The Pearson correlation of lateness with a CTA's start (over every launch's CTAs).
    pub with_start: f64,
    /// Per count of units a CTA streamed: (units, CTAs over all launches, their mean lateness in us).
    pub by_units: Vec<(usize, usize, f64)>,
    /// The SMs by mean lateness over all launches, latest first: (SM, CTAs it ran, mean lateness in us).
    pub sms: Vec<(u32, usize, f64)>,
}

/// Pearson's correlation of the pairs `(x, y)` (NaN for fewer than 2 or no variance).
fn pearson(pairs: &[(f64, f64)]) -> f64 {
    let n = pairs.len() as f64;
    if pairs.len() < 2 {
        return f64::NAN;
    }
    let (mx, my) = (pairs.iter().map(|p| p.0).sum::<f64>() / n, pairs.iter().map(|p| p.1).sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for &(x, y) in pairs {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        f64::NAN
    } else {
        sxy / (sxx * syy).sqrt()
    }
}

/// The mean of the finite values of `v` (NaN for none).
fn finite_mean(v: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = v.filter(|x| x.is_finite()).fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        f64::NAN
    } else {
        sum / n as f64
    }
}

impl Spread {
    /// Compares `launches` (timelines of one plan, each with the same CTAs): at least two are needed.
    pub fn of(launches: &[Timeline]) -> Result<Spread, String> {
        if launches.len() < 2 {
            return Err(format!("{} launches: 2 or more needed to compare", launches.len()));
        }
        let ctas = launches[0].ctas.len();
        if launches.iter().any(|t| t.ctas.len() != ctas) {
            return Err("the launches' CTA counts differ".into());
        }
        // Each launch's lateness by CTA, and by SM (the mean of its CTAs').
        let late: Vec<Vec<f64>> = launches
            .iter()
            .map(|t| {
                let mid = median(t.ctas.iter().map(|c| c.end).collect());
                t.ctas.iter().map(|c| c.end - mid).collect()
            })
            .collect();
        let sm_late = |l: usize| -> std::collections::BTreeMap<u32, (f64, usize)> {
            let mut m = std::collections::BTreeMap::new();
            for (c, x) in launches[l].ctas.iter().zip(&late[l]) {
                let e = m.entry(c.sm).or_insert((0.0, 0));
                e.0 += x;
                e.1 += 1;
            }
            m
        };
        let sms_each: Vec<_> = (0..launches.len()).map(sm_late).collect();
        let by_cta = finite_mean(
            late.windows(2).map(|w| pearson(&w[0].iter().copied().zip(w[1].iter().copied()).collect::<Vec<_>>())),
        );
        let by_sm = finite_mean(sms_each.windows(2).map(|w| {
            let pairs: Vec<(f64, f64)> =
                w[0].iter().filter_map(|(sm, a)| w[1].get(sm).map(|b| (a.0 / a.1 as f64, b.0 / b.1 as f64))).collect();
            pearson(&pairs)
        }));
        let all = || launches.iter().zip(&late).flat_map(|(t, l)| t.ctas.iter().zip(l.iter().copied()));
        let with_start = pearson(&all().map(|(c, x)| (c.start, x)).collect::<Vec<_>>());
        let mut units = std::collections::BTreeMap::<usize, (usize, f64)>::new();
        let mut sms = std::collections::BTreeMap::<u32, (usize, f64)>::new();
        for (c, x) in all() {
            let u = units.entry(c.unit_count).or_insert((0, 0.0));
            u.0 += 1;
            u.1 += x;
            let s = sms.entry(c.sm).or_insert((0, 0.0));
            s.0 += 1;
            s.1 += x;
        }
        let mut sms: Vec<(u32, usize, f64)> = sms.into_iter().map(|(sm, (n, x))| (sm, n, x / n as f64)).collect();
        sms.sort_by(|a, b| b.2.total_cmp(&a.2));
        Ok(Spread {
            launches: launches.len(),
            widths: launches
                .iter()
                .map(|t| {
                    let ends = t.ctas.iter().map(|c| c.end);
                    ends.clone().fold(f64::MIN, f64::max) - ends.fold(f64::MAX, f64::min)
                })
                .collect(),
            by_cta,
            by_sm,
            with_start,
            by_units: units.into_iter().map(|(u, (n, x))| (u, n, x / n as f64)).collect(),
            sms,
        })
    }

    /// The CTAs' mean lateness by group of SMs (`groups`, e.g. the GPCs `sm_map::map_gpcs` finds): per group, its
    /// SMs, the CTAs that ran on them over all launches and their mean lateness in us (NaN where none ran there).
    pub fn by_groups(&self, groups: &[Vec<u32>]) -> Vec<(usize, usize, f64)> {
        groups
            .iter()
            .map(|g| {
                let (n, sum) = self
                    .sms
                    .iter()
                    .filter(|(sm, _, _)| g.contains(sm))
                    .fold((0, 0.0), |(n, sum), &(_, k, x)| (n + k, sum + x * k as f64));
                (g.len(), n, if n == 0 { f64::NAN } else { sum / n as f64 })
            })
            .collect()
    }

    /// The summary `ring_trace --repeat` prints: the widths, the correlations, lateness by units and the `last`
    /// latest and earliest SMs.
    pub fn summary(&self, last: usize) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let w = crate::timing::stats(self.widths.clone());
        let _ = writeln!(
            s,
            "{} launches: last CTA's end less the first's {:.2} (median) / {:.2} (min) / {:.2} (max) us",
            self.launches, w.median_us, w.min_us, w.max_us
        );
        let _ = writeln!(
            s,
            "lateness (end less the launch's median end) between consecutive launches: correlation by CTA {:.2}, by SM              {:.2}; with the CTA's start {:.2}",
            self.by_cta, self.by_sm, self.with_start
        );
        for (u, n, x) in &self.by_units {
            let _ = writeln!(s, "  CTAs of {u:3} units: {n:5} over the launches, mean lateness {x:+.3} us");
        }
        let row = |(sm, n, x): &(u32, usize, f64)| format!("SM {sm:3} {x:+.3} us ({n})");
        let _ = writeln!(s, "latest SMs: {}", self.sms.iter().take(last).map(row).collect::<Vec<_>>().join(", "));
        let _ =
            writeln!(s, "earliest SMs: {}", self.sms.iter().rev().take(last).map(row).collect::<Vec<_>>().join(", "));
        s
    }
}

/// Shares of `steps` row steps for the CTAs of `launches` (by block index) that would end them together: each
/// CTA's share in proportion to its streaming rate (units a us: its traced units' landings, first to last, in its
/// own clock, the mean over the launches), at least 1 and at most `cap` a CTA (`ROOFLINE_RING_SPLIT`'s form, which
/// `ring_trace --balance` prints). An error where a CTA has fewer than 2 traced units, or the CTAs cannot hold
/// `steps` at `cap` each.
pub fn balanced_shares(launches: &[Timeline], steps: usize, cap: usize) -> Result<Vec<usize>, String> {
    let ctas = launches.first().map_or(0, |t| t.ctas.len());
    if ctas == 0 || launches.iter().any(|t| t.ctas.len() != ctas) {
        return Err("no launches, or their CTA counts differ".into());
    }
    if ctas * cap < steps || ctas > steps {
        return Err(format!("{ctas} CTAs cannot take {steps} row steps, 1 to {cap} each"));
    }
    // Each CTA's rate: units over the time from its first unit's landing to its last traced one's.
    let mut rate = Vec::with_capacity(ctas);
    for c in 0..ctas {
        let per_launch: Vec<f64> = launches
            .iter()
            .filter_map(|t| {
                let u = &t.ctas[c].units;
                let (first, last) = (u.first()?, u.last()?);
                (u.len() >= 2 && last.landed > first.landed)
                    .then(|| (u.len() - 1) as f64 / (last.landed - first.landed))
            })
            .collect();
        if per_launch.is_empty() {
            return Err(format!("CTA {c}: fewer than 2 traced units, no rate"));
        }
        rate.push(per_launch.iter().sum::<f64>() / per_launch.len() as f64);
    }
    // Water-filling: shares in proportion to the rates, those past `cap` held at it and the rest shared again.
    let mut capped = vec![false; ctas];
    let ideal = loop {
        let left = steps - cap * capped.iter().filter(|&&c| c).count();
        let sum: f64 = (0..ctas).filter(|&c| !capped[c]).map(|c| rate[c]).sum();
        let ideal: Vec<f64> =
            (0..ctas).map(|c| if capped[c] { cap as f64 } else { left as f64 * rate[c] / sum }).collect();
        let over: Vec<usize> = (0..ctas).filter(|&c| !capped[c] && ideal[c] > cap as f64).collect();
        if over.is_empty() {
            break ideal;
        }
        for c in over {
            capped[c] = true;
        }
    };
    // Whole steps: at least 1 each, the floors, then the largest remainders below the cap.
    let mut shares: Vec<usize> = ideal.iter().map(|&x| (x.floor() as usize).clamp(1, cap)).collect();
    let mut order: Vec<usize> = (0..ctas).collect();
    order.sort_by(|&a, &b| (ideal[b] - ideal[b].floor()).total_cmp(&(ideal[a] - ideal[a].floor())));
    let mut total: usize = shares.iter().sum();
    while total != steps {
        let before = total;
        for &c in &order {
            if total < steps && shares[c] < cap {
                shares[c] += 1;
                total += 1;
            } else if total > steps && shares[c] > 1 && ideal[c] < shares[c] as f64 {
                shares[c] -= 1;
                total -= 1;
            }
        }
        if total == before {
            // (The floors' minimum of 1 left more than `steps`: take from the largest shares.)
            let c = (0..ctas).max_by_key(|&c| shares[c]).unwrap_or(0);
            shares[c] -= 1;
            total -= 1;
        }
    }
    Ok(shares)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// y's bits for CTAs whose timelines are `ctas[c]` (word index, value) pairs, `words` words each (pairs past them
    /// left out, as the kernel leaves out units past its words).
    fn y_of(ctas: &[Vec<(usize, u32)>], words: usize) -> Vec<u16> {
        let mut y = vec![0u16; 2 * words * ctas.len()];
        for (c, ws) in ctas.iter().enumerate() {
            for &(i, v) in ws.iter().filter(|(i, _)| *i < words) {
                y[2 * (c * words + i)] = (v & 0xffff) as u16;
                y[2 * (c * words + i) + 1] = (v >> 16) as u16;
            }
        }
        y
    }

    /// A CTA at 2000 MHz starting at globaltimer `gt0` and clock `clk0` (both may wrap), ending 8 us later, with two
    /// units.
    fn cta(gt0: u32, clk0: u32, sm: u32) -> Vec<(usize, u32)> {
        let at = |us: f64| clk0.wrapping_add((us * 2000.0) as u32);
        vec![
            (GT_START, gt0),
            (GT_END, gt0.wrapping_add(8000)),
            (START, clk0),
            (END, at(8.0)),
            (SMID, sm),
            (INIT, at(0.25)),
            (SCALES_ISSUED, at(0.5)),
            (SYNCED, at(0.6)),
            (SCALES_LANDED, at(1.5)),
            (X_PACKED, at(1.8)),
            (UNITS, at(0.7)),
            (UNITS + 1, at(2.0)),
            (UNITS + 2, at(2.5)),
            (UNITS + 3, at(0.8)),
            (UNITS + 4, at(7.5)),
            (UNITS + 5, at(7.9)),
        ]
    }

    #[test]
    fn timelines_parse_into_us_from_the_clock_the_ctas_ran_at() {
        // The second CTA's clock and globaltimer wrap during its run.
        let y = y_of(&[cta(1_000_000, 5, 3), cta(1_000_500, u32::MAX - 1000, 7)], 16);
        let t = Timeline::parse(&y, 2, |_| 2, 0.0).unwrap();
        assert!((t.mhz - 2000.0).abs() < 1.0, "{}", t.mhz);
        let (a, b) = (&t.ctas[0], &t.ctas[1]);
        assert_eq!((a.sm, b.sm), (3, 7));
        assert!((b.start - 0.5).abs() < 1e-9 && (b.end - 8.5).abs() < 1e-9, "{b:?}");
        for c in [a, b] {
            assert!((c.done - 8.0).abs() < 1e-3 && (c.x_packed - 1.8).abs() < 1e-3 && (c.init - 0.25).abs() < 1e-3);
            assert_eq!(c.units.len(), 2);
            assert!((c.units[1].landed - 7.5).abs() < 1e-3 && (c.units[1].decoded - 7.9).abs() < 1e-3);
        }
        let s = t.summary(1);
        assert!(s.contains("end 8.00 (first) / 8.25 (median) / 8.50 (last)"), "{s}");
        assert!(s.contains("end - last landing: median 0.50, max 0.50"), "{s}");
        assert!(s.contains("CTA   1 (SM   7) ends 8.50 us"), "{s}");
    }

    #[test]
    fn a_point_recorded_just_before_the_start_reads_as_a_small_negative_time() {
        let mut w = cta(1_000_000, 5, 3);
        w.retain(|(i, _)| *i != SYNCED);
        w.push((SYNCED, 5u32.wrapping_sub(20)));
        let t = Timeline::parse(&y_of(&[w], 16), 1, |_| 2, 0.0).unwrap();
        assert!((t.ctas[0].synced + 0.01).abs() < 1e-6, "{}", t.ctas[0].synced);
    }

    /// A launch whose CTA c ran on SM `sm(c)` with `units(c)` units and ended at `end(c)` us.
    fn launch(ends: &[f64], sm: impl Fn(usize) -> u32, units: impl Fn(usize) -> usize) -> Timeline {
        let mut y = Vec::new();
        for (c, e) in ends.iter().enumerate() {
            let mut w = cta(0, 0, sm(c));
            w.retain(|(i, _)| *i != GT_END);
            w.push((GT_END, (e * 1e3) as u32));
            y.push(w);
        }
        let y = y_of(&y, 16);
        Timeline::parse(&y, ends.len(), units, 2000.0).unwrap()
    }

    #[test]
    fn the_spread_tells_lasting_lateness_from_chance() {
        // CTA 3 is late both times, on the same SM; CTAs with 3 units end later than those with 2.
        let a = launch(&[8.0, 8.1, 8.2, 9.0], |c| c as u32 * 2, |c| 2 + c / 2);
        let b = launch(&[8.1, 8.0, 8.3, 8.9], |c| c as u32 * 2, |c| 2 + c / 2);
        let s = Spread::of(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(s.launches, 2);
        assert!((s.widths[0] - 1.0).abs() < 1e-6 && (s.widths[1] - 0.9).abs() < 1e-6, "{:?}", s.widths);
        assert!(s.by_cta > 0.9 && s.by_sm > 0.9, "{s:?}");
        assert_eq!(s.sms[0].0, 6);
        assert_eq!(s.by_units.iter().map(|u| (u.0, u.1)).collect::<Vec<_>>(), vec![(2, 4), (3, 4)]);
        assert!(s.by_units[1].2 > s.by_units[0].2);
        // The late CTA moves to another SM in the second launch: by CTA still 1, by SM no longer.
        let c = launch(&[8.1, 8.0, 8.3, 8.9], |c| (3 - c) as u32 * 2, |_| 2);
        let t = Spread::of(&[a.clone(), c]).unwrap();
        assert!(t.by_cta > 0.9 && t.by_sm < 0.0, "{t:?}");
        let text = s.summary(2);
        assert!(text.contains("latest SMs: SM   6"), "{text}");
        // By group: SMs {0, 2} (CTAs 0 and 1: -0.125 us late on average) against {4, 6} (CTAs 2 and 3: +0.425).
        let g = s.by_groups(&[vec![0, 2], vec![4, 6], vec![8]]);
        assert_eq!((g[0].0, g[0].1, g[1].1, g[2].1), (2, 4, 4, 0));
        assert!(g[1].2 > g[0].2 && g[2].2.is_nan(), "{g:?}");
        // The test CTAs' two units land 5.5 us apart, all at one rate: an even split, the remainder to the first.
        assert_eq!(balanced_shares(&[a.clone(), b.clone()], 9, 3).unwrap(), vec![3, 2, 2, 2]);
        assert!(balanced_shares(std::slice::from_ref(&a), 13, 3).unwrap_err().contains("cannot take"));
        assert!(Spread::of(&[a]).unwrap_err().contains("2 or more"));
    }

    #[test]
    fn balanced_shares_follow_the_ctas_rates() {
        // CTA 1 streams twice as fast as CTA 0 (its units land 1 us apart against 2).
        let mut t = launch(&[8.0, 8.0], |c| c as u32, |_| 3);
        for (c, gap) in [(0, 2.0), (1, 1.0)] {
            t.ctas[c].units = (0..3)
                .map(|u| UnitTimes { issued: 0.0, landed: 1.0 + gap * u as f64, decoded: 1.5 + gap * u as f64 })
                .collect();
        }
        assert_eq!(balanced_shares(&[t.clone()], 30, 30).unwrap(), vec![10, 20]);
        // At most 15 each: the fast CTA held at its cap.
        assert_eq!(balanced_shares(&[t.clone()], 30, 15).unwrap(), vec![15, 15]);
        // At most 18: the slow one takes the rest.
        assert_eq!(balanced_shares(&[t.clone()], 30, 18).unwrap(), vec![12, 18]);
        assert_eq!(balanced_shares(&[t.clone()], 2, 30).unwrap(), vec![1, 1]);
        t.ctas[0].units.truncate(1);
        assert!(balanced_shares(&[t], 30, 30).unwrap_err().contains("CTA 0"));
    }

    #[test]
    fn a_timeline_needs_room_and_a_clock() {
        assert!(Timeline::parse(&[0u16; 20], 1, |_| 1, 1980.0).unwrap_err().contains("words a CTA"));
        // No globaltimer movement and no fallback: no clock.
        assert!(Timeline::parse(&[0u16; 26], 1, |_| 1, 0.0).unwrap_err().contains("no clock"));
        // Units past the words are counted, not traced.
        let t = Timeline::parse(&y_of(&[cta(0, 0, 0)], 13), 1, |_| 5, 0.0).unwrap();
        assert_eq!((t.ctas[0].units.len(), t.ctas[0].unit_count, traced_units(13)), (1, 5, 1));
    }
}
