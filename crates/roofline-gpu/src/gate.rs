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
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::{sys, CudaStream};

use crate::GpuError;

/// How long the stream waits at most for a gate that its host never opens (a bug, or a host thread stalled
/// that long): the stream then goes on, and the sample is timed as an ungated one would be.
pub const GATE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the gate is open, and a condition to wait for it.
#[derive(Default)]
struct State {
    open: Mutex<bool>,
    opened: Condvar,
}

/// A closed gate in a stream: the work enqueued after [`Gate::close`] runs once the gate is opened
/// ([`Gate::open`], or dropped).
pub struct Gate {
    state: Arc<State>,
}

impl Gate {
    /// Enqueues a closed gate on `stream`: the stream's later work waits until [`Gate::open`].
    pub fn close(stream: &CudaStream) -> Result<Gate, GpuError> {
        let state = Arc::new(State::default());
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
    pub fn open(self) {
        drop(self);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        *self.state.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.state.opened.notify_all();
    }
}

/// The gate's host function: returns once the gate is open (or after [`GATE_TIMEOUT`]).
unsafe extern "C" fn wait_until_open(data: *mut c_void) {
    // SAFETY: `data` is the reference `Gate::close` leaked for this one call.
    let state = unsafe { Arc::from_raw(data as *const State) };
    let deadline = Instant::now() + GATE_TIMEOUT;
    let mut open = state.open.lock().unwrap_or_else(|p| p.into_inner());
    while !*open {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
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
        // The host function alone (no GPU): a thread blocked in it returns when the gate is dropped.
        let state = Arc::new(State::default());
        let data = Arc::into_raw(state.clone()) as usize;
        let t = Instant::now();
        let waiter = std::thread::spawn(move || {
            // SAFETY: `data` is the reference leaked above, for this one call.
            unsafe { wait_until_open(data as *mut c_void) };
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "the host function returned while the gate was closed");
        drop(Gate { state: state.clone() });
        let waited = waiter.join().expect("the waiting thread");
        assert!(waited >= Duration::from_millis(50) && waited < GATE_TIMEOUT);
        // The host function released its reference: only the test's is left.
        assert_eq!(Arc::strong_count(&state), 1);
    }
}
