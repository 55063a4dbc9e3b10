//! The pages the gate serves: the product list (`web/index.html`), a
//! product's page (`web/product.html`) and the admin console
//! (`web/admin.html`). Each is one file with its own script and no build
//! step; `web/shared.js` (the zh/en texts and a few helpers) is inlined
//! into each where it says `/*SHARED*/`. The gate fills in the language it
//! chose from `Accept-Language`, the product id, and where payments go
//! (`DEMO_PAYMENT_URL`; locally the origin's demo payment endpoint,
//! deployed the shop's).

use crate::edge::routes::Page;

const LIST: &str = include_str!("../../web/index.html");
const PRODUCT: &str = include_str!("../../web/product.html");
const ADMIN: &str = include_str!("../../web/admin.html");
const SHARED: &str = include_str!("../../web/shared.js");

const SHARED_SLOT: &str = "/*SHARED*/";
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
        .replace(SHARED_SLOT, SHARED)
        .replace(LANG, lang.tag())
        .replace(PAYMENT_URL, &escape(payment_url))
        .replace(PRODUCT_ID, &escape(product_id))
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
        for slot in [PAYMENT_URL, PRODUCT_ID, LANG, SHARED_SLOT] {
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

    #[test]
    fn every_page_is_filled_in_and_all_fit_the_budget() {
        let mut total = SHARED.len();
        for (page, template) in [
            (Page::List, LIST),
            (Page::Product("p".into()), PRODUCT),
            (Page::Admin, ADMIN),
        ] {
            let html = html(&page, Lang::Zh, "");
            assert!(html.contains(r#"<html lang="zh-CN">"#), "{page:?}");
            assert!(
                html.contains("const TEXT"),
                "{page:?} lacks the shared texts"
            );
            for slot in [PAYMENT_URL, PRODUCT_ID, LANG, SHARED_SLOT] {
                assert!(!html.contains(slot), "{slot} left in {page:?}");
            }
            total += template.len();
        }
        // The issue's budget: every page and script together under 50 KB,
        // with no external resource.
        assert!(total < 50 * 1024, "the pages weigh {total} bytes");
        for template in [LIST, PRODUCT, ADMIN, SHARED] {
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
