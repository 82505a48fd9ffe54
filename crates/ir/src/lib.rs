//! Format-neutral graph IR for cleave.
//!
//! A [`Model`] holds one top-level [`Graph`] of [`Node`]s and [`Value`]s, plus the model-local
//! [`Function`]s it may call. Values are tensors named as in the source file; weights are held
//! by reference ([`WeightData`]), never copied out of the loaded file. Building a graph with
//! [`GraphBuilder`] checks its integrity (every read defined, one producer per tensor, no cycle)
//! and indexes producers, consumers and a topological order.
//!
//! What the stages after loading need to know of an operator comes from the front-end through
//! [`OpSemantics`]; each node keeps a [`SourceRef`] back to its record in the source file.
//!
//! Architecture invariant: this crate knows nothing about ONNX, protobuf or any engine.

mod attr;
mod builder;
mod error;
mod graph;
mod model;
mod op_type;
pub mod phases;
mod rng;
mod semantics;
mod state;
mod types;
mod weight;
pub mod words;

pub use attr::{AttrValue, Attribute};
pub use builder::{GraphBuilder, NodeSpec};
pub use error::GraphError;
pub use graph::{
    Graph, Name, Node, NodeId, Quantization, Slots, SourceRef, Value, ValueDef, ValueId,
};
pub use model::{Function, Model, Opset};
pub use op_type::OpType;
pub use rng::XorShift64;
pub use semantics::{NamedOps, OpClass, OpSemantics, StateGroup, Window};
pub use state::{grows, parse_state_pair, recognised_state, state_pairs, StatePair, TOKEN_INPUT};
pub use types::{Dim, ElemType, TensorType};
pub use weight::{Weight, WeightData};
