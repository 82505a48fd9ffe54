//! Small formatting helpers the views share.

/// Fill and stroke per device, in device order (the first three are the seed documents'
/// moss/steel/daisy tones); devices beyond the list reuse it.
const PALETTE: [(&str, &str); 8] = [
    ("#B9D6E5", "#5E93AF"),
    ("#FFE17A", "#D9A800"),
    ("#D7F3A2", "#8CB34A"),
    ("#F7C6C7", "#C9686C"),
    ("#D9CCF0", "#8D73C2"),
    ("#EAD9C0", "#B08F5F"),
    ("#BFEBDD", "#4FAE8E"),
    ("#E0E0E0", "#8A8A8A"),
];

pub fn fill(device: usize) -> &'static str {
    PALETTE[device % PALETTE.len()].0
}

pub fn stroke(device: usize) -> &'static str {
    PALETTE[device % PALETTE.len()].1
}

/// 1536 → "1.5 KiB".
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

/// Bytes of some tensors, with a note when some have a dynamic size.
pub fn bytes_label(total: u64, dynamic: bool) -> String {
    match (total, dynamic) {
        (0, true) => "dynamic size".to_string(),
        (t, true) => format!("{} + dynamic", human_bytes(t)),
        (t, false) => human_bytes(t),
    }
}

pub fn opt_bytes(b: Option<u64>) -> String {
    b.map_or_else(|| "dynamic".to_string(), human_bytes)
}

/// "1 node", "3 nodes".
pub fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// A part's parameter bytes as a phrase.
pub fn params(bytes: u64) -> String {
    if bytes == 0 {
        "no parameters".to_string()
    } else {
        format!("{} parameters", human_bytes(bytes))
    }
}

/// Text for HTML and SVG content and attribute values.
pub fn xml(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// A device name as an identifier (mermaid class, CSS class): other characters become `_`.
pub fn ident(s: &str) -> String {
    let id: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("dev_{id}")
}

/// Shortens long node names for boxes; the full name stays in tooltips and tables.
pub fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let head: String = s.chars().take(max.saturating_sub(1)).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_as_people_write_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(802_816), "784.0 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(bytes_label(0, true), "dynamic size");
    }

    #[test]
    fn markup_is_escaped_and_idents_are_plain() {
        assert_eq!(
            xml("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(ident("acl-cl.0"), "dev_acl_cl_0");
        assert_eq!(shorten("abcdef", 4), "abc…");
    }
}
