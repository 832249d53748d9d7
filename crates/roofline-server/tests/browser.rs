//! End-to-end test of the web page in headless Chromium (Debian's `chromium`, `/usr/bin/chromium`, or the
//! path in `ROOFLINE_CHROMIUM`), driven over the Chrome DevTools Protocol (raw CDP over a WebSocket).
//!
//! Starts the real server on an ephemeral loopback port, loads `/`, checks the chart and table, changes M and
//! sees both update, hovers and clicks a point, toggles a format, and saves a screenshot PNG under the cargo
//! target directory (`CARGO_TARGET_TMPDIR/roofline-page.png`). CI installs Chromium with `scripts/ci-deps.sh`;
//! when it is missing this test fails, on purpose.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use roofline_core::{predict_report, Format, HardwareProfile, PredictRequest, Scheme};
use roofline_server::ServerConfig;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

fn chromium_path() -> PathBuf {
    let path = std::env::var_os("ROOFLINE_CHROMIUM").map(PathBuf::from).unwrap_or_else(|| "/usr/bin/chromium".into());
    assert!(
        path.exists(),
        "headless Chromium not found at {} (install Debian's `chromium` package: scripts/ci-deps.sh does it, \
         or set ROOFLINE_CHROMIUM)",
        path.display()
    );
    path
}

/// Starts Chromium with remote debugging on a free port and returns it with its browser WebSocket URL.
async fn launch(profile: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(chromium_path())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1400,1800",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start chromium");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let url = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(pos) = line.find("ws://") {
                return line[pos..].trim().to_string();
            }
        }
        panic!("chromium exited without printing its DevTools URL");
    })
    .await
    .expect("chromium printed its DevTools URL within 60 s");
    // Keep draining stderr so Chromium never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

/// A minimal CDP client: one command at a time, events kept for inspection.
struct Cdp {
    ws: Ws,
    next_id: u64,
    session: Option<String>,
    events: Vec<Value>,
}

impl Cdp {
    async fn connect(url: &str) -> Cdp {
        let (ws, _) = tokio_tungstenite::connect_async(url).await.expect("connect to DevTools");
        Cdp { ws, next_id: 0, session: None, events: Vec::new() }
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        self.ws.send(Message::Text(msg.to_string().into())).await.expect("send");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = tokio::time::timeout(left, self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method} within 30 s"))
                .expect("socket open")
                .expect("frame");
            let Message::Text(text) = frame else { continue };
            let v: Value = serde_json::from_str(&text).expect("CDP JSON");
            if v["id"] == json!(id) {
                assert!(v.get("error").is_none(), "{method} failed: {}", v["error"]);
                return v["result"].clone();
            }
            if v.get("method").is_some() {
                self.events.push(v);
            }
        }
    }

    /// Evaluates `expr` in the page (awaiting promises) and returns its JSON value.
    async fn eval(&mut self, expr: &str) -> Value {
        let r = self
            .call("Runtime.evaluate", json!({"expression": expr, "returnByValue": true, "awaitPromise": true}))
            .await;
        assert!(r.get("exceptionDetails").is_none(), "page threw on `{expr}`: {}", r["exceptionDetails"]);
        r["result"]["value"].clone()
    }

    /// Polls `expr` until it is `true` (30 s at most).
    async fn wait_for(&mut self, what: &str, expr: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.eval(expr).await == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let state = self.eval(STATE).await;
        panic!("timed out waiting for {what}; page state: {state:#}");
    }
}

/// What the test reads off the page.
const STATE: &str = r#"(() => {
  const rows = [...document.querySelectorAll('#predict-table tbody tr')];
  const svg = document.querySelector('#chart svg');
  return {
    caption: document.querySelector('#table-caption').textContent,
    rows: rows.map(r => [...r.cells].map(c => c.textContent.trim())),
    title: svg ? svg.querySelector('text.title').textContent : null,
    points: svg ? [...svg.querySelectorAll('g.point')].map(g => ({label: g.dataset.label, time_us: g.dataset.timeUs, bound: g.dataset.bound})) : [],
    ticks: svg ? svg.querySelectorAll('text.tick').length : 0,
    winner: (document.querySelector('#rec-winner') || {}).textContent || null,
    model_rows: document.querySelectorAll('#model-table tbody tr').length,
    nvml: document.querySelector('#nvml').textContent,
    gemm_error: document.querySelector('#gemm-error').hidden ? null : document.querySelector('#gemm-error').textContent,
  };
})()"#;

fn predicted_time(m: u64, label_format: Format) -> f64 {
    let hw = HardwareProfile::preset("h100").unwrap();
    let req = PredictRequest { m, n: 4096, k: 4096, batch: 1, schemes: vec![Scheme::uniform(label_format)] };
    predict_report(&req, &hw).unwrap().rows[0].prediction.time_us
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_updates_when_m_changes() {
    // The server, on an ephemeral loopback port.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(roofline_server::serve_on(listener, ServerConfig::default(), async {
        let _ = stop_rx.await;
    }));

    let profile = std::env::temp_dir().join(format!("roofline-chromium-{}-{}", std::process::id(), addr.port()));
    std::fs::create_dir_all(&profile).unwrap();
    let (mut chrome, ws_url) = launch(&profile).await;
    let mut cdp = Cdp::connect(&ws_url).await;

    // A page target, attached in flat mode so its commands share this socket.
    let target = cdp.call("Target.createTarget", json!({"url": "about:blank"})).await;
    let attached = cdp.call("Target.attachToTarget", json!({"targetId": target["targetId"], "flatten": true})).await;
    cdp.session = Some(attached["sessionId"].as_str().expect("sessionId").to_string());
    cdp.call("Runtime.enable", json!({})).await;
    cdp.call("Page.enable", json!({})).await;
    cdp.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1400, "height": 1800, "deviceScaleFactor": 1, "mobile": false}),
    )
    .await;
    cdp.call("Page.navigate", json!({"url": format!("http://{addr}/?hardware_key=h100")})).await;

    // First render: the 1x4096x4096 decode GEMV, memory-bound everywhere.
    cdp.wait_for(
        "the first chart and table",
        "document.querySelectorAll('#predict-table tbody tr').length > 0 && !!document.querySelector('#chart svg g.point') && !!document.querySelector('#rec-winner')",
    )
    .await;
    let before = cdp.eval(STATE).await;
    assert!(before["caption"].as_str().unwrap().contains("M=1 N=4096 K=4096"), "{before:#}");
    assert!(before["title"].as_str().unwrap().contains("M=1 "), "{before:#}");
    let fp16 = |s: &Value| s["points"].as_array().unwrap().iter().find(|p| p["label"] == "FP16").cloned();
    let p = fp16(&before).expect("an FP16 point");
    assert_eq!(p["time_us"], json!(format!("{:.3}", predicted_time(1, Format::FP16))));
    assert_eq!(p["bound"], "memory");
    assert!(before["rows"].as_array().unwrap().iter().all(|r| r[6] == "memory"), "decode GEMV is memory-bound");
    assert!(before["ticks"].as_u64().unwrap() >= 6, "axis ticks drawn: {before:#}");
    assert!(!before["winner"].as_str().unwrap().is_empty());

    // Change M to 2048 as a user would (typing fires `input`).
    cdp.eval("(() => { const m = document.querySelector('#m'); m.value = '2048'; m.dispatchEvent(new Event('input', {bubbles: true})); return true; })()").await;
    cdp.wait_for(
        "the table and chart for M=2048",
        "document.querySelector('#table-caption').textContent.includes('M=2048') && document.querySelector('#chart svg text.title').textContent.includes('M=2048')",
    )
    .await;
    let after = cdp.eval(STATE).await;
    let p = fp16(&after).expect("an FP16 point");
    assert_eq!(p["time_us"], json!(format!("{:.3}", predicted_time(2048, Format::FP16))));
    assert_eq!(p["bound"], "compute", "a 2048-token prefill GEMM is compute-bound on H100");
    assert_eq!(after["rows"].as_array().unwrap().len(), before["rows"].as_array().unwrap().len());
    assert_ne!(after["rows"], before["rows"], "table changed");
    assert!(after["rows"].as_array().unwrap().iter().any(|r| r[6] == "compute"), "{after:#}");
    assert!(after["model_rows"].as_u64().unwrap() > 5, "model panel rendered its per-op table");
    assert!(after["nvml"].as_str().unwrap().contains("GPU"), "NVML panel says something about the GPU");
    assert!(after["gemm_error"].is_null());

    // Hover a point: the tooltip names its format, time, AI and bound.
    let tip = cdp
        .eval(
            r#"(() => { const g = [...document.querySelectorAll('#chart g.point')].find(g => g.dataset.label === 'FP16');
              const r = g.querySelector('circle').getBoundingClientRect();
              g.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: r.x + r.width / 2, clientY: r.y + r.height / 2}));
              const t = document.querySelector('#tooltip'); return t.hidden ? null : t.textContent; })()"#,
        )
        .await;
    let tip = tip.as_str().expect("tooltip visible");
    for word in ["FP16", "time", "AI", "bound", "compute"] {
        assert!(tip.contains(word), "tooltip {tip:?} lacks {word}");
    }
    // Click it: the row is selected and the prediction detail opens.
    let detail = cdp
        .eval(
            r#"(() => { const g = [...document.querySelectorAll('#chart g.point')].find(g => g.dataset.label === 'FP16');
              g.dispatchEvent(new MouseEvent('click', {bubbles: true}));
              const d = document.querySelector('#point-detail');
              const sel = document.querySelector('#predict-table tbody tr.selected');
              return {detail: d.hidden ? null : d.textContent, row: sel ? sel.dataset.label : null}; })()"#,
        )
        .await;
    assert_eq!(detail["row"], "FP16");
    assert!(detail["detail"].as_str().expect("detail shown").contains("predicted time"));

    // Toggle a format off: its row and point disappear.
    cdp.eval("document.querySelector('.chip[data-format=\"INT8\"]').click(), true").await;
    cdp.wait_for(
        "INT8 to leave the table and chart",
        "![...document.querySelectorAll('#predict-table tbody tr')].some(r => r.dataset.label === 'INT8') && ![...document.querySelectorAll('#chart g.point')].some(g => g.dataset.label === 'INT8')",
    )
    .await;
    // Model panel with a pasted config.json (a small Llama-style model), prefill of 512 tokens.
    let config = json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
        "tie_word_embeddings": true, "torch_dtype": "bfloat16"
    });
    cdp.eval(&format!(
        "(() => {{ const s = document.querySelector('#model-source'); s.value = '__paste'; s.dispatchEvent(new Event('change'));
           document.querySelector('#config-json').value = {config};
           document.querySelector('#phase').value = 'prefill'; document.querySelector('#seq').value = '512';
           document.querySelector('#model-table tbody').innerHTML = '';
           document.querySelector('#model-run').click(); return true; }})()",
        config = serde_json::to_string(&config.to_string()).unwrap()
    ))
    .await;
    cdp.wait_for(
        "the pasted model's analysis",
        "document.querySelectorAll('#model-table tbody tr').length > 5 && document.querySelector('#model-totals').textContent.includes('prefill')",
    )
    .await;
    let totals = cdp.eval("document.querySelector('#model-totals').textContent").await;
    let totals = totals.as_str().unwrap();
    assert!(totals.contains("time to first token") && totals.contains("context 512"), "{totals}");
    // A bad paste is reported in the panel, naming the field.
    cdp.eval("document.querySelector('#config-json').value = '{not json', document.querySelector('#model-run').click(), true").await;
    cdp.wait_for("the config error", "!document.querySelector('#model-error').hidden").await;
    let err = cdp.eval("document.querySelector('#model-error').textContent").await;
    assert!(err.as_str().unwrap().starts_with("config:"), "{err}");
    // Fixing the paste clears the error.
    cdp.eval(&format!(
        "document.querySelector('#config-json').value = {}, document.querySelector('#model-run').click(), true",
        serde_json::to_string(&config.to_string()).unwrap()
    ))
    .await;
    cdp.wait_for("the error to clear", "document.querySelector('#model-error').hidden").await;
    // The fused engine: norms and residual adds are shown inside their host ops.
    cdp.eval(
        "document.querySelector('#fused').checked = true, document.querySelector('#model-table tbody').innerHTML = '', \
         document.querySelector('#model-run').click(), true",
    )
    .await;
    cdp.wait_for(
        "the fused analysis",
        "document.querySelector('#model-totals').textContent.includes('fused engine') && \
         document.querySelector('#model-table tbody').textContent.includes('in qkv_proj')",
    )
    .await;

    // Another hardware (the seeds' b10 alias of seed-gb10): every panel follows.
    cdp.eval("(() => { const h = document.querySelector('#hardware'); h.value = 'seed-gb10'; h.dispatchEvent(new Event('change')); return true; })()").await;
    cdp.wait_for(
        "the seed-gb10 analysis",
        "document.querySelector('#table-caption').textContent.includes('[seed-gb10]') && document.querySelector('#chart svg text.title').textContent.includes('GB10')",
    )
    .await;
    cdp.eval("(() => { const h = document.querySelector('#hardware'); h.value = 'h100-sxm'; h.dispatchEvent(new Event('change')); return true; })()").await;
    cdp.wait_for(
        "the h100 analysis again",
        "document.querySelector('#table-caption').textContent.includes('[h100-sxm]') && document.querySelector('#chart svg text.title').textContent.includes('H100')",
    )
    .await;

    // The measured overlay (what "Measure on GPU" does with /api/measure's answers): give the page one
    // DualPoint as the GPU endpoint returns it and redraw; the chart comes from POST /api/plot.svg.
    let t_fp16 = predicted_time(2048, Format::FP16);
    cdp.eval(
        r#"(async () => {
          state.measuredKey = `${hwKey()}|2048|4096|4096|1`;
          const flops = 2 * 2048 * 4096 * 4096, bytes = 2 * (2048 * 4096 * 2 + 4096 * 4096);
          state.measured.set('FP16', {label: 'FP16',
            gemm: {m: 2048, n: 4096, k: 4096, batch: 1, weights_shared: true, scheme: {weights: 'FP16', activations: 'FP16', output: 'FP16'}},
            measurement: {device: 'test GPU', time_us: 90, time_us_min: 88, time_us_max: 95, runs: 10,
              tflops: flops / 90 / 1e6, bandwidth_gb_s: bytes / 90 / 1e3, kernel: 'cublaslt'}});
          await update();
          return true; })()"#,
    )
    .await;
    cdp.wait_for(
        "the measured point on the chart",
        r#"!!document.querySelector('#chart g.point[data-label="FP16"][data-measured-us="90.000"]')"#,
    )
    .await;
    let row = cdp
        .eval("[...document.querySelectorAll('#predict-table tbody tr')].find(r => r.dataset.label === 'FP16').textContent")
        .await;
    let row = row.as_str().unwrap();
    assert!(row.contains("90 µs"), "measured time in the table: {row}");
    let err = format!("{:.1}%", (90.0 - t_fp16) / 90.0 * 100.0);
    assert!(row.contains(&err), "error {err} in the table: {row}");

    // Hide the tooltip for the picture, then save the screenshot.
    cdp.eval("document.querySelector('#tooltip').hidden = true, window.scrollTo(0, 0), true").await;
    // The whole page: grow the viewport to the content's height first.
    let metrics = cdp.call("Page.getLayoutMetrics", json!({})).await;
    let height = metrics["cssContentSize"]["height"].as_f64().unwrap_or(1800.0).ceil().clamp(600.0, 6000.0);
    cdp.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1400, "height": height as u32, "deviceScaleFactor": 1, "mobile": false}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let shot = cdp.call("Page.captureScreenshot", json!({"format": "png"})).await;
    let png = base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str().unwrap()).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 50_000, "a real screenshot ({} bytes)", png.len());
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("roofline-page.png");
    std::fs::write(&out, &png).unwrap();
    eprintln!("screenshot: {}", out.display());

    // No script errors on the page.
    let errors: Vec<_> = cdp.events.iter().filter(|e| e["method"] == "Runtime.exceptionThrown").collect();
    assert!(errors.is_empty(), "page script errors: {errors:#?}");

    let _ = cdp.call("Target.closeTarget", json!({"targetId": target["targetId"]})).await;
    let _ = chrome.kill().await;
    let _ = std::fs::remove_dir_all(&profile);
    stop_tx.send(()).unwrap();
    server.await.unwrap().unwrap();
}
