//! The page's own style sheet and script, inlined in every report, and the
//! Content-Security-Policy that keeps it offline: `default-src 'none'`
//! forbids every fetch (scripts, styles, fonts, images, connections) but
//! the inline style and script and `data:` images, so even a bug that
//! wrote an external reference could not make the page go to the network
//! (the browser would refuse it and log the refusal, which the browser
//! test counts as a failure). Fonts are the reader's own (`system-ui`).

/// The `<meta>` Content-Security-Policy of the page.
pub(crate) const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; \
     script-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

/// The style sheet.
pub(crate) const CSS: &str = r#"
:root{color-scheme:light;--fg:#1b1f24;--mute:#5b6470;--line:#d6dbe1;--bg2:#f5f7f9;
--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:#fff}
main{max-width:1280px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:12.5px}
pre{background:var(--bg2);padding:8px 10px;border-radius:6px;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.cmd{font-size:13.5px;border-left:3px solid #0072b2}
.mute,.note{color:var(--mute)}.note{margin:4px 0}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;font-weight:600;color:#fff;margin-right:6px}
.badge.ok{background:var(--ok)}.badge.warn{background:var(--warn)}.badge.bad{background:var(--bad)}
.gap{border-left:4px solid var(--warn);background:#fff8e6;padding:6px 10px;margin:6px 0}
.fail{border-left:4px solid var(--bad);background:#fff0f0;padding:6px 10px;margin:6px 0}
ul.plain{margin:4px 0;padding-left:20px}
.tw{overflow-x:auto;margin:6px 0 10px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:3px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:var(--bg2);position:sticky;top:0;cursor:pointer;user-select:none;white-space:nowrap}
tr.g th{position:static;cursor:default;text-align:center;border-left:2px solid #fff}
th[aria-sort=ascending]::after{content:" \25B2";font-size:10px}
th[aria-sort=descending]::after{content:" \25BC";font-size:10px}
td.n{text-align:right;white-space:nowrap}
td.good{color:var(--ok);font-weight:600}td.bad{color:var(--bad);font-weight:600}
.na{color:#9aa3ad}
dl.facts{display:grid;grid-template-columns:max-content minmax(0,1fr) max-content minmax(0,1fr);gap:2px 16px;margin:6px 0}
@media (max-width:900px){dl.facts{grid-template-columns:max-content minmax(0,1fr)}}
dl.facts dt{color:var(--mute)}dl.facts dd{margin:0}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:12px 20px}
figure.chart{margin:6px 0;min-width:0}
figure.chart svg{display:block;max-width:100%;height:auto}
figcaption{font-size:12.5px;color:var(--mute)}
.mh{font-size:13px;margin:2px 0 4px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.card{border:1px solid var(--line);border-radius:8px;padding:6px 12px;min-width:130px}
.card .v{font-size:20px;font-weight:600;font-variant-numeric:tabular-nums}
.card .u{color:var(--mute);font-size:12px;margin-left:3px}
.card .k{color:var(--mute);font-size:12px}
figcaption b{color:var(--fg)}
.key{display:inline-block;margin-right:14px;white-space:nowrap}
.key i{display:inline-block;width:14px;height:4px;vertical-align:middle;margin-right:5px;border-radius:2px}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
svg .ax{stroke:#8c959f;stroke-width:1}svg .gr{stroke:#eaeef2;stroke-width:1}
svg .tk{font-size:11px;fill:#57606a}svg .lb{font-size:12px;fill:#24292f}
nav.toc{font-size:13px;margin:8px 0}nav.toc a{margin-right:12px}
td.dots{padding:1px 6px}td.dots svg{display:block}
details>summary{cursor:pointer;color:#0b5394}
footer{margin-top:36px;color:var(--mute);font-size:12px}
@media print{th{position:static}details{display:block}}
"#;

/// The page's script: table sorting (click or Enter on a header; numbers
/// by their `data-v`, text otherwise; `n/a` last). The page reads fully
/// without it.
pub(crate) const JS: &str = r#"
(function(){
  function num(td){var v=td?td.getAttribute('data-v'):null;return v===null?null:parseFloat(v);}
  var tables=document.querySelectorAll('table.sortable');
  Array.prototype.forEach.call(tables,function(t){
    if(!t.tHead||!t.tBodies.length)return;
    var ths=t.tHead.rows[t.tHead.rows.length-1].cells;
    Array.prototype.forEach.call(ths,function(th,i){
      th.tabIndex=0;th.title='sort by this column';
      function sort(){
        var asc=th.getAttribute('aria-sort')!=='ascending';
        Array.prototype.forEach.call(ths,function(o){o.removeAttribute('aria-sort');});
        th.setAttribute('aria-sort',asc?'ascending':'descending');
        var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
        rows.sort(function(a,b){
          var x=a.cells[i],y=b.cells[i],p=num(x),q=num(y),c;
          if(p!==null||q!==null){if(p===null)return 1;if(q===null)return -1;c=p-q;}
          else{c=(x?x.textContent:'').localeCompare(y?y.textContent:'',undefined,{numeric:true});}
          return asc?c:-c;
        });
        rows.forEach(function(r){body.appendChild(r);});
      }
      th.addEventListener('click',sort);
      th.addEventListener('keydown',function(e){if(e.key==='Enter'||e.key===' '){e.preventDefault();sort();}});
    });
  });
})();
"#;
