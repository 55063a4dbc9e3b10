//! The files the Worker serves as they are: the ALTCHA widget (MIT,
//! `web/vendor/altcha/`), which the buyer page loads from the gate itself,
//! so that it needs no external resource and its policy names only
//! `'self'`. Versioned paths, so a browser may keep them for a year.
//!
//! They are in the wasm as data (about 100 KB, a data segment copied at
//! instantiation, not compiled).

/// A file and how it is answered.
#[derive(Debug, PartialEq, Eq)]
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

pub const ALTCHA_JS: &str = "/vendor/altcha-3.2.2/altcha.js";
pub const ALTCHA_WORKER: &str = "/vendor/altcha-3.2.2/pbkdf2.js";
pub const ALTCHA_CSS: &str = "/vendor/altcha-3.2.2/altcha.css";
pub const ALTCHA_ZH: &str = "/vendor/altcha-3.2.2/zh-cn.js";

pub const ASSETS: [Asset; 4] = [
    Asset {
        path: ALTCHA_JS,
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/vendor/altcha/altcha.js"),
    },
    Asset {
        path: ALTCHA_WORKER,
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/vendor/altcha/pbkdf2.js"),
    },
    Asset {
        path: ALTCHA_ZH,
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../web/vendor/altcha/zh-cn.js"),
    },
    Asset {
        path: ALTCHA_CSS,
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../web/vendor/altcha/altcha.css"),
    },
];

/// The file served at `path`.
pub fn asset(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

/// Their `Cache-Control`: the path names the version.
pub const CACHE_CONTROL: &str = "public, max-age=31536000, immutable";
