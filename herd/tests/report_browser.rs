//! `herd report`'s pages in a real browser: a headless Chromium
//! (`common/cdp.rs`) loads the report of every input kind (real runs of
//! storm, `-r` sets, agent, compare and its journal, sweep, diff, the
//! `--report` of storm/compare/sweep/diff; fakes of a 512-CPU and a
//! 10,000-CPU host and of a newer herd's result) and each must load with
//! no console error, no uncaught exception, no refused load, no request
//! but its own file, no chart without drawn data, and sort its tables.
//! Every request of the browser goes to a proxy address the test
//! records: none may be for a host the page names (Chromium's own
//! background requests go there too, and are only listed).
//! A page made to break each rule shows the checks catch it. Screenshots
//! are left in `target/tmp/report-browser/`.
//!
//! As root (or under `HERD_TEST_STRICT=1`), a missing chromium fails the
//! test, naming it (scripts/test.sh installs it, `scripts/test-packages.txt`);
//! otherwise the test skips, saying so.

#[path = "common/cdp.rs"]
mod cdp;
mod common;
#[path = "common/fake_result.rs"]
mod fake_result;

use std::path::{Path, PathBuf};

use cdp::{Browser, PageLog};
use common::{herd, SMALL};

/// The browser, or `None` (skipped loudly) when it is missing without root.
fn chromium_or_skip() -> Option<PathBuf> {
    if let Some(p) = cdp::chromium() {
        return Some(p);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        panic!(
            "chromium is not installed: herd report's browser test needs Debian's chromium \
             (scripts/test.sh installs it as root, from scripts/test-packages.txt)"
        );
    }
    common::skip(
        "chromium is not installed and this is not root (scripts/test.sh installs it as root: \
         scripts/test-packages.txt)",
    );
    None
}

/// A fresh directory for this test's files (kept for the screenshots).
fn workdir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs herd with `args` in `dir`, which must succeed; its stdout.
fn run(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = herd().current_dir(dir).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "herd {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Every input kind, as saved results in `dir`: `(name, herd report args)`.
fn inputs(dir: &Path) -> Vec<(String, Vec<String>)> {
    // The common small storm, with the perf counters the host allows.
    let storm_flags: Vec<&str> = SMALL
        .iter()
        .copied()
        .filter(|a| *a != "--no-perf")
        .collect();
    let storm_flags = storm_flags.as_slice();
    let w = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
    let storm = [&["storm"], storm_flags, &["--contention", "--json"]].concat();
    w("storm.json", &run(dir, &storm));
    w(
        "set.json",
        &run(
            dir,
            &[&["storm"], storm_flags, &["-r", "2", "--json"]].concat(),
        ),
    );
    w(
        "agent.json",
        &run(dir, &["agent", "--waves", "2", "--jobs", "50", "--json"]),
    );
    run(
        dir,
        &[
            &[
                "compare",
                "-r",
                "2",
                "--cleanup",
                "locked,exitq",
                "--save",
                "cmp.json",
                "--journal",
                "cmp.jsonl",
            ],
            &["--report", "compare-flag.html", "--"][..],
            storm_flags,
        ]
        .concat(),
    );
    // The journal with its third run missing and its last line torn.
    let journal = std::fs::read_to_string(dir.join("cmp.jsonl")).unwrap();
    let mut lines: Vec<&str> = journal.lines().collect();
    lines.remove(3);
    let last = lines.pop().unwrap();
    w(
        "broken.jsonl",
        format!("{}\n{}", lines.join("\n"), &last[..last.len() / 2]).as_bytes(),
    );
    run(
        dir,
        &[
            &[
                "sweep",
                "--over",
                "per-wave=10,20",
                "-r",
                "2",
                "--cleanup",
                "locked,exitq",
                "--out",
                "sweep",
            ],
            &[
                "--report",
                "sweep-flag.html",
                "--",
                "--waves",
                "4",
                "--spin",
                "1000",
                "--sleep-ms",
                "20",
            ][..],
        ]
        .concat(),
    );
    w(
        "diff.json",
        &run(
            dir,
            &[
                "diff",
                "cmp.json",
                "cmp.json",
                "--json",
                "--report",
                "diff-flag.html",
            ],
        ),
    );
    run(
        dir,
        &[&["storm"], storm_flags, &["--report", "storm-flag.html"]].concat(),
    );
    let fake = |cpus, nodes, threads| {
        serde_json::to_vec(&fake_result::storm(cpus, nodes, threads)).unwrap()
    };
    w("fake512.json", &fake(512, 4, 100_000));
    w("fake10k.json", &fake(10_000, 16, 20_000));
    let mut newer = fake_result::storm(8, 2, 1000);
    newer["schema"] = 99.into();
    newer["herd_version"] = "9.0.0".into();
    newer["hyperdrive"] = serde_json::json!({"warp": [1, 2, 3]});
    w("newer.json", &serde_json::to_vec(&newer).unwrap());
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        ("storm".into(), s(&["storm.json"])),
        ("set".into(), s(&["set.json"])),
        ("agent".into(), s(&["agent.json"])),
        ("compare".into(), s(&["cmp.json"])),
        ("journal".into(), s(&["cmp.jsonl"])),
        ("journal-broken".into(), s(&["broken.jsonl"])),
        ("sweep".into(), s(&["sweep"])),
        ("diff".into(), s(&["diff.json"])),
        ("diff-pair".into(), s(&["--diff", "set.json", "storm.json"])),
        ("fake512".into(), s(&["fake512.json"])),
        ("fake10k".into(), s(&["fake10k.json"])),
        ("newer".into(), s(&["newer.json"])),
        (
            "several".into(),
            s(&["storm.json", "agent.json", "cmp.json", "sweep/data.json"]),
        ),
    ]
}

/// Per chart, whether any of its data elements has a size; and whether
/// sorting the first numeric column of a table orders it.
const CHECK_JS: &str = r#"(() => {
  const figs = [...document.querySelectorAll('figure.chart')];
  const drawn = el => { const r = el.getBoundingClientRect(); return r.width > 0 || r.height > 0; };
  const empty = figs.filter(f => ![...f.querySelectorAll('.d')].some(drawn))
    .map(f => (f.querySelector('figcaption') || f).textContent.slice(0, 80));
  const strips = [...document.querySelectorAll('td.dots svg')];
  const emptyStrips = strips.filter(s => ![...s.querySelectorAll('.d')].some(drawn)).length;
  let sorted = 'no table';
  const t = document.querySelector('table.sortable');
  if (t) {
    sorted = 'no numeric column';
    const ths = t.tHead.rows[0].cells;
    for (let i = 0; i < ths.length && sorted === 'no numeric column'; i++) {
      const col = () => [...t.tBodies[0].rows].map(r => r.cells[i]).filter(c => c && c.dataset.v !== undefined).map(c => Number(c.dataset.v));
      if (col().length < 2) continue;
      ths[i].click();
      const v = col();
      sorted = v.every((x, k) => k === 0 || v[k - 1] <= x) ? 'ok' : 'not ascending in column ' + i;
      ths[i].click();
      const d = col();
      if (!d.every((x, k) => k === 0 || d[k - 1] >= x)) sorted = 'not descending in column ' + i;
    }
  }
  document.querySelectorAll('table.sortable th').forEach(th => th.click());
  const nav = performance.getEntriesByType('navigation')[0];
  return {figures: figs.length, empty, strips: strips.length, emptyStrips, sorted,
          height: document.documentElement.scrollHeight,
          loadMs: nav ? Math.round(nav.loadEventEnd) : null};
})()"#;

/// Markup that loads or connects to anything: every `src` and `href`
/// must be a `#fragment` or `data:`, and no `<link>`, `@import` or `url(`
/// but `url(#...)` (an SVG reference inside the page).
fn external_references(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for attr in ["src=", "href=", "xlink:href=", "action=", "srcset="] {
        for (i, _) in text.match_indices(attr) {
            let value = text[i + attr.len()..].trim_start_matches(['"', '\'']);
            if !(value.starts_with('#') || value.starts_with("data:")) {
                found.push(text[i..(i + 60).min(text.len())].to_string());
            }
        }
    }
    for bad in ["<link", "@import", "<iframe", "<object", "<embed"] {
        if text.contains(bad) {
            found.push(bad.to_string());
        }
    }
    for (i, _) in text.match_indices("url(") {
        if !text[i + 4..].starts_with('#') {
            found.push(text[i..(i + 40).min(text.len())].to_string());
        }
    }
    found
}

/// The proxied requests (first lines) for a host `text` names: what a
/// page made go out, among Chromium's own background requests.
fn named_hosts(proxied: &[String], text: &str) -> Vec<String> {
    proxied
        .iter()
        .filter(|l| cdp::proxied_host(l).is_some_and(|h| !h.is_empty() && text.contains(&h)))
        .cloned()
        .collect()
}

/// Loads `html` and checks it; returns the load log and the check's answer.
fn check_page(b: &mut Browser, html: &Path) -> (PageLog, serde_json::Value) {
    let text = std::fs::read_to_string(html).unwrap();
    let refs = external_references(&text);
    assert!(
        refs.is_empty(),
        "{}: external references: {refs:?}",
        html.display()
    );
    let before = b.proxied().len();
    let mut log = b.load(html);
    let check = b.eval(CHECK_JS, &mut log);
    let own = format!("file://{}", html.canonicalize().unwrap().display());
    let foreign: Vec<&String> = log
        .requests
        .iter()
        .filter(|u| **u != own && !u.starts_with("data:"))
        .collect();
    assert!(
        foreign.is_empty(),
        "{}: requests beyond its own file: {foreign:?}",
        html.display()
    );
    let reached = named_hosts(&b.proxied()[before..], &text);
    assert!(
        reached.is_empty(),
        "{}: went out through the proxy: {reached:?}",
        html.display()
    );
    (log, check)
}

#[test]
fn every_input_kind_renders_in_chromium_with_no_error_and_no_network() {
    let Some(exe) = chromium_or_skip() else {
        return;
    };
    let dir = workdir("report-browser");
    let mut pages = Vec::new();
    for (name, args) in inputs(&dir) {
        let out = format!("{name}.html");
        let mut a: Vec<&str> = vec!["report"];
        a.extend(args.iter().map(String::as_str));
        a.extend(["-o", &out]);
        run(&dir, &a);
        pages.push(name.clone());
    }
    pages.extend(["storm-flag", "compare-flag", "sweep-flag", "diff-flag"].map(String::from));
    let mut b = Browser::start(&exe, 1280, 900);
    for name in &pages {
        let html = dir.join(format!("{name}.html"));
        let (log, check) = check_page(&mut b, &html);
        assert!(log.errors.is_empty(), "{name}: {:#?}", log.errors);
        assert!(
            check["figures"].as_u64().unwrap() > 0,
            "{name}: no chart at all: {check}"
        );
        assert_eq!(
            check["empty"],
            serde_json::json!([]),
            "{name}: charts without data"
        );
        assert_eq!(check["emptyStrips"], 0, "{name}: {check}");
        assert_eq!(
            check["sorted"], "ok",
            "{name}: every page has a numeric table: {check}"
        );
        let shot = dir.join(format!("{name}.png"));
        b.screenshot(&shot, 0.0, None);
        eprintln!(
            "{name}: load event after {} ms (the page's navigation timing; {:?} as the test saw it), \
             {} charts, {} KiB, {} px tall; {}",
            check["loadMs"],
            log.load,
            check["figures"],
            std::fs::metadata(&html).unwrap().len() / 1024,
            check["height"],
            shot.display()
        );
    }
    eprintln!("the proxy saw (Chromium's own requests): {:?}", b.proxied());
}

#[test]
fn the_checks_catch_a_page_that_breaks_each_rule() {
    let Some(exe) = chromium_or_skip() else {
        return;
    };
    let dir = workdir("report-browser-bad");
    let bad = dir.join("bad.html");
    std::fs::write(
        &bad,
        r#"<!DOCTYPE html><html><body>
        <img src="http://192.0.2.1/pixel.png" alt="">
        <figure class="chart"><svg width="100" height="50"><rect class="d" width="0" height="0"/></svg></figure>
        <table class="sortable"><thead><tr><th>x</th></tr></thead><tbody><tr><td data-v="2">2</td></tr><tr><td data-v="1">1</td></tr></tbody></table>
        <script>console.error("boom"); undefined_function();</script>
        </body></html>"#,
    )
    .unwrap();
    let refs = external_references(&std::fs::read_to_string(&bad).unwrap());
    assert_eq!(refs.len(), 1, "the scan misses the image: {refs:?}");
    assert!(external_references("<a href=\"#s1\"><img src='data:x'>").is_empty());
    assert_eq!(
        external_references("<link rel=preconnect href=//x>").len(),
        2
    );
    let mut b = Browser::start(&exe, 800, 600);
    let mut log = b.load(&bad);
    let check = b.eval(CHECK_JS, &mut log);
    let errors = log.errors.join("\n");
    assert!(
        errors.contains("boom"),
        "console.error not caught: {errors}"
    );
    assert!(
        errors.contains("undefined_function"),
        "exception not caught: {errors}"
    );
    assert!(
        log.requests
            .iter()
            .any(|u| u.starts_with("http://192.0.2.1/")),
        "{:?}",
        log.requests
    );
    assert_eq!(
        check["empty"].as_array().unwrap().len(),
        1,
        "empty chart not caught: {check}"
    );
    assert_eq!(
        check["sorted"], "not ascending in column 0",
        "no script sorts this table: {check}"
    );
    let text = std::fs::read_to_string(&bad).unwrap();
    let reached = named_hosts(&b.proxied(), &text);
    assert!(
        reached
            .iter()
            .any(|l| l.starts_with("GET http://192.0.2.1/pixel.png")),
        "the page's request was not seen at the proxy: {:?}",
        b.proxied()
    );
    assert_eq!(
        cdp::proxied_host("CONNECT www.example.org:443 HTTP/1.1").as_deref(),
        Some("www.example.org")
    );
    assert_eq!(
        cdp::proxied_host("GET http://[::1]:8080/x HTTP/1.1").as_deref(),
        Some("::1")
    );
    assert_eq!(cdp::proxied_host(cdp::IDLE), None);
}
