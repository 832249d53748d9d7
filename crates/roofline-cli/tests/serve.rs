//! Runs the real `roofline serve` on an ephemeral loopback port and sends it the seeds' request, as curl would
//! (`POST /api/analyze?hardware_key=b10`), and checks the answer equals `roofline predict --json`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 exchange with `connection: close`; returns (status, body).
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

#[test]
fn serve_answers_the_seeds_curl() {
    let child = Command::new(env!("CARGO_BIN_EXE_roofline"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start roofline serve");
    let mut server = Server(child);
    let stderr = server.0.stderr.take().unwrap();
    let mut line = String::new();
    BufReader::new(stderr).read_line(&mut line).unwrap();
    // "roofline serve: listening on http://127.0.0.1:PORT (web page at /, ...)"
    let addr = line.split("http://").nth(1).and_then(|s| s.split_whitespace().next()).expect(&line).to_string();
    assert!(addr.starts_with("127.0.0.1:"), "loopback by default: {line}");

    let (status, body) =
        http(&addr, "POST", "/api/analyze?hardware_key=b10", r#"{"M":1,"N":4096,"K":4096,"precision":"FP16"}"#);
    assert_eq!(status, 200, "{body}");
    let served: Value = serde_json::from_str(&body).unwrap();
    let cli = Command::new(env!("CARGO_BIN_EXE_roofline"))
        .args(["predict", "--hw", "b10", "--precision", "fp16", "--json"])
        .env_remove("ROOFLINE_HW")
        .output()
        .unwrap();
    assert!(cli.status.success());
    let printed: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(served, printed, "the API returns what `roofline predict --json` prints");

    let (status, body) = http(&addr, "POST", "/api/analyze", r#"{"M":1,"N":0,"K":4096}"#);
    assert_eq!(status, 422);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["field"], "n");
    let (status, body) = http(&addr, "GET", "/", "");
    assert_eq!(status, 200);
    assert!(body.contains("GEMM analyzer"));
}

#[test]
fn serve_help_and_bad_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_roofline")).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for word in ["--addr", "--cors", "127.0.0.1:8000", "openapi.json", "loopback"] {
        assert!(help.contains(word), "help lacks {word}: {help}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_roofline"))
        .args(["serve", "--cors", "*", "--addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("CORS"));
    let out = Command::new(env!("CARGO_BIN_EXE_roofline")).args(["serve", "--addr", "nowhere"]).output().unwrap();
    assert!(!out.status.success());
}
