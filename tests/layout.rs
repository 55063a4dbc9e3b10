//! The layout is part of the design: the edge and the object never import
//! each other, the modules both use (the contract, answers, ids, settings
//! and limits) import neither, and only `src/wasm/` touches the runtime.
//! A violation prints the file, the line and the rule it breaks.

use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments, line by line (a `//` inside a
/// string would hide the rest of its line, which none of these paths is).
fn code_lines(path: &Path) -> Vec<(usize, String)> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("").to_string()))
        .collect()
}

/// Which part of `src/` a file belongs to.
fn part(rel: &str) -> &'static str {
    if rel.starts_with("edge/") || rel.starts_with("wasm/edge/") {
        "edge"
    } else if rel.starts_with("object/") || rel.starts_with("wasm/object/") {
        "object"
    } else if rel.starts_with("wasm/") || rel == "lib.rs" {
        "shell"
    } else {
        "shared"
    }
}

#[test]
fn the_edge_and_the_object_never_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 20, "src/ has {} files", files.len());
    let mut broken = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let forbidden: &[&str] = match part(&rel) {
            "edge" => &["crate::object", "crate::wasm::object"],
            "object" => &["crate::edge", "crate::wasm::edge"],
            "shared" => &["crate::edge", "crate::object", "crate::wasm"],
            _ => &[],
        };
        let runtime = !rel.starts_with("wasm/");
        for (n, line) in code_lines(file) {
            for f in forbidden {
                if line.contains(f) {
                    broken.push(format!("src/{rel}:{n}: a {} module names {f}", part(&rel)));
                }
            }
            if runtime && (line.contains("worker::") || line.contains("use worker")) {
                broken.push(format!("src/{rel}:{n}: a pure module names the runtime"));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_shell_mirrors_the_pure_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for dir in ["edge", "object"] {
        assert!(src.join(dir).join("mod.rs").is_file(), "src/{dir}/mod.rs");
        assert!(
            src.join("wasm").join(dir).join("mod.rs").is_file(),
            "src/wasm/{dir}/mod.rs"
        );
    }
}
