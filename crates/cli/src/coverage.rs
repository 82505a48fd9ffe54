//! Printing `query`'s per-accelerator summary (computed by `cleave::coverage`).

use cleave::coverage::Coverage;

pub fn print(c: &Coverage) {
    let pct = if c.nodes_total == 0 {
        0.0
    } else {
        c.nodes_on_device as f64 * 100.0 / c.nodes_total as f64
    };
    let sizes: Vec<String> = c.parts.iter().map(usize::to_string).collect();
    println!(
        "\n{}: {} parts [{}], {}/{} nodes ({pct:.1}%)",
        c.device,
        c.parts.len(),
        sizes.join(", "),
        c.nodes_on_device,
        c.nodes_total
    );
    if c.unsupported_ops.is_empty() {
        println!("  unsupported op types: none");
    } else {
        println!(
            "  unsupported op types ({} nodes): {}",
            c.nodes_unsupported_op,
            c.unsupported_ops
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for (reason, n) in &c.constraint_failures {
        println!("  {n} nodes break a checked condition: {reason}");
    }
    if !c.caveats.is_empty() {
        println!(
            "  caveats not checked, which may keep a node off {}:",
            c.device
        );
        for caveat in &c.caveats {
            println!("    {caveat}");
        }
    }
    println!("  worth it? {}", c.verdict);
}
