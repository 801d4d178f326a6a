//! The shape of the source tree, as README's Layout section promises it: no module imports a
//! module that imports it back (so each can be read, and tested, from the bottom up), and no
//! file grows past about 500 lines of code unless it is one concept that reads best whole.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Files allowed past the budget, each with the reason it stays one file.
const ONE_CONCEPT: &[(&str, &str)] = &[];

/// Lines of code a file may have before it is split.
const BUDGET: usize = 500;

/// Every `.rs` file under `src/`, with its code only: test modules (`#[cfg(test)] mod … {`
/// to the end of the file, or files named `tests.rs` / under `tests/`) are left out.
fn sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|p| {
            p.file_name().is_some_and(|n| n != "tests.rs")
                && !p.components().any(|c| c.as_os_str() == "tests")
        })
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a source file");
            let lines: Vec<&str> = text.lines().collect();
            let end = lines
                .windows(2)
                .position(|w| {
                    w[0].trim() == "#[cfg(test)]"
                        && w[1].starts_with("mod ")
                        && w[1].trim_end().ends_with('{')
                })
                .unwrap_or(lines.len());
            let rel = p.strip_prefix(&root).expect("under src/").to_path_buf();
            (rel, lines[..end].join("\n"))
        })
        .collect()
}

/// The top-level module a file belongs to (`pipeline` for `src/pipeline/lanes.rs`).
fn top_module(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .and_then(|c| c.as_os_str().to_str())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_string()
}

/// The top-level modules a file's code names through `crate::`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or_default();
            for name in inner.split(',') {
                let name = name.trim().split("::").next().unwrap_or_default();
                if !name.is_empty() {
                    found.insert(name.to_string());
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, code) in sources() {
        let top = top_module(&rel);
        let edges = graph.entry(top.clone()).or_default();
        for module in imports(&code) {
            if module != top {
                edges.insert(module);
            }
        }
    }
    assert!(
        graph.get("startup").is_some_and(|e| e.contains("pipeline")),
        "the scan finds imports: {graph:?}"
    );
    // Depth-first search for a path back to where it started.
    fn cycle_from(
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        let here = path.last().expect("a start").clone();
        for next in graph.get(&here).into_iter().flatten() {
            if let Some(at) = path.iter().position(|m| m == next) {
                let mut cycle = path[at..].to_vec();
                cycle.push(next.clone());
                return Some(cycle);
            }
            if done.contains(next) {
                continue;
            }
            path.push(next.clone());
            if let Some(c) = cycle_from(graph, path, done) {
                return Some(c);
            }
            path.pop();
        }
        done.insert(here);
        None
    }
    let mut done = BTreeSet::new();
    for start in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, &mut vec![start.clone()], &mut done) {
            panic!("modules import each other: {}", cycle.join(" → "));
        }
    }
}

#[test]
fn no_file_grows_past_the_budget_unless_it_is_one_concept() {
    let sources = sources();
    assert!(sources.len() > 20, "the scan finds the sources");
    let over: Vec<String> = sources
        .iter()
        .filter(|(rel, code)| {
            code.lines().count() > BUDGET
                && !ONE_CONCEPT
                    .iter()
                    .any(|(file, _)| Path::new(file) == rel.as_path())
        })
        .map(|(rel, code)| format!("{} ({} lines)", rel.display(), code.lines().count()))
        .collect();
    assert!(
        over.is_empty(),
        "split these by concept, or list them in ONE_CONCEPT with the reason: {over:?}"
    );
}
