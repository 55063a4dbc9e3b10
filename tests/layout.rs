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

// The docs that map the code, kept true by the tests below: a citation of
// a section names one that exists, a path the map names is there, every
// limit lives in a limits file, and the two front pages stay short enough
// to be read.

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Directories that hold nothing of the project's own: version control,
/// installed packages, build outputs and local state (`.gitignore`).
const NOT_SOURCE: &[&str] = &[
    ".git",
    "node_modules",
    "target",
    "build",
    "build.staging",
    "dist",
    ".wrangler",
    ".flashgate",
    ".schemathesis",
    ".hypothesis",
    "test-artifacts",
];

/// Every file and directory of the project, relative to the root, with
/// `/` between parts; directories end in `/`.
fn project_paths() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().to_string();
            let path = format!("{rel}{name}");
            if entry.file_type().unwrap().is_dir() {
                if rel.is_empty() && NOT_SOURCE.contains(&name.as_str()) {
                    continue;
                }
                out.push(format!("{path}/"));
                walk(&entry.path(), &format!("{path}/"), out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), "", &mut out);
    out
}

/// The extensions of the files a doc names.
const EXTENSIONS: &[&str] = &[
    "rs", "mjs", "js", "md", "toml", "yaml", "yml", "html", "json", "sh", "py", "sql", "css",
];

/// Whether a word in backticks reads as a path of this repository: only
/// path characters, not a route (no leading `/`), and a known extension,
/// or a `/` after a lowercase first part (so `PBKDF2/SHA-256` is not one).
fn path_like(word: &str) -> bool {
    let chars_ok = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c));
    let extension = word
        .rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && EXTENSIONS.contains(&ext));
    let dir_like = word.contains('/') && word.starts_with(|c: char| c.is_ascii_lowercase());
    chars_ok && !word.starts_with('/') && !word.starts_with('.') && (extension || dir_like)
}

/// The path-like words in backticks of a Markdown text, with their line
/// numbers. A span may wrap onto the next line; fenced blocks are not
/// read. A span of several words (`node bench/shards.mjs`) gives each.
fn named_paths(text: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let prose: Vec<&str> = text
        .lines()
        .map(|l| {
            if l.starts_with("```") {
                fenced = !fenced;
                ""
            } else if fenced {
                ""
            } else {
                l
            }
        })
        .collect();
    let prose = prose.join("\n");
    let mut out = Vec::new();
    let mut line = 1;
    for (j, span) in prose.split('`').enumerate() {
        if j % 2 == 1 {
            for word in span.split_whitespace() {
                if path_like(word) {
                    out.push((line, word.to_string()));
                }
            }
        }
        line += span.matches('\n').count();
    }
    out
}

/// Whether a named path is in the project: from the root, or as the tail
/// of a path (a code map names files under its section's directory, as
/// `gate.rs` under `core/`, and a list of tests `odds-page.test.mjs`).
fn resolves(word: &str, paths: &[String]) -> bool {
    let dir = word.ends_with('/');
    let bare = word.trim_end_matches('/');
    if dir {
        let want = format!("{bare}/");
        paths
            .iter()
            .any(|p| *p == want || p.ends_with(&format!("/{want}")))
    } else {
        paths.iter().any(|p| {
            let p = p.trim_end_matches('/');
            p == bare || p.ends_with(&format!("/{bare}"))
        })
    }
}

/// The docs that name the code's paths: ARCHITECTURE.md, `docs/*.md`,
/// README.md and CONTRIBUTING.md.
fn map_docs() -> Vec<String> {
    let mut docs: Vec<String> = ["ARCHITECTURE.md", "README.md", "CONTRIBUTING.md"]
        .map(String::from)
        .to_vec();
    let mut rest: Vec<String> = fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    rest.sort();
    docs.extend(rest);
    docs
}

#[test]
fn every_path_the_docs_name_exists() {
    let paths = project_paths();
    let mut missing = Vec::new();
    let mut named = 0;
    for doc in map_docs() {
        let text = fs::read_to_string(root().join(&doc)).unwrap();
        for (n, word) in named_paths(&text) {
            named += 1;
            if !resolves(&word, &paths) {
                missing.push(format!("{doc}:{n}: `{word}` names no file or directory"));
            }
        }
    }
    assert!(named > 100, "the docs name {named} paths");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The text of a Markdown file's section: the lines after its `## name`
/// heading, up to the next heading of that level or higher.
fn section<'t>(text: &'t str, name: &str) -> Option<Vec<(usize, &'t str)>> {
    let mut lines = text.lines().enumerate();
    lines.find(|(_, l)| l.trim() == format!("## {name}"))?;
    Some(
        lines
            .take_while(|(_, l)| !(l.starts_with("## ") || l.starts_with("# ")))
            .map(|(i, l)| (i + 1, l))
            .collect(),
    )
}

#[test]
fn every_entry_point_is_where_the_map_says() {
    let text = fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let lines = section(&text, "Entry points").expect("ARCHITECTURE.md has \"Entry points\"");
    let first = lines.first().map_or(0, |(n, _)| *n);
    let body: Vec<&str> = lines.iter().map(|(_, l)| *l).collect();
    let mut missing = Vec::new();
    let mut named = 0;
    for (n, word) in named_paths(&body.join("\n")) {
        named += 1;
        // Exactly from the root: an entry point is where one starts.
        if !root().join(word.trim_end_matches('/')).exists() {
            let n = first + n - 1;
            missing.push(format!(
                "ARCHITECTURE.md:{n}: entry point `{word}` does not exist"
            ));
        }
    }
    assert!(named >= 8, "\"Entry points\" names {named} paths");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// A file's text as one line, each source line with its comment marker
/// taken off, so that a citation wrapped across comment lines reads whole;
/// and where each source line starts in it.
fn joined(text: &str) -> (String, Vec<usize>) {
    let mut out = String::new();
    let mut starts = Vec::new();
    for l in text.lines() {
        let l = l.trim_start();
        let l = ["//!", "///", "//", "/**", "*/", "*", "#"]
            .iter()
            .find_map(|m| l.strip_prefix(m))
            .unwrap_or(l);
        starts.push(out.len());
        out.push_str(l.trim());
        out.push(' ');
    }
    (out, starts)
}

/// The sections a text cites by name, as (where, file, section): a Markdown
/// file's name, then the section's heading in double quotes, after a
/// comma, a space or `'s` (this file does not write one, so that its own
/// text cites nothing). A bare file name cites the whole file, and is not
/// returned.
fn citations(text: &str) -> Vec<(usize, String, String)> {
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_.-/".contains(c);
    let mut out = Vec::new();
    for (at, _) in text.match_indices(".md") {
        let end = at + 3;
        let start = text[..at]
            .char_indices()
            .rev()
            .take_while(|&(_, c)| path_char(c))
            .last()
            .map_or(at, |(i, _)| i);
        let file = &text[start..end];
        let rest = &text[end..];
        let rest = rest.strip_prefix("'s").unwrap_or(rest);
        let (rest, comma) = match rest.strip_prefix(',') {
            Some(r) => (r, true),
            None => (rest, false),
        };
        let spaced = rest.starts_with(char::is_whitespace);
        let Some(quoted) = rest.trim_start().strip_prefix('"') else {
            continue;
        };
        if !(comma || spaced) || file == ".md" {
            continue;
        }
        if let Some((name, _)) = quoted.split_once('"') {
            if !name.is_empty() && !name.starts_with(' ') && name.len() < 100 {
                out.push((start, file.to_string(), name.to_string()));
            }
        }
    }
    out
}

/// The headings of a Markdown text, without `#`s and backticks, in lower
/// case; lines inside fenced blocks are not headings.
fn headings(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(
                line.trim_start_matches('#')
                    .trim()
                    .replace('`', "")
                    .to_lowercase(),
            );
        }
    }
    out
}

/// Citations of sections that no longer exist, left for a reason: (the
/// citing file, the section, why).
const CITATIONS_LEFT: &[(&str, &str, &str)] = &[];

#[test]
fn every_section_a_comment_cites_exists() {
    let paths = project_paths();
    let mut broken = Vec::new();
    let mut cited = 0;
    let mut left_seen = Vec::new();
    for rel in &paths {
        // Vendored code is not ours to cite from, and the lock files are
        // data.
        if rel.ends_with('/') || rel.starts_with("web/vendor/") || rel.ends_with(".lock") {
            continue;
        }
        if rel.ends_with("package-lock.json") {
            continue;
        }
        let Ok(text) = fs::read_to_string(root().join(rel)) else {
            continue;
        };
        let (text, starts) = joined(&text);
        let here = Path::new(rel).parent().unwrap_or(Path::new(""));
        for (at, file, name) in citations(&text) {
            cited += 1;
            let place = format!("{rel}:{}", starts.partition_point(|&s| s <= at));
            let target = [root().join(&file), root().join(here).join(&file)]
                .into_iter()
                .find(|p| p.is_file());
            let Some(target) = target else {
                broken.push(format!("{place}: cites {file}, \"{name}\": no such file"));
                continue;
            };
            let want = name.replace('`', "").to_lowercase();
            let left = CITATIONS_LEFT
                .iter()
                .any(|(f, s, _)| f == rel && *s == name);
            if left {
                left_seen.push((rel.clone(), name.clone()));
            }
            if !left && !headings(&fs::read_to_string(target).unwrap()).contains(&want) {
                broken.push(format!(
                    "{place}: cites {file}, \"{name}\": no such section"
                ));
            }
        }
    }
    assert!(cited > 5, "{cited} citations found");
    for (file, name, _) in CITATIONS_LEFT {
        if !left_seen.iter().any(|(f, s)| f == file && s == name) {
            broken.push(format!(
                "CITATIONS_LEFT: {file} no longer cites \"{name}\"; remove it"
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The files a limit may be defined in, each with what it holds. The
/// crates whose limits ARCHITECTURE.md promises one definition are
/// searched: the Worker (`src/`), the core, the wire and the origin.
const LIMITS_FILES: &[(&str, &str)] = &[
    ("src/limits.rs", "every limit of the Worker"),
    ("origin/src/limits.rs", "every limit of the origin"),
    (
        "core/src/config.rs",
        "the core's bounds on every input, its `mod limits`",
    ),
    (
        "core/src/escrow.rs",
        "the escrow's limits and timings, its `mod limits`",
    ),
    (
        "wire/src/bounds.rs",
        "every bound of a field that crosses a service",
    ),
];

/// Limits that live outside a limits file, each with the reason.
const LIMITS_ELSEWHERE: &[(&str, &str, &str)] = &[];

/// The crates searched for limits, and why others are not: the load tool
/// and the peers are clients with their own patience, not the gate, and a
/// test's constants are its scenario.
const LIMITS_CRATES: &[&str] = &["src", "core/src", "wire/src", "origin/src"];

/// The name of a constant a line declares (`const`, `pub const`,
/// `pub(crate) const`), if it declares one.
fn const_name(line: &str) -> Option<&str> {
    let mut l = line.trim_start();
    if let Some(rest) = l.strip_prefix("pub") {
        l = match rest.strip_prefix('(') {
            Some(r) => r.split_once(')')?.1,
            None => rest,
        }
        .trim_start();
    }
    let name = l.strip_prefix("const ")?.split(':').next()?.trim();
    Some(name)
}

#[test]
fn every_limit_lives_in_a_limits_file() {
    for (file, _) in LIMITS_FILES {
        let text = fs::read_to_string(root().join(file)).unwrap();
        assert!(
            file.ends_with("/limits.rs")
                || file.ends_with("/bounds.rs")
                || text.contains("pub mod limits {"),
            "{file} is listed as a limits file but has no `mod limits`"
        );
    }
    let mut strays = Vec::new();
    let mut found = 0;
    for krate in LIMITS_CRATES {
        let mut files = Vec::new();
        rust_files(&root().join(krate), &mut files);
        for file in files {
            let rel = file
                .strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            for (n, line) in code_lines(&file) {
                let Some(name) = const_name(&line) else {
                    continue;
                };
                if !(name.ends_with("_MAX") || name.ends_with("_MS")) {
                    continue;
                }
                found += 1;
                let home = LIMITS_FILES.iter().any(|(f, _)| *f == rel);
                let allowed = LIMITS_ELSEWHERE
                    .iter()
                    .any(|(f, c, _)| *f == rel && *c == name);
                if !home && !allowed {
                    strays.push(format!(
                        "{rel}:{n}: {name} is a limit outside the limits files; move it into one, \
                         or list it in LIMITS_ELSEWHERE with the reason"
                    ));
                }
            }
        }
    }
    assert!(found > 50, "{found} limits found");
    for (file, name, reason) in LIMITS_ELSEWHERE {
        assert!(!reason.is_empty(), "{file}: {name} needs a reason");
    }
    assert!(strays.is_empty(), "{}", strays.join("\n"));
}

#[test]
fn the_front_pages_stay_short() {
    // Each new feature's paragraph fits in these by moving detail (and its
    // examples, which the README test runs there too) into docs/.
    for (file, max) in [("ARCHITECTURE.md", 400), ("README.md", 220)] {
        let lines = fs::read_to_string(root().join(file))
            .unwrap()
            .lines()
            .count();
        assert!(
            lines <= max,
            "{file} has {lines} lines, over its {max}: move detail into docs/ (or CONTRIBUTING.md)"
        );
    }
}

#[test]
fn what_the_benchmarks_rewrite_holds_only_their_own_section() {
    // `node bench/flood.mjs` and `scripts/bench-compare` each replace the
    // text between their markers in bench/RESULTS.md: a section put there
    // by hand would be lost at their next run.
    let text = fs::read_to_string(root().join("bench/RESULTS.md")).unwrap();
    for (marker, own) in [
        ("flood", "A flood of made-up product ids beside a real sale"),
        ("compare", "flashgate beside the article's recipes"),
    ] {
        let start = format!("<!-- {marker}:start -->");
        let end = format!("<!-- {marker}:end -->");
        let from = text.find(&start).unwrap_or_else(|| panic!("no {start}"));
        let to = text.find(&end).unwrap_or_else(|| panic!("no {end}"));
        let sections: Vec<&str> = text[from..to]
            .lines()
            .filter_map(|l| l.strip_prefix("## "))
            .collect();
        assert_eq!(
            sections,
            [own],
            "bench/RESULTS.md: only \"{own}\" may stand between the {marker} markers"
        );
    }
}
