//! A small HTTP/1.1 load generator for `roofline serve` (bench/server-load.md): N keep-alive connections
//! send the same request back to back for a fixed time, then it prints requests/s and latency percentiles.
//! Any non-200 answer or connection error is counted and makes the exit status non-zero.
//!
//! ```text
//! cargo run --release -p roofline-server --example loadgen -- \
//!     --addr 127.0.0.1:8000 --path '/api/analyze?hardware_key=b10' \
//!     --body '{"M":1,"N":4096,"K":4096,"precision":"FP16"}' --connections 8 --seconds 10
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[derive(Debug, Clone)]
struct Opts {
    addr: SocketAddr,
    path: String,
    body: Option<String>,
    connections: usize,
    seconds: f64,
    warmup_seconds: f64,
}

fn usage() -> String {
    "usage: loadgen --addr HOST:PORT --path PATH [--body JSON (POST; GET without)] [--connections N (8)] \
     [--seconds S (10)] [--warmup-seconds S (1)]"
        .to_string()
}

fn parse_args() -> Result<Opts, String> {
    let mut opts = Opts {
        addr: SocketAddr::from(([127, 0, 0, 1], 8000)),
        path: "/healthz".into(),
        body: None,
        connections: 8,
        seconds: 10.0,
        warmup_seconds: 1.0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value\n{}", usage()));
        match flag.as_str() {
            "--addr" => opts.addr = value()?.parse().map_err(|e| format!("--addr: {e}"))?,
            "--path" => opts.path = value()?,
            "--body" => opts.body = Some(value()?),
            "--connections" => {
                opts.connections = value()?.parse().map_err(|e| format!("--connections: {e}"))?;
                if opts.connections == 0 || opts.connections > 1024 {
                    return Err("--connections: expected 1 to 1024".into());
                }
            }
            "--seconds" => opts.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--warmup-seconds" => {
                opts.warmup_seconds = value()?.parse().map_err(|e| format!("--warmup-seconds: {e}"))?
            }
            "-h" | "--help" => return Err(usage()),
            other => return Err(format!("unknown flag {other}\n{}", usage())),
        }
    }
    let seconds_ok = opts.seconds > 0.0 && opts.seconds <= 3600.0;
    if !seconds_ok || !(0.0..=600.0).contains(&opts.warmup_seconds) {
        return Err("--seconds must be in (0, 3600], --warmup-seconds in [0, 600]".into());
    }
    Ok(opts)
}

fn request_bytes(o: &Opts) -> Vec<u8> {
    match &o.body {
        Some(b) => format!(
            "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{b}",
            o.path,
            o.addr,
            b.len()
        ),
        None => format!("GET {} HTTP/1.1\r\nhost: {}\r\n\r\n", o.path, o.addr),
    }
    .into_bytes()
}

/// Reads one response; returns (status, body length).
async fn read_response(
    r: &mut BufReader<TcpStream>,
    line: &mut String,
    body: &mut Vec<u8>,
) -> std::io::Result<(u16, usize)> {
    line.clear();
    if r.read_line(line).await? == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"));
    }
    let status: u16 = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut len = None;
    loop {
        line.clear();
        if r.read_line(line).await? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed in headers"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse::<usize>().ok();
            }
        }
    }
    let len = len.ok_or_else(|| std::io::Error::other("response without content-length"))?;
    body.resize(len, 0);
    r.read_exact(body).await?;
    Ok((status, len))
}

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
    bytes: u64,
}

async fn worker(o: Opts, req: Vec<u8>, warm_until: Instant, stop_at: Instant) -> Tally {
    let mut t = Tally::default();
    let mut conn: Option<BufReader<TcpStream>> = None;
    let (mut line, mut body) = (String::new(), Vec::new());
    while Instant::now() < stop_at {
        if conn.is_none() {
            match TcpStream::connect(o.addr).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    conn = Some(BufReader::new(s));
                }
                Err(e) => {
                    t.errors += 1;
                    t.first_error.get_or_insert_with(|| format!("connect: {e}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let start = Instant::now();
        let result = async {
            c.get_mut().write_all(&req).await?;
            read_response(c, &mut line, &mut body).await
        }
        .await;
        let took = start.elapsed();
        let counting = start >= warm_until;
        match result {
            Ok((200, n)) => {
                if counting {
                    t.latencies_us.push(took.as_micros() as u64);
                    t.bytes += n as u64;
                }
            }
            Ok((status, _)) => {
                t.errors += 1;
                t.first_error.get_or_insert_with(|| format!("HTTP {status}: {}", String::from_utf8_lossy(&body)));
            }
            Err(e) => {
                t.errors += 1;
                t.first_error.get_or_insert_with(|| format!("I/O: {e}"));
                conn = None;
            }
        }
    }
    t
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

#[tokio::main]
async fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let req = request_bytes(&o);
    let begin = Instant::now();
    let warm_until = begin + Duration::from_secs_f64(o.warmup_seconds);
    let stop_at = warm_until + Duration::from_secs_f64(o.seconds);
    let handles: Vec<_> =
        (0..o.connections).map(|_| tokio::spawn(worker(o.clone(), req.clone(), warm_until, stop_at))).collect();
    let mut all = Tally::default();
    for h in handles {
        match h.await {
            Ok(t) => {
                all.latencies_us.extend(t.latencies_us);
                all.errors += t.errors;
                all.bytes += t.bytes;
                if all.first_error.is_none() {
                    all.first_error = t.first_error;
                }
            }
            Err(e) => {
                all.errors += 1;
                all.first_error.get_or_insert_with(|| format!("worker: {e}"));
            }
        }
    }
    let measured_s = o.seconds;
    all.latencies_us.sort_unstable();
    let n = all.latencies_us.len();
    let mean = all.latencies_us.iter().sum::<u64>() as f64 / n.max(1) as f64 / 1000.0;
    println!(
        "{} {}  connections={} seconds={} (after {} s warm-up)",
        if o.body.is_some() { "POST" } else { "GET" },
        o.path,
        o.connections,
        o.seconds,
        o.warmup_seconds
    );
    println!(
        "requests={n} errors={} rps={:.0} latency_ms: mean={mean:.3} p50={:.3} p90={:.3} p99={:.3} max={:.3} body_bytes={}",
        all.errors,
        n as f64 / measured_s,
        pct(&all.latencies_us, 50.0),
        pct(&all.latencies_us, 90.0),
        pct(&all.latencies_us, 99.0),
        pct(&all.latencies_us, 100.0),
        if n > 0 { all.bytes / n as u64 } else { 0 }
    );
    if all.errors > 0 || n == 0 {
        eprintln!("loadgen: {} errors; first: {}", all.errors, all.first_error.unwrap_or_else(|| "no requests".into()));
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
