//! The timing harness shared by every measurement: CUDA events around each run, warm-up, median/min/max.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUresult, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaStream};

use crate::gate::{self, Gate};
use crate::GpuError;

/// How long and how often to time.
#[derive(Debug, Clone, Copy)]
pub struct TimingConfig {
    /// Untimed runs first.
    pub warmup: u32,
    /// At least this many timed runs...
    pub min_runs: u32,
    /// ...and at most this many...
    pub max_runs: u32,
    /// ...stopping once this much time was spent (after `min_runs`).
    pub budget_ms: f64,
    /// Most launches of a short op per timed sample (1 = one launch between each pair of events).
    pub max_inner: u32,
    /// GPU time to hold a steady load while a power meter samples (milliseconds; `--power` runs).
    pub power_ms: f64,
    /// Also time the op replayed from a CUDA graph (`timing::time_graph`; weight-only GEMVs, `--graph`).
    pub graph: bool,
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig {
            warmup: 10,
            min_runs: 100,
            max_runs: 1000,
            budget_ms: 2000.0,
            max_inner: 64,
            power_ms: 1500.0,
            graph: false,
        }
    }
}

/// Per-run statistics, microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimingStats {
    /// Median.
    pub median_us: f64,
    /// Fastest.
    pub min_us: f64,
    /// Slowest.
    pub max_us: f64,
    /// Timed samples.
    pub runs: u32,
    /// Launches per sample (short ops run back to back; see `time`).
    pub inner: u32,
    /// Median host time to enqueue one launch of the op, microseconds (NaN where not measured). At or above
    /// `median_us` the host could not have kept an ungated stream busy.
    pub host_us: f64,
    /// Whether each sample's launches were all enqueued before the GPU ran them (`crate::gate`).
    pub gated: bool,
    /// Samples timed again because their gates gave up before the host had enqueued them (a driver call of
    /// another thread held the host; see `gate::timeout_for`); not among `runs`.
    pub redone: u32,
}

impl TimingStats {
    /// `host_us` where it was measured.
    pub fn host(&self) -> Option<f64> {
        Some(self.host_us).filter(|h| h.is_finite())
    }

    /// How the samples were taken, for a kernel description: "23 launches per sample, gated (host 4.1 us a
    /// launch)".
    pub fn sample_words(&self) -> String {
        let host = self.host().map_or(String::new(), |h| format!(" (host {h:.2} us a launch)"));
        let redone = match self.redone {
            0 => String::new(),
            1 => ", 1 sample timed again (its gate timed out)".into(),
            n => format!(", {n} samples timed again (their gates timed out)"),
        };
        format!(
            "{} launch{} per sample, {}{host}{redone}",
            self.inner,
            if self.inner == 1 { "" } else { "es" },
            if self.gated { "gated" } else { "ungated" }
        )
    }
}

/// Target GPU time of one timed sample: short ops are launched `inner` times back to back between one
/// pair of events, so the host's launch latency overlaps device work instead of being timed.
pub const SAMPLE_TARGET_US: f64 = 200.0;

/// Times `op` (given the run index, to rotate inputs) with CUDA events.
///
/// Warm-up runs first; then one probe run sizes the sample: ops shorter than 200 us are launched `inner`
/// times back to back between the two events of a sample (up to 64), and the sample's time is divided by
/// `inner`. That is the op's steady-state time per launch, the time a model's chain of kernels pays.
/// At least `min_runs` samples, then more until `budget_ms` is spent or `max_runs` is reached.
///
/// Each sample is gated (`crate::gate`; `ROOFLINE_TIMING_GATE=0` turns it off): the stream waits at a host
/// function before the start event until all `inner` launches are enqueued, so the GPU runs them back to
/// back however slowly the host enqueues them; the host's enqueue time per launch is kept as `host_us`. A
/// gate waits at most `gate::timeout_for` the host's enqueue time of the sample (from the probe): a sample
/// whose gate gave up first (another thread's driver call held this one's launches) is timed again and
/// counted in `redone`; past [`MAX_REDONE`] such samples the rest are ungated, with a warning.
pub fn time(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    cfg: &TimingConfig,
    mut op: impl FnMut(usize) -> Result<(), GpuError>,
) -> Result<TimingStats, GpuError> {
    for i in 0..cfg.warmup as usize {
        op(i)?;
    }
    stream.synchronize()?;
    let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let mut i = cfg.warmup as usize;
    // Probe: the time of a few runs back to back sizes the sample; the host's time to enqueue them, the gates'
    // timeouts.
    start.record(stream)?;
    let probe_enqueue = Instant::now();
    for _ in 0..4 {
        op(i)?;
        i += 1;
    }
    let probe_host = probe_enqueue.elapsed() / 4;
    end.record(stream)?;
    end.synchronize()?;
    let probe_us = f64::from(start.elapsed_ms(&end)?) * 1e3 / 4.0;
    let inner = inner_runs(probe_us, cfg.max_inner);
    let mut gated = gate::enabled();
    let timeout = gate::timeout_for(probe_host.saturating_mul(inner as u32));
    let mut redone = 0u32;
    let mut times = Vec::new();
    let mut host = Vec::new();
    let mut spent_ms = 0.0;
    while (times.len() as u32) < cfg.max_runs && ((times.len() as u32) < cfg.min_runs || spent_ms < cfg.budget_ms) {
        let held = if gated { Some(Gate::close(stream, timeout)?) } else { None };
        start.record(stream)?;
        let enqueue = Instant::now();
        for _ in 0..inner {
            op(i)?;
            i += 1;
        }
        end.record(stream)?;
        let host_us = enqueue.elapsed().as_secs_f64() * 1e6 / inner as f64;
        let opened = held.map(Gate::open);
        end.synchronize()?;
        let ms = f64::from(start.elapsed_ms(&end)?);
        if opened.is_some_and(|o| o.timed_out()) {
            // The GPU went on before the host had enqueued the sample (see `gate::timeout_for`): time it again,
            // or, past MAX_REDONE such samples, go on ungated.
            redone += 1;
            if redone > MAX_REDONE {
                eprintln!(
                    "warning: {redone} samples' gates timed out ({} ms each) while {} samples were timed: the rest \
                     are ungated",
                    timeout.as_millis(),
                    times.len()
                );
                gated = false;
            }
            continue;
        }
        spent_ms += ms;
        host.push(host_us);
        times.push(ms * 1e3 / inner as f64);
    }
    let mut s = stats(times);
    s.inner = inner as u32;
    s.host_us = stats(host).median_us;
    s.gated = gated;
    s.redone = redone;
    Ok(s)
}

/// Samples [`time`] times again because their gates timed out, before it gives up gating the rest.
pub const MAX_REDONE: u32 = 20;

/// Launches of the op captured in one CUDA graph by [`time_graph`] (at least).
pub const GRAPH_LAUNCHES: usize = 64;

/// Times `op` replayed from a CUDA graph, the way serving engines run a decode step: `per_graph` launches
/// (`op(stream, i)`, `i` in `0..per_graph`, e.g. cycling over rotating buffers) are captured once on a new
/// stream, then the graph is launched back to back and timed as [`time`] does (one graph a launch); the
/// statistics are per op launch (the graph's time over `per_graph`). Launches inside a graph skip the
/// driver's per-launch work, and kernels launched with programmatic dependent launch keep their overlap as
/// programmatic graph edges.
///
/// Disables `ctx`'s cudarc event tracking for the rest of the process (as model-bench does): the caller's
/// buffers must be idle (their stream synchronized) and, from here on, used on one stream at a time with the
/// host reading them only after synchronizing.
pub fn time_graph(
    ctx: &Arc<CudaContext>,
    cfg: &TimingConfig,
    per_graph: usize,
    mut op: impl FnMut(&Arc<CudaStream>, usize) -> Result<(), GpuError>,
) -> Result<TimingStats, GpuError> {
    {
        let _alone = context_wide();
        ctx.synchronize()?;
    }
    // SAFETY: the device is idle (synchronized above); every launch of this measurement goes to the one
    // capture stream `s` and nothing reads the buffers before `s` is synchronized, so cudarc's cross-stream
    // event tracking (which would record events inside the capture, invalid there) is not needed. The
    // caller's contract (docs above) covers the rest of the process.
    unsafe { ctx.disable_event_tracking() };
    let s = ctx.new_stream()?;
    let per_graph = per_graph.max(1);
    let gcfg = TimingConfig { warmup: cfg.warmup.min(3), ..*cfg };
    let st = time_captured(ctx, &s, &gcfg, || (0..per_graph).try_for_each(|i| op(&s, i)))?;
    let per = per_graph as f64;
    Ok(TimingStats {
        median_us: st.median_us / per,
        min_us: st.min_us / per,
        max_us: st.max_us / per,
        runs: st.runs,
        inner: per_graph as u32,
        host_us: st.host_us / per,
        gated: st.gated,
        redone: st.redone,
    })
}

/// Captures what `enqueue` launches on `s` into one CUDA graph, times the graph's replays as [`time`] does,
/// one graph between each pair of events (`cfg.max_inner` is not used), and synchronizes `s`; the
/// statistics are per replay. `s` must be a stream of its own and cudarc's event tracking off (see
/// [`time_graph`]): a capture records only what `enqueue` launches on it.
pub fn time_captured(
    ctx: &Arc<CudaContext>,
    s: &Arc<CudaStream>,
    cfg: &TimingConfig,
    mut enqueue: impl FnMut() -> Result<(), GpuError>,
) -> Result<TimingStats, GpuError> {
    let graph = capture(s, &mut enqueue)?;
    let st = time(ctx, s, &TimingConfig { max_inner: 1, ..*cfg }, |_| Ok(graph.launch()?))?;
    s.synchronize()?;
    Ok(st)
}

/// Captures a graph at most this many times where something outside the capture invalidated it.
pub const CAPTURE_TRIES: usize = 4;

/// Captures what `enqueue` launches on `s` (thread-local capture mode) into an instantiated graph, holding
/// the capture side of [`CONTEXT_WIDE`]. A capture that something outside this crate's lock invalidates
/// anyway (another library's context-wide call in another thread; CUDA then fails it with
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`) is captured again, up to [`CAPTURE_TRIES`] times: `enqueue` only
/// records launches, so running it again records the same work. (Module loads and the lazy loading of a
/// kernel at its first launch in another thread did not invalidate captures on the H100: session 35.)
fn capture(
    s: &Arc<CudaStream>,
    enqueue: &mut dyn FnMut() -> Result<(), GpuError>,
) -> Result<cudarc::driver::CudaGraph, GpuError> {
    let mut tries = 0;
    loop {
        tries += 1;
        s.synchronize()?;
        let (captured, graph) = {
            let _capturing = capturing();
            s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
            let captured = enqueue();
            (captured, s.end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
        };
        let invalidated = captured.as_ref().err().is_some_and(is_capture_invalidated)
            || graph.as_ref().err().is_some_and(|e| e.0 == CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        if invalidated && tries < CAPTURE_TRIES {
            RETRIES.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        captured?;
        return graph?.ok_or_else(|| GpuError::Unsupported("stream capture produced no graph".into()));
    }
}

/// Whether `e` says a stream capture was invalidated (by a call outside it; [`time_captured`] tries again).
fn is_capture_invalidated(e: &GpuError) -> bool {
    matches!(e, GpuError::Driver(d) if d.0 == CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
}

/// Stream captures and context-wide work exclude each other in the process: CUDA forbids synchronizing a
/// context while any of its streams captures (its programming guide: a broader handle than the capturing
/// stream may not be synchronized). Captures in other threads of the process are no exception: on an H100
/// (CUDA 13.0, session 35) a `cuCtxSynchronize` or a GPU opened and dropped in one thread (cuBLASLt's handle
/// destruction synchronizes the device) while another thread captured crashed the process, and model-bench's
/// tests once saw a capture invalidated. Captures share this lock ([`capturing`]); the context-wide calls of
/// this crate take it alone ([`context_wide`]): [`time_graph`]'s synchronize, [`crate::Gpu::open`] and the
/// cuBLASLt handle's destruction.
static CONTEXT_WIDE: RwLock<()> = RwLock::new(());

/// Held while a stream capture is open ([`CONTEXT_WIDE`]). Never taken twice by one thread: captures do not
/// nest, and nothing inside one takes [`context_wide`].
fn capturing() -> RwLockReadGuard<'static, ()> {
    CONTEXT_WIDE.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held around a call that synchronizes the whole context or device ([`CONTEXT_WIDE`]): it waits for the
/// captures of other threads to end and keeps new ones from starting.
pub(crate) fn context_wide() -> RwLockWriteGuard<'static, ()> {
    CONTEXT_WIDE.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Captures invalidated from outside and captured again.
static RETRIES: AtomicUsize = AtomicUsize::new(0);

/// How many captures of this process [`time_captured`] has captured again after something outside them
/// invalidated them.
pub fn capture_retries() -> usize {
    RETRIES.load(Ordering::Relaxed)
}

/// Launches per timed sample for an op of `probe_us`: enough to fill [`SAMPLE_TARGET_US`], at most `max`.
pub fn inner_runs(probe_us: f64, max: u32) -> usize {
    if !(probe_us.is_finite() && probe_us > 0.0) {
        return 1;
    }
    ((SAMPLE_TARGET_US / probe_us).ceil() as usize).clamp(1, max.max(1) as usize)
}

/// Runs `op` back to back for at least `duration_ms` of GPU time (events around the whole run) and returns
/// (runs, GPU milliseconds). Used to hold a steady load while power is sampled.
pub fn sustain(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    duration_ms: f64,
    mut op: impl FnMut(usize) -> Result<(), GpuError>,
) -> Result<(u64, f64), GpuError> {
    let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let mut runs = 0u64;
    let mut total_ms = 0.0;
    // Chunks of launches, each bracketed by events, until the GPU time reaches the duration.
    let mut chunk = 8usize;
    while total_ms < duration_ms {
        start.record(stream)?;
        for _ in 0..chunk {
            op(runs as usize)?;
            runs += 1;
        }
        end.record(stream)?;
        end.synchronize()?;
        let ms = f64::from(start.elapsed_ms(&end)?);
        total_ms += ms;
        if ms < 50.0 {
            chunk = (chunk * 2).min(1 << 16);
        }
    }
    Ok((runs, total_ms))
}

/// Median, min and max of a set of times.
pub fn stats(mut times: Vec<f64>) -> TimingStats {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let median = if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        times[n / 2]
    } else {
        0.5 * (times[n / 2 - 1] + times[n / 2])
    };
    TimingStats {
        median_us: median,
        min_us: times.first().copied().unwrap_or(f64::NAN),
        max_us: times.last().copied().unwrap_or(f64::NAN),
        runs: n as u32,
        inner: 1,
        host_us: f64::NAN,
        gated: false,
        redone: 0,
    }
}

/// Today's date (UTC), `YYYY-MM-DD`, from the system clock.
pub fn today() -> String {
    let days =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400) as i64;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_max() {
        let s = stats(vec![3.0, 1.0, 2.0, 10.0]);
        assert_eq!((s.median_us, s.min_us, s.max_us, s.runs), (2.5, 1.0, 10.0, 4));
        assert_eq!(stats(vec![5.0, 1.0, 3.0]).median_us, 3.0);
    }

    #[test]
    fn short_ops_are_batched_long_ones_are_not() {
        assert_eq!(inner_runs(10.0, 64), 20);
        assert_eq!(inner_runs(1.0, 64), 64);
        assert_eq!(inner_runs(500.0, 64), 1);
        assert_eq!(inner_runs(0.0, 64), 1);
        assert_eq!(inner_runs(f64::NAN, 64), 1);
        assert_eq!(inner_runs(10.0, 1), 1);
    }

    #[test]
    fn sample_words_say_how_samples_were_taken() {
        let mut s = stats(vec![5.0]);
        assert_eq!((s.sample_words().as_str(), s.host()), ("1 launch per sample, ungated", None));
        s.inner = 23;
        s.gated = true;
        s.host_us = 4.126;
        assert_eq!(s.sample_words(), "23 launches per sample, gated (host 4.13 us a launch)");
        assert_eq!(s.host(), Some(4.126));
        s.redone = 1;
        assert_eq!(
            s.sample_words(),
            "23 launches per sample, gated (host 4.13 us a launch), 1 sample timed again (its gate timed out)"
        );
        s.redone = 3;
        assert!(s.sample_words().ends_with(", 3 samples timed again (their gates timed out)"));
    }

    #[test]
    fn date_is_iso() {
        let d = today();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"));
    }

    #[test]
    fn captures_and_context_wide_work_exclude_each_other() {
        // No context-wide call during a capture (one guard only: a thread never takes it twice).
        let capture = capturing();
        assert!(CONTEXT_WIDE.try_write().is_err());
        drop(capture);
        // A context-wide call keeps captures (and other such calls) out until it is done.
        let alone = context_wide();
        assert!(CONTEXT_WIDE.try_read().is_err() && CONTEXT_WIDE.try_write().is_err());
        drop(alone);
        // Released: a capture starts again (blocking, not `try_`: a GPU test beside it may hold the lock a moment).
        drop(capturing());
    }

    #[test]
    fn only_an_invalidated_capture_is_captured_again() {
        let driver = |r| GpuError::Driver(cudarc::driver::DriverError(r));
        assert!(is_capture_invalidated(&driver(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)));
        assert!(!is_capture_invalidated(&driver(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)));
        assert!(!is_capture_invalidated(&GpuError::Unsupported("stream capture produced no graph".into())));
    }
}
