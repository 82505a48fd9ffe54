//! Views of a partition: `stem.partition.md` (a summary table and a mermaid flowchart),
//! `stem.dot` (the same graph for Graphviz), `stem.report.html` (one self-contained page: the
//! part graph as inline SVG, a table per part, and the node graph with parts as clusters) and
//! `stem.model-explorer.json` (a node-data overlay for Google's Model Explorer).
//!
//! [`Report`] gathers what every view shows from a graph and its plan; each view is a pure
//! function of it. The SVGs are laid out here (`flow` for the part graph, [`layout`] for the
//! node graph), so a user needs no Graphviz.

mod data;
mod dot;
mod explorer;
mod flow;
mod html;
pub mod layout;
mod mermaid;
mod text;
mod write;

pub use data::{FusedGroup, LatencyView, NodeView, PartEdge, PartView, Report, Tensor};
pub use dot::to_dot;
pub use explorer::to_model_explorer;
pub use html::to_html;
pub use mermaid::to_markdown;
pub use text::human_bytes;
pub use write::{write_views, ViewError, Written};

/// Above this many placed nodes the mermaid chart shows parts, not nodes: larger charts are
/// beyond what mermaid renders legibly.
pub const MERMAID_NODE_LIMIT: usize = 300;

/// Above this many placed nodes the DOT file and the HTML report leave out the node graph.
pub const NODE_VIEW_LIMIT: usize = 2000;

/// Above this many placed nodes the HTML report's node graph starts folded.
pub const NODE_VIEW_OPEN: usize = 200;

#[cfg(test)]
mod tests;
