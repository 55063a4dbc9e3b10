//! The buyer page (`web/index.html`), with the one thing the gate fills in
//! when it serves it: where payments go (`DEMO_PAYMENT_URL`; locally the
//! origin's demo payment endpoint, deployed the shop's).

const TEMPLATE: &str = include_str!("../web/index.html");
const PLACEHOLDER: &str = "__FLASHGATE_PAYMENT_URL__";

/// Escapes text for an HTML attribute value in double quotes.
fn attribute(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// The page, pointing its Pay button at `payment_url`.
pub fn html(payment_url: &str) -> String {
    TEMPLATE.replace(PLACEHOLDER, &attribute(payment_url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payment_url_is_filled_in_escaped() {
        let page = html("http://127.0.0.1:8788");
        assert!(page.contains(r#"content="http://127.0.0.1:8788""#));
        assert!(!page.contains(PLACEHOLDER));
        let hostile = html(r#"x"><script>alert(1)</script>"#);
        assert!(!hostile.contains("<script>alert"));
        assert!(hostile.contains("&quot;&gt;&lt;script&gt;"));
    }
}
