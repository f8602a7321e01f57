//! The import graph of the product code (everything but `testing/` and the
//! tests): each layer imports only itself and the layers below it, and no
//! two modules import each other, directly or around a circle.

use std::collections::BTreeMap;
use std::path::Path;

/// Layers from the bottom; `edge::ffi`, the exports, sits above them all.
const LAYERS: [&str; 5] = ["edge", "plan", "state", "exec", "ioctl"];

/// The one upward import: a context queues requests of `exec::request`,
/// which itself imports nothing of `exec` but `copy`'s outcome.
const UPWARD: [(&str, &str); 1] = [("state::context", "exec::request")];

fn rank(module: &str) -> usize {
    if module == "edge::ffi" {
        return LAYERS.len();
    }
    let top = module.split("::").next().unwrap_or(module);
    LAYERS
        .iter()
        .position(|l| *l == top)
        .expect("module of no layer")
}

/// `crate::a::b` paths a file uses outside comments and its unit tests.
fn imports(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in src.lines() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        if line.trim_start().starts_with("//") {
            continue;
        }
        for (i, _) in line.match_indices("crate::") {
            let rest = &line[i + "crate::".len()..];
            let path: Vec<&str> = rest
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap_or("")
                .split("::")
                .take(2)
                .collect();
            let m = if path[0] == "ioctl" {
                "ioctl".to_string()
            } else {
                path.join("::")
            };
            if !out.contains(&m) {
                out.push(m);
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, Vec<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut g = BTreeMap::new();
    let mut files = vec![("ioctl".to_string(), root.join("ioctl.rs"))];
    for layer in &LAYERS[..4] {
        for e in std::fs::read_dir(root.join(layer)).expect("layer folder") {
            let p = e.expect("entry").path();
            let stem = p.file_stem().unwrap().to_str().unwrap().to_string();
            if stem != "mod" {
                files.push((format!("{layer}::{stem}"), p));
            }
        }
    }
    for (m, p) in files {
        let src = std::fs::read_to_string(&p).expect("source");
        let deps = imports(&src).into_iter().filter(|d| *d != m).collect();
        g.insert(m, deps);
    }
    g
}

#[test]
fn layers_import_only_downward() {
    let g = graph();
    assert!(g.len() > 15, "found only {:?}", g.keys());
    for (m, deps) in &g {
        for d in deps {
            assert!(g.contains_key(d), "{m} imports {d}, not a product module");
            let upward = rank(d) > rank(m);
            assert!(
                !upward || UPWARD.contains(&(m.as_str(), d.as_str())),
                "{m} imports {d}, a layer above it"
            );
        }
    }
}

#[test]
fn no_module_imports_itself_through_others() {
    let g = graph();
    // Depth-first search with colours; a grey node reached again is a cycle.
    fn visit<'a>(
        g: &'a BTreeMap<String, Vec<String>>,
        m: &'a str,
        colour: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) {
        match colour.get(m) {
            Some(2) => return,
            Some(1) => panic!("import cycle: {} -> {m}", path.join(" -> ")),
            _ => {}
        }
        colour.insert(m, 1);
        path.push(m);
        for d in &g[m] {
            visit(g, d, colour, path);
        }
        path.pop();
        colour.insert(m, 2);
    }
    let mut colour = BTreeMap::new();
    for m in g.keys() {
        visit(&g, m, &mut colour, &mut Vec::new());
    }
}
