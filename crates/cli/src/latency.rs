//! Printing what `--objective latency` chose and what a split is predicted to cost.

use cleave::cost::Method;
use cleave::{LatencyChoice, Prediction};

pub fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}

/// A short time a user reads: microseconds below a millisecond (never "0.0 ms"), else
/// milliseconds, else seconds.
pub fn duration(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1e-3 {
        format!("{} µs", (s * 1e6).round().max(1.0))
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// Where the figures come from, for every line that shows a prediction.
pub fn provenance(declared: &[String], estimated: &[String]) -> String {
    let mut said = Vec::new();
    if !estimated.is_empty() {
        said.push(format!("built-in estimates for {}", estimated.join(", ")));
    }
    let by_user: Vec<&str> = declared
        .iter()
        .filter(|d| !estimated.contains(d))
        .map(String::as_str)
        .collect();
    if !by_user.is_empty() {
        said.push(format!("declared figures for {}", by_user.join(", ")));
    }
    if said.is_empty() {
        return "measured figures".into();
    }
    said.join("; ")
}

/// The stderr note that a prediction rests on estimates, once per command.
pub fn estimates_note(model: &std::path::Path, estimated: &[String]) -> Option<String> {
    (!estimated.is_empty()).then(|| {
        format!(
            "cleave: note: {}: the latency figures for {} are cleave's built-in estimates (from published figures), not measurements: predictions may be off by 2x or more; cleave measure on the target gives --costs",
            model.display(),
            estimated.join(", ")
        )
    })
}

/// The choice: method, the candidates it beat, and the units it moved and why.
pub fn choice_lines(c: &LatencyChoice) -> Vec<String> {
    let mut out = Vec::new();
    let method =
        match c.method {
            Method::Exact { placements } => {
                format!("exact, every one of {placements} placements tried")
            }
            Method::Scalable {
                evaluations,
                finished,
            } => format!(
            "scalable: candidates, chain programme and climb, {evaluations} placements priced{}",
            if finished { "" } else { ", stopped by its time budget" }
        ),
        };
    out.push(format!(
        "objective latency ({method}), planned in {:.1} ms; predicted {} ({}; parts run one after another, devices do not overlap)",
        c.planning.as_secs_f64() * 1e3,
        ms(c.total_s),
        provenance(&c.declared, &c.estimated)
    ));
    let others: Vec<String> = c
        .candidates
        .iter()
        .map(|k| {
            format!(
                "{} {} ({} part{})",
                k.name,
                ms(k.total_s),
                k.parts,
                if k.parts == 1 { "" } else { "s" }
            )
        })
        .collect();
    out.push(format!(
        "  predicted, for comparison: {}",
        others.join("; ")
    ));
    if let Some(split) = c.split_declined {
        out.push(format!(
            "  the best split, predicted {}, is not faster than the best single device by more than the margin (--margin): one device runs it all",
            ms(split)
        ));
    }
    if let Some((total, parts)) = c.more_parts_declined {
        out.push(format!(
            "  the search's best placement, predicted {} in {parts} parts, is not faster than the capability split, with fewer parts, by more than the margin (--margin): capability kept",
            ms(total)
        ));
    }
    if c.moved.is_empty() {
        out.push("  no unit moved from the capability placement".to_string());
        return out;
    }
    out.push(format!(
        "  {} unit{} moved from the capability placement:",
        c.moved.len(),
        if c.moved.len() == 1 { "" } else { "s" }
    ));
    let mut moved = c.moved.clone();
    moved.sort_by(|a, b| (b.from_s - b.to_s).total_cmp(&(a.from_s - a.to_s)));
    for m in moved.iter().take(10) {
        let why = if m.to_s < m.from_s {
            "faster there"
        } else {
            "slower alone, but joining its neighbours saves a part's launch and copies"
        };
        out.push(format!(
            "    {} ({}): {} {} -> {} {}: {why}",
            m.label,
            m.op,
            m.from,
            ms(m.from_s),
            m.to,
            ms(m.to_s)
        ));
    }
    if moved.len() > 10 {
        out.push(format!("    ... and {} more", moved.len() - 10));
    }
    out
}

/// One line: the plan's predicted total and its parts.
pub fn prediction_lines(p: &Prediction, part_files: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    out.push(format!(
        "predicted latency: {} over {} part{} ({})",
        ms(p.estimate.total_s),
        p.estimate.parts.len(),
        if p.estimate.parts.len() == 1 { "" } else { "s" },
        provenance(&p.declared, &p.estimated)
    ));
    for (k, part) in p.estimate.parts.iter().enumerate() {
        let name = part_files.get(k).map_or("?", String::as_str);
        out.push(format!(
            "  {name}: {} (nodes {}, launch {}, copies {}, links {})",
            ms(part.total_s()),
            ms(part.compute_s),
            ms(part.launch_s),
            ms(part.io_s),
            ms(part.link_s)
        ));
    }
    out
}
