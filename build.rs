//! Two things made before the crate is compiled:
//!
//! - `openapi.yaml`, the one written description of both HTTP APIs, turned
//!   into the JSON the Worker serves at `/openapi.json` and the tests read.
//!   YAML is for people; the Worker has no YAML parser and needs none.
//! - The pages (`web/*.html` with `web/shared.js` inlined where they say
//!   `/*SHARED*/`, and `web/odds.js` where they say `/*ODDS*/`), and the
//!   SHA-256 of every inline `<script>` and `<style>`
//!   in them, which the pages' Content-Security-Policy allows and nothing
//!   else. The page the gate serves and the hash it allows come from these
//!   same bytes, so an edited page cannot drift from its hash.

use std::fmt::Write as _;
use std::path::Path;

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The pages, by the name `src/edge/page.rs` knows them under.
const PAGES: [(&str, &str); 3] = [
    ("LIST", "web/index.html"),
    ("PRODUCT", "web/product.html"),
    ("ADMIN", "web/admin.html"),
];
/// The scripts pages share, each inlined where a page names its slot.
const MODULES: [(&str, &str); 2] = [("/*SHARED*/", "web/shared.js"), ("/*ODDS*/", "web/odds.js")];

fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let out = Path::new(&out);
    openapi(out);
    pages(out);
}

fn openapi(out: &Path) {
    println!("cargo:rerun-if-changed=openapi.yaml");
    let yaml = std::fs::read_to_string("openapi.yaml").expect("openapi.yaml is readable");
    let spec: serde_json::Value =
        serde_norway::from_str(&yaml).expect("openapi.yaml is valid YAML");
    let json = serde_json::to_string(&spec).expect("a YAML document converts to JSON");
    std::fs::write(out.join("openapi.json"), json).expect("OUT_DIR is writable");
}

fn pages(out: &Path) {
    let modules: Vec<(&str, String)> = MODULES
        .iter()
        .map(|&(slot, path)| {
            println!("cargo:rerun-if-changed={path}");
            let text =
                std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path} is readable: {e}"));
            (slot, text)
        })
        .collect();
    let mut code = String::from("// Made by build.rs from web/; do not edit.\n");
    for (name, path) in PAGES {
        println!("cargo:rerun-if-changed={path}");
        let mut page =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path} is readable: {e}"));
        for (slot, text) in &modules {
            page = page.replace(slot, text);
        }
        let file = format!("{}.html", name.to_ascii_lowercase());
        std::fs::write(out.join(&file), &page).expect("OUT_DIR is writable");
        let scripts = inline(&page, "script", path);
        let styles = inline(&page, "style", path);
        writeln!(
            code,
            "const {name}: &str = include_str!(concat!(env!(\"OUT_DIR\"), \"/{file}\"));\n\
             const {name}_HASHES: Hashes = Hashes {{ scripts: &{scripts:?}, styles: &{styles:?} }};"
        )
        .expect("a String takes writes");
    }
    std::fs::write(out.join("pages.rs"), code).expect("OUT_DIR is writable");
}

/// The CSP source (`'sha256-…'`) of each inline `<tag>…</tag>` of `page`.
/// A tag with attributes (`<script src>`, `<script type=…>`) is refused: the
/// pages have none, and the hashes would not describe them.
fn inline(page: &str, tag: &str, path: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}"), format!("</{tag}>"));
    let mut sources = Vec::new();
    let mut rest = page;
    while let Some(at) = rest.find(&open) {
        let after = &rest[at + open.len()..];
        let body = after.strip_prefix('>').unwrap_or_else(|| {
            panic!("{path}: a <{tag}> with attributes; the CSP allows only bare inline ones")
        });
        let end = body
            .find(&close)
            .unwrap_or_else(|| panic!("{path}: a <{tag}> without {close}"));
        let content = &body[..end];
        // The gate fills slots in at request time; one inside a script or a
        // style would change it after it was hashed.
        assert!(
            !content.contains("__LANG__")
                && !content.contains("__FLASHGATE_PAYMENT_URL__")
                && !content.contains("__PRODUCT_ID__"),
            "{path}: a request-time slot inside a <{tag}>; put the value in a <meta> instead"
        );
        let digest = Sha256::digest(content.as_bytes());
        sources.push(format!(
            "'sha256-{}'",
            base64::engine::general_purpose::STANDARD.encode(digest)
        ));
        rest = &body[end + close.len()..];
    }
    sources
}
