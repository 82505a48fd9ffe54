//! Which device runs each node.
//!
//! Rules come from ONE's `.part` files ([`PartFile`]); capabilities from device profiles; the
//! priority list (`--devices a,b`) is the fallback order, as in OpenVINO's `HETERO:A,B`.
//! Nodes that compute constants from constants alone are not assigned: they are weights, and
//! the partitioner copies them into every part that reads them.

mod assign;
mod part_file;
mod state;

pub use assign::{
    assign, inseparable_pairs, AssignError, AssignOptions, Assignment, Placement, Reason,
};
pub use part_file::{render_opname, Comply, PartError, PartFile};
pub use state::StateRegion;
