//! Turns `openapi.yaml`, the one written description of both HTTP APIs, into
//! the JSON the Worker serves at `/openapi.json` and the tests read. YAML is
//! for people; the Worker has no YAML parser and needs none.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=openapi.yaml");
    let yaml = std::fs::read_to_string("openapi.yaml").expect("openapi.yaml is readable");
    let spec: serde_json::Value =
        serde_norway::from_str(&yaml).expect("openapi.yaml is valid YAML");
    let json = serde_json::to_string(&spec).expect("a YAML document converts to JSON");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(Path::new(&out).join("openapi.json"), json).expect("OUT_DIR is writable");
}
