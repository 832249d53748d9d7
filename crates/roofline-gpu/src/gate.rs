//! A host gate in a stream: the stream stops at a host function until the host opens the gate, so that the
//! launches of a timed sample are all enqueued before the GPU runs the first of them.
//!
//! Without it, a sample of short kernels measures the host as much as the GPU: when the host's per-launch work
//! (the engine's plan and kernel lookup, the driver's launch: 3.4-8 us for a weight-only GEMV on the H200's
//! host, session 42, 3.1-3.5 us once the engine kept its per-shape work, session 43; cudarc's event tracking adds
//! to it only once the context has a second stream) takes longer than a kernel, the GPU waits between launches
//! and the events time the host's launch rate. [`crate::timing::time`] closes a gate before each sample's start
//! event and opens it once the sample's launches are enqueued (nvbench's "blocking kernel" does the same with a
//! spinning kernel; a host function needs no kernel and no mapped memory).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::{sys, CudaStream};

use crate::GpuError;

/// The longest a gate holds its stream: [`timeout_for`]'s ceiling.
pub const GATE_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest time a gate holds its stream before it gives up: [`timeout_for`]'s floor, far above the
/// host's time to enqueue a sample (under 2 ms for 64 launches of a weight-only GEMV).
pub const MIN_GATE_TIMEOUT: Duration = Duration::from_millis(50);

/// How long a gate waits for a host that expects to enqueue its sample in `enqueue`: 20 times that, within
/// [`MIN_GATE_TIMEOUT`]..=[`GATE_TIMEOUT`].
///
/// A gate whose host is held longer is a deadlock, not a slow host: in a process where other threads also
/// use the GPU, one of them may make a driver call that waits for the whole device (a module load, a
/// synchronizing free, a cuBLASLt handle) and holds the driver's locks meanwhile, so the gated thread cannot
/// enqueue its launches until the gate gives up (nvbench's blocking kernel has a timeout for the same
/// reason). Session 46 measured it on the H200: three GPU unit tests in parallel threads waited out 10 s
/// gates 1-3 times every 1000 samples, so the tests never ended, while each alone, or all three ungated,
/// ended in 51 s. A short timeout bounds that wait; the sample it spoilt is timed again ([`Opened`]).
pub fn timeout_for(enqueue: Duration) -> Duration {
    enqueue.saturating_mul(20).clamp(MIN_GATE_TIMEOUT, GATE_TIMEOUT)
}

/// Whether the gate is open, and a condition to wait for it; how long to wait, and whether that ran out.
struct State {
    open: Mutex<bool>,
    opened: Condvar,
    timeout: Duration,
    timed_out: AtomicBool,
}

/// A closed gate in a stream: the work enqueued after [`Gate::close`] runs once the gate is opened
/// ([`Gate::open`], or dropped) or once its timeout has passed.
pub struct Gate {
    state: Arc<State>,
}

/// An opened gate: whether the stream went on before the host opened it.
pub struct Opened {
    state: Arc<State>,
}

impl Opened {
    /// Whether the gate's timeout ran out before the host opened it, so the GPU may have run the sample's
    /// launches as the host enqueued them. Final once the stream has passed the gate (e.g. once an event
    /// recorded after it has completed); `false` before.
    pub fn timed_out(&self) -> bool {
        self.state.timed_out.load(Ordering::Acquire)
    }
}

impl Gate {
    /// Enqueues a closed gate on `stream`: the stream's later work waits until [`Gate::open`], or `timeout`.
    pub fn close(stream: &CudaStream, timeout: Duration) -> Result<Gate, GpuError> {
        let state = Arc::new(State::new(timeout));
        let data = Arc::into_raw(state.clone()) as *mut c_void;
        stream.context().bind_to_thread()?;
        // SAFETY: `wait_until_open` takes back the one reference `data` holds (`Arc::into_raw` above), and the
        // driver calls it exactly once when the call succeeds; the function calls no CUDA API (host
        // functions may not) and cannot unwind (poisoned locks are taken over, nothing else panics).
        let launched = unsafe { sys::cuLaunchHostFunc(stream.cu_stream(), Some(wait_until_open), data) }.result();
        if let Err(e) = launched {
            // SAFETY: the driver did not take `data`: its reference is released here, once.
            drop(unsafe { Arc::from_raw(data as *const State) });
            return Err(e.into());
        }
        Ok(Gate { state })
    }

    /// Opens the gate: the stream goes on.
    pub fn open(self) -> Opened {
        Opened { state: self.state.clone() }
    }
}

impl State {
    fn new(timeout: Duration) -> State {
        State { open: Mutex::new(false), opened: Condvar::new(), timeout, timed_out: AtomicBool::new(false) }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        *self.state.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.state.opened.notify_all();
    }
}

/// The gate's host function: returns once the gate is open, or after its timeout.
unsafe extern "C" fn wait_until_open(data: *mut c_void) {
    // SAFETY: `data` is the reference `Gate::close` leaked for this one call.
    let state = unsafe { Arc::from_raw(data as *const State) };
    let deadline = Instant::now() + state.timeout;
    let mut open = state.open.lock().unwrap_or_else(|p| p.into_inner());
    while !*open {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            state.timed_out.store(true, Ordering::Release);
            break;
        }
        open = state.opened.wait_timeout(open, left).map_or_else(|p| p.into_inner().0, |(g, _)| g);
    }
}

/// Whether timed samples are gated: yes, unless `ROOFLINE_TIMING_GATE` is `0` (the A/B switch of a probe).
pub fn enabled() -> bool {
    std::env::var("ROOFLINE_TIMING_GATE").map_or(true, |v| v.trim() != "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_function_returns_once_the_gate_opens() {
        // The host function alone (no GPU): a thread blocked in it returns when the gate is opened.
        let state = Arc::new(State::new(GATE_TIMEOUT));
        let data = Arc::into_raw(state.clone()) as usize;
        let t = Instant::now();
        let waiter = std::thread::spawn(move || {
            // SAFETY: `data` is the reference leaked above, for this one call.
            unsafe { wait_until_open(data as *mut c_void) };
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "the host function returned while the gate was closed");
        let opened = Gate { state: state.clone() }.open();
        let waited = waiter.join().expect("the waiting thread");
        assert!(waited >= Duration::from_millis(50) && waited < GATE_TIMEOUT);
        assert!(!opened.timed_out());
        // The host function released its reference: only the test's and the opened gate's are left.
        drop(opened);
        assert_eq!(Arc::strong_count(&state), 1);
    }

    #[test]
    fn a_gate_never_opened_gives_up_after_its_timeout_and_says_so() {
        let state = Arc::new(State::new(Duration::from_millis(30)));
        let gate = Gate { state: state.clone() };
        let t = Instant::now();
        // SAFETY: the reference leaked here is taken back by this one call.
        unsafe { wait_until_open(Arc::into_raw(state.clone()) as *mut c_void) };
        assert!(t.elapsed() >= Duration::from_millis(30));
        let opened = gate.open();
        assert!(opened.timed_out());
    }

    #[test]
    fn timeouts_scale_with_the_enqueue_within_bounds() {
        assert_eq!(timeout_for(Duration::ZERO), MIN_GATE_TIMEOUT);
        assert_eq!(timeout_for(Duration::from_micros(500)), MIN_GATE_TIMEOUT);
        // A host at 200 us a launch, 64 launches a sample (the slow-host test): 12.8 ms to enqueue.
        assert_eq!(timeout_for(Duration::from_micros(12_800)), Duration::from_millis(256));
        assert_eq!(timeout_for(Duration::from_secs(5)), GATE_TIMEOUT);
    }
}
