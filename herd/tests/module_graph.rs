//! No import cycles (docs/design.md): no module of herd or exitq imports,
//! directly or through others, a module that imports it back, counting
//! `use crate::`, `use super::`, `use self::`, a child's name (`use
//! child::X`) and the same paths written out in code (`super::x::f()`).
//!
//! The graph: one node per source file's module (inline modules such as
//! `mod tests` belong to their file); an edge from the module a path is
//! written in to the module that defines what the path names, following
//! `pub use` re-exports to the defining module (`super::Report` in
//! `perf/percpu.rs` is `perf/report.rs`'s `Report`, re-exported by
//! `perf/mod.rs`). A module and the modules nested in it are one unit, as
//! the language makes them (a child reaches its parent's items with
//! `super::`, the parent declares the child), so edges between a module
//! and its ancestors or descendants are not counted; every other cycle is
//! reported with the paths that make it.
//!
//! The scanner is a small lexer (comments, strings and characters skipped),
//! not a Rust parser: it knows `use` trees, `mod name {`, braces and paths.
//! `checker_finds_a_cycle_through_a_re_export` shows it can fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Colons,
    Open,
    Close,
    Semi,
    Comma,
    Star,
    Other,
}

/// Tokens of Rust source, comments, strings and character literals left out.
fn lex(src: &str) -> Vec<Tok> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if src[i..].starts_with("//") {
            i = src[i..].find('\n').map_or(b.len(), |n| i + n);
        } else if src[i..].starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if src[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if src[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) {
            // Raw string r"..." or r#"..."#: find its end.
            let hashes = b[i + 1..].iter().take_while(|&&h| h == b'#').count();
            if b.get(i + 1 + hashes) == Some(&b'"') {
                let end = format!("\"{}", "#".repeat(hashes));
                let start = i + 2 + hashes;
                i = src[start..]
                    .find(&end)
                    .map_or(b.len(), |n| start + n + end.len());
            } else {
                out.push(Tok::Ident("r".into()));
                i += 1;
            }
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), else a lifetime.
            if b.get(i + 1) == Some(&b'\\') {
                i = src[i + 2..].find('\'').map_or(b.len(), |n| i + 3 + n);
            } else if b.get(i + 2) == Some(&b'\'') {
                i += 3;
            } else if let Some(ch) = src[i + 1..].chars().next().filter(|ch| !ch.is_ascii()) {
                i += 1 + ch.len_utf8() + 1;
            } else {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(src[start..i].to_string()));
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if src[i..].starts_with("::") {
            out.push(Tok::Colons);
            i += 2;
        } else {
            out.push(match c {
                b'{' => Tok::Open,
                b'}' => Tok::Close,
                b';' => Tok::Semi,
                b',' => Tok::Comma,
                b'*' => Tok::Star,
                _ => Tok::Other,
            });
            i += if c.is_ascii() {
                1
            } else {
                src[i..].chars().next().unwrap().len_utf8()
            };
        }
    }
    out
}

/// The paths of a `use` tree (`a::{b, c::{d, e as f}, g::*}`), each as its
/// segments (`as` renames and globs dropped).
fn use_paths(toks: &[Tok]) -> Vec<Vec<String>> {
    fn tree(toks: &[Tok], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        while *i < toks.len() {
            match &toks[*i] {
                Tok::Ident(s) if s == "as" => *i += 2,
                // `a::{self, b}`: `self` is `a` itself.
                Tok::Ident(s) if s == "self" && !path.is_empty() => *i += 1,
                Tok::Ident(s) => {
                    path.push(s.clone());
                    *i += 1;
                }
                Tok::Colons | Tok::Star => *i += 1,
                Tok::Open => {
                    *i += 1;
                    loop {
                        tree(toks, i, &path, out);
                        match toks.get(*i) {
                            Some(Tok::Comma) => *i += 1,
                            _ => break,
                        }
                        if toks.get(*i) == Some(&Tok::Close) {
                            break;
                        }
                    }
                    *i += 1; // the closing brace
                    return;
                }
                _ => break,
            }
        }
        if path.len() > prefix.len() {
            out.push(path);
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    tree(toks, &mut i, &[], &mut out);
    out
}

/// A path written in module `base` (a file's module plus its inline
/// modules), as the module it starts from plus the rest; `None` for a path
/// outside the crate.
fn absolute(base: &[String], path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    let mut cur: Module;
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            cur = Vec::new();
            rest = &path[1..];
        }
        Some("super" | "self") => {
            cur = base.to_vec();
            while let Some(s) = rest.first() {
                match s.as_str() {
                    "super" => {
                        cur.pop()?;
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        Some(child) => {
            // `use child::X` names a child module of the current one.
            let mut m = base.to_vec();
            m.push(child.to_string());
            if !modules.contains(&m) || path.len() < 2 {
                return None;
            }
            cur = base.to_vec();
        }
        None => return None,
    }
    cur.extend(rest.iter().cloned());
    Some(cur)
}

/// Every module of the crate under `src`, with what each file writes.
struct Crate {
    modules: BTreeSet<Module>,
    /// Per file module: the paths it writes, with the (inline) module each
    /// is written in.
    paths: BTreeMap<Module, Vec<(Module, Vec<String>)>>,
    /// Per module: re-exported name -> the path it re-exports.
    reexports: BTreeMap<Module, BTreeMap<String, Module>>,
}

fn module_of(rel: &Path) -> Module {
    let mut m: Module = rel
        .with_extension("")
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if m.last().map(String::as_str) == Some("mod") || (m.len() == 1 && m[0] == "lib") {
        m.pop();
    }
    m
}

fn sources(dir: &Path, root: &Path, out: &mut Vec<(Module, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, root, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(root).unwrap();
            if rel == Path::new("main.rs") {
                continue; // the binary, another crate
            }
            out.push((module_of(rel), std::fs::read_to_string(&p).unwrap()));
        }
    }
}

fn scan(src: &Path) -> Crate {
    let mut files = Vec::new();
    sources(src, src, &mut files);
    let modules: BTreeSet<Module> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut paths: BTreeMap<Module, Vec<(Module, Vec<String>)>> = BTreeMap::new();
    let mut raw_reexports = Vec::new();
    for (m, text) in &files {
        let toks = lex(text);
        let mut inline: Vec<(String, usize)> = Vec::new();
        let mut depth = 0;
        let mut found = Vec::new();
        let mut i = 0;
        while i < toks.len() {
            let base: Module = m
                .iter()
                .cloned()
                .chain(inline.iter().map(|(n, _)| n.clone()))
                .collect();
            match &toks[i] {
                Tok::Ident(k) if k == "mod" => {
                    if let (Some(Tok::Ident(name)), Some(Tok::Open)) =
                        (toks.get(i + 1), toks.get(i + 2))
                    {
                        depth += 1;
                        inline.push((name.clone(), depth));
                        i += 3;
                        continue;
                    }
                }
                Tok::Ident(k) if k == "use" => {
                    let end = toks[i..]
                        .iter()
                        .position(|t| *t == Tok::Semi)
                        .map_or(toks.len(), |n| i + n);
                    let public = i > 0
                        && (toks[i - 1] == Tok::Ident("pub".into()) || toks[i - 1] == Tok::Other);
                    for p in use_paths(&toks[i + 1..end]) {
                        if public && inline.is_empty() {
                            raw_reexports.push((m.clone(), p.clone()));
                        }
                        found.push((base.clone(), p));
                    }
                    i = end + 1;
                    continue;
                }
                Tok::Ident(k)
                    if matches!(k.as_str(), "crate" | "super" | "self")
                        && toks.get(i + 1) == Some(&Tok::Colons) =>
                {
                    let mut p = vec![k.clone()];
                    let mut j = i + 1;
                    while toks.get(j) == Some(&Tok::Colons) {
                        match toks.get(j + 1) {
                            Some(Tok::Ident(s)) => p.push(s.clone()),
                            _ => break,
                        }
                        j += 2;
                    }
                    found.push((base, p));
                    i = j;
                    continue;
                }
                Tok::Open => depth += 1,
                Tok::Close => {
                    if inline.last().is_some_and(|&(_, d)| d == depth) {
                        inline.pop();
                    }
                    depth -= 1;
                }
                _ => {}
            }
            i += 1;
        }
        paths.insert(m.clone(), found);
    }
    let mut reexports: BTreeMap<Module, BTreeMap<String, Module>> = BTreeMap::new();
    for (m, p) in raw_reexports {
        if let Some(abs) = absolute(&m, &p, &modules) {
            let name = p.last().unwrap().clone();
            reexports.entry(m).or_default().insert(name, abs);
        }
    }
    Crate {
        modules,
        paths,
        reexports,
    }
}

impl Crate {
    /// The module that defines what `abs` names: its longest prefix that is
    /// a module, through re-exports.
    fn target(&self, abs: &[String], hops: usize) -> Option<Module> {
        for k in (0..=abs.len()).rev() {
            let pre = abs[..k].to_vec();
            if self.modules.contains(&pre) {
                if let (Some(name), true) = (abs.get(k), hops < 8) {
                    if let Some(to) = self.reexports.get(&pre).and_then(|r| r.get(name)) {
                        if *to != abs[..=k] {
                            let mut next = to.clone();
                            next.extend(abs[k + 1..].iter().cloned());
                            return self.target(&next, hops + 1);
                        }
                    }
                }
                return Some(pre);
            }
        }
        None
    }

    /// Edges between modules not nested in each other, each with the
    /// paths that make it.
    fn edges(&self) -> BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>> {
        let nested = |a: &Module, b: &Module| a.starts_with(b) || b.starts_with(a);
        let mut out: BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>> = BTreeMap::new();
        for (m, found) in &self.paths {
            for (base, p) in found {
                let Some(t) = absolute(base, p, &self.modules).and_then(|a| self.target(&a, 0))
                else {
                    continue;
                };
                if !nested(m, &t) {
                    out.entry(m.clone())
                        .or_default()
                        .entry(t)
                        .or_default()
                        .insert(p.join("::"));
                }
            }
        }
        out
    }

    /// Every import cycle, as lines `a -> b (paths)` of its strongly
    /// connected component (Tarjan).
    fn cycles(&self) -> Vec<Vec<String>> {
        let edges = self.edges();
        let nodes: Vec<&Module> = self.modules.iter().collect();
        let id = |m: &Module| nodes.iter().position(|n| *n == m).unwrap();
        let succ: Vec<Vec<usize>> = nodes
            .iter()
            .map(|m| {
                edges
                    .get(*m)
                    .map_or(Vec::new(), |e| e.keys().map(id).collect())
            })
            .collect();
        struct T {
            index: Vec<Option<usize>>,
            low: Vec<usize>,
            stack: Vec<usize>,
            on: Vec<bool>,
            next: usize,
            sccs: Vec<Vec<usize>>,
        }
        fn strong(v: usize, succ: &[Vec<usize>], t: &mut T) {
            t.index[v] = Some(t.next);
            t.low[v] = t.next;
            t.next += 1;
            t.stack.push(v);
            t.on[v] = true;
            for &w in &succ[v] {
                match t.index[w] {
                    None => {
                        strong(w, succ, t);
                        t.low[v] = t.low[v].min(t.low[w]);
                    }
                    Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                    _ => {}
                }
            }
            if Some(t.low[v]) == t.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = t.stack.pop().unwrap();
                    t.on[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    t.sccs.push(comp);
                }
            }
        }
        let n = nodes.len();
        let mut t = T {
            index: vec![None; n],
            low: vec![0; n],
            stack: Vec::new(),
            on: vec![false; n],
            next: 0,
            sccs: Vec::new(),
        };
        for v in 0..n {
            if t.index[v].is_none() {
                strong(v, &succ, &mut t);
            }
        }
        let name = |m: &Module| {
            if m.is_empty() {
                "crate".to_string()
            } else {
                m.join("::")
            }
        };
        t.sccs
            .iter()
            .map(|comp| {
                let mut lines = Vec::new();
                for &a in comp {
                    for &b in comp {
                        if let Some(ps) = edges.get(nodes[a]).and_then(|e| e.get(nodes[b])) {
                            let ps: Vec<&str> = ps.iter().map(String::as_str).collect();
                            lines.push(format!(
                                "{} -> {} ({})",
                                name(nodes[a]),
                                name(nodes[b]),
                                ps.join(", ")
                            ));
                        }
                    }
                }
                lines.sort();
                lines
            })
            .collect()
    }
}

fn assert_no_cycles(krate: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src");
    let c = scan(&src);
    assert!(c.modules.len() > 10, "{krate}: found only {:?}", c.modules);
    let cycles = c.cycles();
    assert!(
        cycles.is_empty(),
        "{krate}: import cycles (each a group of modules that import each other):\n{}",
        cycles
            .iter()
            .map(|c| c.join("\n"))
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

#[test]
fn herd_has_no_import_cycle() {
    assert_no_cycles("herd");
}

#[test]
fn exitq_has_no_import_cycle() {
    assert_no_cycles("exitq");
}

/// The checker sees a cycle through `super::` paths, a re-export and a
/// path written out in code, ignores comments, strings and the parent/child
/// relation, and names the paths.
#[test]
fn checker_finds_a_cycle_through_a_re_export() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |p: &str, text: &str| {
        let p = src.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\nmod c;\npub use b::Thing;\n");
    // a -> b through the crate root's re-export; b -> a written in code.
    write("a/mod.rs", "mod inner;\nuse crate::Thing;\npub struct A;\n");
    write("a/inner.rs", "use super::A; // the parent: not a cycle\n");
    write(
        "b.rs",
        "pub struct Thing;\nfn f() { let _ = super::a::A; }\n\
         /* use crate::c::C; */ const S: &str = \"crate::c::C\";\n",
    );
    write("c.rs", "pub struct C;\nuse crate::a::A;\n");
    let c = scan(src);
    let cycles = c.cycles();
    assert_eq!(
        cycles,
        [vec![
            "a -> b (crate::Thing)".to_string(),
            "b -> a (super::a::A)".to_string()
        ]],
        "{:?}\n{:?}\n{:?}",
        c.edges(),
        c.paths,
        c.reexports
    );
}
