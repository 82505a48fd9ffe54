//! How much memory cleave asks for on a file's or a flag's word. A declared shape or a
//! request count is a claim: before it becomes an allocation it is checked against this
//! machine's memory, so a `float32[1048576,1048576]` input is a one-line refusal naming the
//! input, not an abort inside the allocator.

use std::sync::OnceLock;

/// This machine's physical memory in bytes (`MemTotal`), or 1 TiB where it cannot be read.
pub fn limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
                let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
                kib.checked_mul(1024)
            })
            .unwrap_or(1 << 40)
    })
}

/// `bytes` (None: it overflowed) as something that can be allocated, or why not.
pub fn check(bytes: Option<u64>) -> Result<u64, String> {
    let limit = limit();
    match bytes {
        Some(b) if b <= limit => Ok(b),
        Some(b) => Err(format!(
            "{} bytes, more than this machine's {} bytes of memory",
            b, limit
        )),
        None => Err("more bytes than any machine holds".into()),
    }
}

/// Bytes of `count` elements of `width` bytes, checked.
pub fn elements(shape: &[usize], width: u64) -> Result<u64, String> {
    let n = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
    check(n.and_then(|n| n.checked_mul(width)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_past_memory_or_past_u64_are_refused() {
        assert_eq!(elements(&[2, 3], 4), Ok(24));
        let e = elements(&[1 << 20, 1 << 20], 8).unwrap_err();
        assert!(
            e.contains("8796093022208 bytes, more than this machine's"),
            "{e}"
        );
        let e = elements(&[1 << 31, 1 << 31, 1 << 31], 8).unwrap_err();
        assert_eq!(e, "more bytes than any machine holds");
    }
}
