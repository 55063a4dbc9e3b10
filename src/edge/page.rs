//! The pages the gate serves: the product list (`web/index.html`), a
//! product's page (`web/product.html`) and the admin console
//! (`web/admin.html`). Each is one file with its own script and no build
//! step; `web/shared.js` (the zh/en texts and a few helpers) is inlined
//! into each where it says `/*SHARED*/`, and `web/odds.js` (the waiting
//! room's odds in words) where it says `/*ODDS*/` (by build.rs, which also
//! hashes every inline script and style for the policy below). The gate fills in
//! the language it chose from `Accept-Language`, the product id, and where
//! payments go (`DEMO_PAYMENT_URL`; locally the origin's demo payment
//! endpoint, deployed the shop's), all outside the scripts (in `<html
//! lang>` and `<meta>`), so a script's hash never depends on the request.

use crate::edge::routes::Page;
use crate::limits::PAYMENT_ORIGIN_BYTES_MAX;

/// The CSP sources of a page's inline scripts and styles.
struct Hashes {
    scripts: &'static [&'static str],
    styles: &'static [&'static str],
}

// `LIST`, `PRODUCT`, `ADMIN` (the pages with the shared script inlined) and
// their `*_HASHES`, from build.rs.
include!(concat!(env!("OUT_DIR"), "/pages.rs"));

const LANG: &str = "__LANG__";
const PAYMENT_URL: &str = "__FLASHGATE_PAYMENT_URL__";
const PRODUCT_ID: &str = "__PRODUCT_ID__";

/// The languages the pages are written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    En,
    Zh,
}

impl Lang {
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh-CN",
        }
    }

    /// The language a request prefers among ours (RFC 9110's
    /// `Accept-Language`: the highest weight wins, the first among equals;
    /// `zh`, `zh-CN`, `zh-Hans`, `zh-TW`... all read Chinese). English when
    /// nothing matches.
    pub fn from_accept_language(header: Option<&str>) -> Lang {
        let mut best: Option<(u16, Lang)> = None;
        for item in header.unwrap_or("").split(',').take(32) {
            let mut parts = item.split(';');
            let range = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let weight = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .map_or(1000, |q| {
                    (q.trim().parse::<f32>().unwrap_or(0.0) * 1000.0) as u16
                });
            let lang = if range == "zh" || range.starts_with("zh-") {
                Lang::Zh
            } else if range == "en" || range.starts_with("en-") {
                Lang::En
            } else {
                continue;
            };
            if weight > 0 && best.is_none_or(|(w, _)| weight > w) {
                best = Some((weight, lang));
            }
        }
        best.map_or(Lang::En, |(_, l)| l)
    }
}

/// Escapes text for HTML, inside an element or a double-quoted attribute.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page, in `lang`, with its Pay button pointing at `payment_url`.
pub fn html(page: &Page, lang: Lang, payment_url: &str) -> String {
    let (template, product_id) = match page {
        Page::List => (LIST, ""),
        Page::Product(id) => (PRODUCT, id.as_str()),
        Page::Admin => (ADMIN, ""),
    };
    template
        .replace(LANG, lang.tag())
        .replace(PAYMENT_URL, &escape(payment_url))
        .replace(PRODUCT_ID, &escape(product_id))
}

/// The origin (`scheme://host[:port]`) of `payment_url`, if it is an http(s)
/// URL whose origin is safe to write into a policy: only the characters a
/// host and port are made of, so a value cannot end the directive or add one.
fn payment_origin(payment_url: &str) -> Option<&str> {
    let rest = payment_url
        .strip_prefix("https://")
        .or_else(|| payment_url.strip_prefix("http://"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let origin = &payment_url[..payment_url.len() - rest.len() + host.len()];
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
    (!host.is_empty() && host.chars().all(safe) && origin.len() <= PAYMENT_ORIGIN_BYTES_MAX)
        .then_some(origin)
}

/// The `Content-Security-Policy` of `page`: nothing but its own inline
/// scripts and styles (by hash), requests to the gate and to the payment
/// origin, and no framing, `<base>` or form posts elsewhere. An injected
/// script, style attribute or event handler does not run.
///
/// Images may come from any `https:` origin, not one named origin: a
/// product's face names its own image host (`flashgate_core::Face`, which
/// refuses every other scheme), and the list shows many products, whose
/// faces the scripts read after the page's header was sent. An image runs
/// nothing, and the page sends no referrer with it (`referrer-policy`).
pub fn policy(page: &Page, payment_url: &str) -> String {
    let hashes = match page {
        Page::List => &LIST_HASHES,
        Page::Product(_) => &PRODUCT_HASHES,
        Page::Admin => &ADMIN_HASHES,
    };
    let mut connect = String::from("'self'");
    // Only the product page pays.
    if let (Page::Product(_), Some(origin)) = (page, payment_origin(payment_url)) {
        connect.push(' ');
        connect.push_str(origin);
    }
    // The product page loads the ALTCHA widget, its styles and its Web
    // Worker from the gate itself (`edge::assets`) when the waiting room
    // asks a proof of work: 'self', and nothing outside.
    let own = match page {
        Page::Product(_) => " 'self'",
        _ => "",
    };
    let workers = match page {
        Page::Product(_) => "; worker-src 'self'",
        _ => "",
    };
    format!(
        "default-src 'none'; script-src {}{own}; style-src {}{own}; connect-src {connect}; \
         img-src 'self' https:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'{workers}",
        hashes.scripts.join(" "),
        hashes.styles.join(" "),
    )
}

/// The header fields every page is answered with, besides its type.
pub fn security_fields(page: &Page, payment_url: &str) -> [(&'static str, String); 4] {
    [
        ("content-security-policy", policy(page, payment_url)),
        // For browsers that predate `frame-ancestors`.
        ("x-frame-options", "DENY".into()),
        ("x-content-type-options", "nosniff".into()),
        // The product id and the path go to no one else.
        ("referrer-policy", "no-referrer".into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payment_url_and_product_are_filled_in_escaped() {
        let page = html(
            &Page::Product("demo".into()),
            Lang::En,
            "http://127.0.0.1:8788",
        );
        assert!(page.contains(r#"content="http://127.0.0.1:8788""#));
        assert!(page.contains(r#"content="demo""#));
        for slot in [PAYMENT_URL, PRODUCT_ID, LANG, SHARED_SLOT, ODDS_SLOT] {
            assert!(!page.contains(slot), "{slot} left in");
        }
        let hostile = html(
            &Page::Product("demo".into()),
            Lang::En,
            r#"x"><script>alert(1)</script>"#,
        );
        assert!(!hostile.contains("<script>alert"));
        assert!(hostile.contains("&quot;&gt;&lt;script&gt;"));
    }

    const SHARED: &str = include_str!("../../web/shared.js");
    const SHARED_SLOT: &str = "/*SHARED*/";
    const ODDS_SLOT: &str = "/*ODDS*/";

    /// Every inline `<script …>…</script>` and `<style …>…</style>` in
    /// `html`, attributes or not, found independently of build.rs.
    fn inline_blocks<'a>(html: &'a str, tag: &str) -> Vec<&'a str> {
        let (open, close) = (format!("<{tag}"), format!("</{tag}>"));
        let mut blocks = Vec::new();
        let mut rest = html;
        while let Some(at) = rest.find(&open) {
            let after = &rest[at + open.len()..];
            let start = after.find('>').expect("the tag ends") + 1;
            let end = after.find(&close).expect("the block ends");
            blocks.push(&after[start..end]);
            rest = &after[end + close.len()..];
        }
        blocks
    }

    fn sha256_source(text: &str) -> String {
        use base64::Engine as _;
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(text.as_bytes());
        format!(
            "'sha256-{}'",
            base64::engine::general_purpose::STANDARD.encode(digest)
        )
    }

    fn directive<'a>(policy: &'a str, name: &str) -> Vec<&'a str> {
        policy
            .split(';')
            .map(str::trim)
            .find_map(|d| d.strip_prefix(name).filter(|v| v.starts_with(' ')))
            .unwrap_or_else(|| panic!("{name} missing from {policy}"))
            .split_whitespace()
            .collect()
    }

    #[test]
    fn every_inline_script_and_style_of_every_page_is_allowed_by_its_policy() {
        for page in [Page::List, Page::Product("demo".into()), Page::Admin] {
            for lang in [Lang::En, Lang::Zh] {
                let url = "http://127.0.0.1:8788";
                let html = html(&page, lang, url);
                let policy = policy(&page, url);
                let scripts = directive(&policy, "script-src");
                let styles = directive(&policy, "style-src");
                let found_scripts = inline_blocks(&html, "script");
                let found_styles = inline_blocks(&html, "style");
                assert!(
                    !found_scripts.is_empty() && !found_styles.is_empty(),
                    "{page:?}"
                );
                for block in &found_scripts {
                    let source = sha256_source(block);
                    assert!(
                        scripts.contains(&source.as_str()),
                        "{page:?} {lang:?}: a script hashed {source} is not in {policy}"
                    );
                }
                for block in &found_styles {
                    let source = sha256_source(block);
                    assert!(
                        styles.contains(&source.as_str()),
                        "{page:?} {lang:?}: a style hashed {source} is not in {policy}"
                    );
                }
                // Nothing else: exactly one source per block, no keyword
                // that would let an injected script or style in; the
                // product page adds 'self' for the ALTCHA widget's files,
                // which only the gate serves (`edge::assets`), and its
                // Web Worker.
                let own = usize::from(matches!(page, Page::Product(_)));
                assert_eq!(scripts.len(), found_scripts.len() + own, "{policy}");
                assert_eq!(styles.len(), found_styles.len() + own, "{policy}");
                if own == 1 {
                    assert!(scripts.contains(&"'self'") && styles.contains(&"'self'"));
                    assert_eq!(directive(&policy, "worker-src"), ["'self'"]);
                } else {
                    assert!(!scripts.contains(&"'self'") && !styles.contains(&"'self'"));
                    assert!(!policy.contains("worker-src"), "{policy}");
                }
                // Inline handlers and style attributes would need
                // 'unsafe-hashes'; the pages have none.
                for attribute in [
                    " style=\"",
                    " onclick=",
                    " onload=",
                    " onerror=",
                    " onsubmit=",
                    " oninput=",
                    " onchange=",
                ] {
                    assert!(!html.contains(attribute), "{page:?} has {attribute}");
                }
                // Images: the gate's own and https ones (a face's), and
                // no other scheme (no http:, no data:, no wildcard).
                assert_eq!(directive(&policy, "img-src"), ["'self'", "https:"]);
                for required in [
                    "default-src 'none'",
                    "frame-ancestors 'none'",
                    "base-uri 'none'",
                    "form-action 'self'",
                ] {
                    assert!(
                        policy.contains(required),
                        "{required} missing from {policy}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_payment_origin_is_allowed_only_on_the_product_page_and_only_when_safe() {
        let product = Page::Product("demo".into());
        let connect =
            |page: &Page, url: &str| directive(&policy(page, url), "connect-src").join(" ");
        assert_eq!(
            connect(&product, "http://127.0.0.1:8788"),
            "'self' http://127.0.0.1:8788"
        );
        assert_eq!(
            connect(&product, "https://pay.example/v1/x?y"),
            "'self' https://pay.example"
        );
        assert_eq!(
            connect(&product, "https://[::1]:9/"),
            "'self' https://[::1]:9"
        );
        assert_eq!(connect(&Page::List, "http://127.0.0.1:8788"), "'self'");
        assert_eq!(connect(&Page::Admin, "http://127.0.0.1:8788"), "'self'");
        for hostile in [
            "",
            "javascript:alert(1)",
            "http://",
            "http://a; script-src 'unsafe-inline'",
            "http://a b",
            "http://a'",
            "http://a,b",
            "ftp://a",
            &format!("https://{}", "a".repeat(300)),
        ] {
            assert_eq!(connect(&product, hostile), "'self'", "{hostile:?}");
        }
        let fields = security_fields(&product, "http://a; x");
        for (name, value) in &fields {
            assert!(!value.contains(['\n', '\r']), "{name}");
        }
        assert!(fields
            .iter()
            .any(|(n, v)| *n == "x-content-type-options" && v == "nosniff"));
        assert!(fields
            .iter()
            .any(|(n, v)| *n == "x-frame-options" && v == "DENY"));
    }

    #[test]
    fn every_page_is_filled_in_and_all_fit_the_budget() {
        for page in [Page::List, Page::Product("p".into()), Page::Admin] {
            let html = html(&page, Lang::Zh, "");
            assert!(html.contains(r#"<html lang="zh-CN">"#), "{page:?}");
            assert!(
                html.contains("const TEXT"),
                "{page:?} lacks the shared texts"
            );
            for slot in [PAYMENT_URL, PRODUCT_ID, LANG, SHARED_SLOT, ODDS_SLOT] {
                assert!(!html.contains(slot), "{slot} left in {page:?}");
            }
        }
        // The issue's budget: a buyer's pages and their script together
        // under 50 KB, with no external resource. The console is the
        // operator's, opened by a few people and never by the crowd, so it
        // has a budget of its own: its labels and help in two languages
        // cost what they cost, and never a buyer's load time.
        let buyers = SHARED.len() + (LIST.len() - SHARED.len()) + (PRODUCT.len() - SHARED.len());
        assert!(buyers < 50 * 1024, "the buyer pages weigh {buyers} bytes");
        assert!(
            ADMIN.len() < 50 * 1024,
            "the console weighs {} bytes",
            ADMIN.len()
        );
        for template in [LIST, PRODUCT, ADMIN] {
            for external in ["src=\"http", "href=\"http", "url(http", "@import", "<link"] {
                assert!(!template.contains(external), "{external}");
            }
        }
    }

    #[test]
    fn the_language_follows_accept_language() {
        let cases = [
            (None, Lang::En),
            (Some(""), Lang::En),
            (Some("zh-CN,zh;q=0.9,en;q=0.8"), Lang::Zh),
            (Some("zh-TW"), Lang::Zh),
            (Some("en-US,en;q=0.9,zh-CN;q=0.8"), Lang::En),
            (Some("fr-FR, zh;q=0.5, en;q=0.4"), Lang::Zh),
            (Some("en;q=0.1, zh;q=0.2"), Lang::Zh),
            (Some("zh;q=0, en;q=0.1"), Lang::En),
            (Some("de"), Lang::En),
            (Some("zh;q=nonsense"), Lang::En),
        ];
        for (header, want) in cases {
            assert_eq!(Lang::from_accept_language(header), want, "{header:?}");
        }
    }
}
