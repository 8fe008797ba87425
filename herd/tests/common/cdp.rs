//! A headless Chromium driven over the DevTools protocol, for the tests
//! of `herd report`'s pages (`herd/tests/report_browser.rs`).
//!
//! Chromium runs with `--remote-debugging-pipe`: it reads commands from
//! fd 3 and writes replies and events to fd 4, each a JSON message ended
//! by a NUL byte; no port is opened. It runs as the guide says a root
//! test must (`--headless --no-sandbox --disable-gpu --no-first-run
//! --disable-background-networking --disable-component-update
//! --disable-sync --disable-quic`, a fresh `--user-data-dir`), and every
//! connection it would make goes to a proxy address where the test
//! listens (`--proxy-server` with `--proxy-bypass-list=<-loopback>`, so
//! loopback too), which records the request's first line and closes the
//! connection: nothing leaves the machine, and a request fails at once
//! instead of hanging. Chromium itself goes there too, whatever it loads
//! (a fresh profile signing in, push messaging, the search engine: no
//! flag turns all of it off in Chromium 148), so what the proxy saw
//! counts against a page only when it is for a host the page names
//! ([`proxied_host`]); a page's own requests are known from its events.
//!
//! What a page did is collected from its events: console messages and
//! uncaught exceptions (`Runtime`), browser log entries such as refused
//! loads and Content-Security-Policy violations (`Log`), and every
//! request (`Network`).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The Chromium executable, if installed (`chromium` is Debian's name).
pub fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH")?
                .to_str()?
                .split(':')
                .map(|d| Path::new(d).join(name))
                .find(|p| p.is_file())
        })
}

/// What the proxy records for a connection that sent no request.
pub const IDLE: &str = "(a connection that sent no request)";

/// The host a proxied request line names: `CONNECT host:port ...`, or
/// `GET http://host[:port]/... ...`; `None` for [`IDLE`] and anything else.
pub fn proxied_host(line: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    let method = words.next()?;
    let target = words.next()?;
    let authority = if method == "CONNECT" {
        target
    } else {
        target.split_once("://")?.1.split('/').next()?
    };
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    };
    Some(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
}

/// What happened while a page loaded.
#[derive(Debug, Default, Clone)]
pub struct PageLog {
    /// Console messages of type error or assert, uncaught exceptions, and
    /// browser log entries of level error (refused loads, CSP violations).
    pub errors: Vec<String>,
    /// Every other console message and log entry.
    pub messages: Vec<String>,
    /// Every URL the page requested (its own included).
    pub requests: Vec<String>,
    /// Wall time from navigation to the load event, as the test saw it.
    pub load: Duration,
}

/// A running headless Chromium and one page in it.
pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: Receiver<Value>,
    next_id: u64,
    session: String,
    proxied: Arc<Mutex<Vec<String>>>,
    _profile: tempfile::TempDir,
}

/// Makes a pipe; both ends close on exec.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 succeeded, so both are open descriptors we now own.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Browser {
    /// Starts `exe` headless with a page of `width` x `height`.
    pub fn start(exe: &Path, width: u32, height: u32) -> Browser {
        use std::os::fd::AsRawFd;
        let profile = tempfile::tempdir().unwrap();
        // The proxy answers nothing: it counts each connection and closes
        // it, so a request through it fails at once instead of hanging.
        let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy_addr = proxy.local_addr().unwrap();
        let proxied = Arc::new(Mutex::new(Vec::new()));
        let seen = proxied.clone();
        std::thread::spawn(move || {
            for conn in proxy.incoming() {
                let Ok(mut c) = conn else { continue };
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 512];
                let n = c.read(&mut buf).unwrap_or(0);
                let line = match String::from_utf8_lossy(&buf[..n]).lines().next() {
                    Some(l) if !l.is_empty() => l.to_string(),
                    _ => IDLE.to_string(),
                };
                seen.lock().unwrap().push(line);
            }
        });
        let (cmd_r, cmd_w) = pipe();
        let (out_r, out_w) = pipe();
        let (a, b) = (cmd_r.as_raw_fd(), out_w.as_raw_fd());
        let mut cmd = Command::new(exe);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            // Chromium's own traffic, as little as flags allow.
            "--incognito",
            "--dns-prefetch-disable",
            "--disable-default-apps",
            "--disable-client-side-phishing-detection",
            "--disable-domain-reliability",
            "--no-pings",
            "--metrics-recording-only",
            "--disable-breakpad",
            "--no-default-browser-check",
            "--password-store=basic",
            "--safebrowsing-disable-auto-update",
            "--disable-field-trial-config",
            "--disable-features=OptimizationHints,OptimizationGuideModelDownloading,\
             OptimizationHintsFetching,OptimizationTargetPrediction,MediaRouter,\
             DialMediaRouteProvider,Translate,NetworkTimeServiceQuerying,AutofillServerCommunication,\
             CertificateTransparencyComponentUpdater,PreconnectToSearch,\
             SearchPrefetchServicePrefetching,Prerender2,NetworkPrediction",
            "--remote-debugging-pipe",
            &format!("--proxy-server=http://{proxy_addr}"),
            "--proxy-bypass-list=<-loopback>",
            &format!("--window-size={width},{height}"),
            &format!("--user-data-dir={}", profile.path().display()),
            "about:blank",
        ])

        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: between fork and exec only async-signal-safe calls
        // (fcntl, dup2) on descriptors this process owns. Both are first
        // moved above 9, so that dup2 onto 3 cannot close the other.
        unsafe {
            cmd.pre_exec(move || {
                let hi_a = libc::fcntl(a, libc::F_DUPFD, 10);
                let hi_b = libc::fcntl(b, libc::F_DUPFD, 10);
                if hi_a < 0 || hi_b < 0 || libc::dup2(hi_a, 3) < 0 || libc::dup2(hi_b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        drop((cmd_r, out_w));
        let (tx, rx) = channel();
        let mut reader = std::fs::File::from(out_r);
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1 << 16];
            loop {
                match reader.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                while let Some(end) = buf.iter().position(|&c| c == 0) {
                    let msg: Vec<u8> = buf.drain(..=end).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&msg[..end]) {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut b = Browser {
            child,
            to: std::fs::File::from(cmd_w),
            from: rx,
            next_id: 0,
            session: String::new(),
            proxied,
            _profile: profile,
        };
        let target = b.call(None, "Target.createTarget", json!({"url": "about:blank"}));
        let id = target["targetId"]
            .as_str()
            .expect("a target id")
            .to_string();
        let attached = b.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": id, "flatten": true}),
        );
        b.session = attached["sessionId"]
            .as_str()
            .expect("a session")
            .to_string();
        for domain in [
            "Runtime.enable",
            "Log.enable",
            "Network.enable",
            "Page.enable",
        ] {
            b.page(domain, json!({}));
        }
        b.page(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        b
    }

    /// Sends `method` and waits for its reply (events meanwhile go to `log`).
    fn call_logging(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
        log: &mut PageLog,
    ) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to chromium");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.recv(deadline, method);
            if v["id"].as_u64() == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
            record(&v, log);
        }
    }

    fn recv(&mut self, deadline: Instant, waiting_for: &str) -> Value {
        match self
            .from
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(v) => v,
            Err(RecvTimeoutError::Timeout) => {
                panic!("chromium did not answer {waiting_for} within 60 s")
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!(
                    "chromium exited while waiting for {waiting_for}: {:?}",
                    self.child.try_wait()
                )
            }
        }
    }

    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.call_logging(session, method, params, &mut PageLog::default())
    }

    /// A command to the page.
    pub fn page(&mut self, method: &str, params: Value) -> Value {
        let s = self.session.clone();
        self.call(Some(&s), method, params)
    }

    /// Loads `file` and waits for its load event and a moment after it
    /// (late errors); returns what happened.
    pub fn load(&mut self, file: &Path) -> PageLog {
        let mut log = PageLog::default();
        let url = format!("file://{}", file.canonicalize().unwrap().display());
        let s = self.session.clone();
        let t0 = Instant::now();
        self.call_logging(Some(&s), "Page.navigate", json!({"url": url}), &mut log);
        let deadline = t0 + Duration::from_secs(60);
        loop {
            let v = self.recv(deadline, "Page.loadEventFired");
            if v["method"] == "Page.loadEventFired" {
                log.load = t0.elapsed();
                break;
            }
            record(&v, &mut log);
        }
        // Anything the page does right after loading is its own too.
        let settle = Instant::now() + Duration::from_millis(300);
        while let Ok(v) = self
            .from
            .recv_timeout(settle.saturating_duration_since(Instant::now()))
        {
            record(&v, &mut log);
        }
        log
    }

    /// Evaluates `expr` in the page; its value (`returnByValue`), and the
    /// events meanwhile into `log`.
    pub fn eval(&mut self, expr: &str, log: &mut PageLog) -> Value {
        let s = self.session.clone();
        let r = self.call_logging(
            Some(&s),
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
            log,
        );
        if let Some(e) = r.get("exceptionDetails") {
            log.errors.push(format!("evaluate threw: {e}"));
        }
        r["result"]["value"].clone()
    }

    /// A PNG of the page's `y`..`y + h` CSS pixels (the whole page with
    /// `h` = None, at most 16,000 px tall).
    pub fn screenshot(&mut self, path: &Path, y: f64, h: Option<f64>) {
        let m = self.page("Page.getLayoutMetrics", json!({}));
        let size = &m["cssContentSize"];
        let width = size["width"].as_f64().unwrap_or(1280.0);
        let full = size["height"].as_f64().unwrap_or(900.0);
        let height = h.unwrap_or(full - y).clamp(1.0, 16_000.0);
        let shot = self.page(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true,
                   "clip": {"x": 0, "y": y, "width": width, "height": height, "scale": 1}}),
        );
        let png = base64(shot["data"].as_str().expect("screenshot data"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, png).unwrap();
    }

    /// The first line of every request made to the proxy address so far
    /// (`CONNECT host:443 HTTP/1.1`, `GET http://... HTTP/1.1`).
    pub fn proxied(&self) -> Vec<String> {
        self.proxied.lock().unwrap().clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Files an event of the page into `log`.
fn record(v: &Value, log: &mut PageLog) {
    let p = &v["params"];
    match v["method"].as_str() {
        Some("Runtime.consoleAPICalled") => {
            let text: Vec<String> = p["args"]
                .as_array()
                .map(|a| a.iter().map(|x| x["value"].to_string()).collect())
                .unwrap_or_default();
            let line = format!(
                "console.{}: {}",
                p["type"].as_str().unwrap_or("?"),
                text.join(" ")
            );
            match p["type"].as_str() {
                Some("error" | "assert") => log.errors.push(line),
                _ => log.messages.push(line),
            }
        }
        Some("Runtime.exceptionThrown") => log.errors.push(format!(
            "uncaught exception: {}",
            p["exceptionDetails"]["exception"]["description"]
                .as_str()
                .or(p["exceptionDetails"]["text"].as_str())
                .unwrap_or("?")
        )),
        Some("Log.entryAdded") => {
            let e = &p["entry"];
            let line = format!(
                "log {} ({}): {} {}",
                e["level"], e["source"], e["text"], e["url"]
            );
            if e["level"] == "error" {
                log.errors.push(line);
            } else {
                log.messages.push(line);
            }
        }
        Some("Network.requestWillBeSent") => {
            if let Some(u) = p["request"]["url"].as_str() {
                log.requests.push(u.to_string());
            }
        }
        _ => {}
    }
}

/// Standard base64 (the screenshot's encoding) decoded.
pub fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for v in s.bytes().filter_map(val) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
