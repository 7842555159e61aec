//! The one HTML escaper of every page the report writes.

/// `text` for HTML, in an element or in an attribute quoted either way:
/// the one escaper of every page the report writes (the HTML index, the
/// attribution and the device pages, the sources-changed banner).
pub(crate) fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}
