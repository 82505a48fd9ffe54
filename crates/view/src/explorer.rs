//! `stem.model-explorer.json`: the partition as a node-data overlay for Google's Model Explorer
//! (`pip install ai-edge-model-explorer`). Opened over the source model, it colours each node by
//! its device, as the report does, and names its part (and op, which Model Explorer shows too).
//!
//! The file is Model Explorer's `GraphNodeData` without a graph id (`{"results": {...}}`), which
//! it applies to whichever graph is shown: the model's main graph. Results are keyed by the
//! node ids Model Explorer's adapter gives the format (the front-end supplies them); a string
//! value is coloured only by its own `bgColor`.

use crate::text::fill;
use crate::Report;

/// The overlay, or `None` when the ids are unknown (`ids[i]`: the (id, op) of each node Model
/// Explorer draws for source record `i`).
pub fn to_model_explorer(r: &Report, ids: &[Vec<(String, String)>]) -> Option<String> {
    if ids.is_empty() {
        return None;
    }
    let mut results = serde_json::Map::new();
    let mut add = |record: usize, what: &str, colour: &str| {
        for (id, op) in ids.get(record).into_iter().flatten() {
            results.insert(
                id.clone(),
                serde_json::json!({ "value": format!("{what} · {op}"), "bgColor": colour }),
            );
        }
    };
    for n in &r.nodes {
        if let Some(record) = n.source {
            let device = r.parts[n.part].device;
            let what = format!("part {} · {}", n.part + 1, r.devices[device]);
            add(record, &what, fill(device));
        }
    }
    for (record, _) in &r.unplaced {
        add(*record, "constant, copied where read", "#EEEEEE");
    }
    let data = serde_json::json!({
        "name": format!("cleave partition of {}", r.model),
        "results": results,
    });
    serde_json::to_string_pretty(&data).ok()
}
