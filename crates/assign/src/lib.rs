//! Which device runs each node.
//!
//! Rules come from ONE's `.part` files ([`PartFile`]); capabilities from device profiles; the
//! priority list (`--devices a,b`) is the fallback order, as in OpenVINO's `HETERO:A,B`.
//! Nodes that compute constants from constants alone are not assigned: they are weights, and
//! the partitioner copies them into every part that reads them.

mod assign;
mod error;
mod part_file;
mod placement;
mod state;

pub use assign::{assign, inseparable_pairs, AssignOptions, Assignment};
pub use error::{AssignError, Hint};
pub use part_file::{render_opname, Comply, PartError, PartFile, RuleTable};
pub use placement::{Placement, Reason};
pub use state::StateRegion;
