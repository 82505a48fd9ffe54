//! cleave splits a neural-network model across heterogeneous devices and runs the pieces.
//!
//! A partition's life is four types, each owning its next step (as tract's model goes typed →
//! optimized → runnable): [`LoadedModel`] → [`Assigned`] → [`Partitioned`] → [`Written`].
//! On the bundled example: load it, give every node a device by ONE's `.part` rules, cut the
//! fewest connected single-device parts and prove them, write the parts and ONE's connection
//! files, run them on tract and compare with the whole model.
//!
//! ```
//! use cleave::{load_model, Algorithm, AssignRequest, Devices, ExternalData};
//! use cleave::runtime::HostTensor;
//!
//! # fn main() -> Result<(), cleave::Error> {
//! let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tiny_cnn");
//! let devices = Devices::part_file(format!("{example}.part"))?;
//! let model = load_model(format!("{example}.onnx"))?;
//!
//! let assigned = model.into_assigned(devices, &AssignRequest::default())?;
//! let default = Algorithm::Default { allow_disconnected: false };
//! // Only validation makes a Partitioned: its plan is proven.
//! let mut partitioned = assigned.into_partitioned(default, &mut Vec::new())?;
//! assert_eq!(partitioned.plan.parts.len(), 4); // npu, cpu (the residual Add), npu, cpu (Softmax)
//!
//! let workdir = cleave::workdir::private_tempdir("parts-").map_err(cleave::Error::usage)?;
//! let written = partitioned.write(workdir.path(), ExternalData::Inline)?;
//! assert!(written.parts[0].file.starts_with("tiny_cnn.00001_"));
//!
//! // Run the parts in order and the whole model, on the same random input.
//! let x = HostTensor::random(cleave::ir::ElemType::F32, &[1, 3, 16, 16], 7)
//!     .map_err(cleave::Error::usage)?;
//! let feed = vec![("input".to_string(), x)];
//! let mut parts = written.load(&cleave::engine_map(&[])?, false)?;
//! let split = parts.run(feed.clone(), &mut [])?;
//! let tract = cleave::parse_engine("engine", "tract")?;
//! let mut whole = cleave::engine(tract)?.load(partitioned.assigned.loaded.path(), false)?;
//! for (name, want) in whole.run(&feed)? {
//!     assert_eq!(split[&name].diff(&want, 1e-4, 1e-5).beyond, 0);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The stages are format-neutral crates re-exported here ([`ir`], [`device`], [`fuse`],
//! [`assign`], [`mod@partition`], [`view`], [`runtime`]); each model format is a front-end
//! ([`frontend::Frontend`]: today [`onnx`]) that loads into the IR, answers what its
//! operators mean, rewrites, and writes parts.

mod assigned;
mod check;
mod choices;
mod convert;
pub mod coverage;
mod cut;
mod decode;
mod devices;
mod disagreements;
mod error;
mod generate;
mod latency;
mod learn;
mod load;
mod loaded;
mod measure;
mod openvino_devices;
mod partitioned;
mod recorded_shapes;
mod request;
mod run;
pub mod serve;
mod stages;
mod tokenizer;
mod views;
mod written;

pub use cleave_assign as assign;
pub use cleave_cost as cost;
pub use cleave_device as device;
pub use cleave_engines as engines;
pub use cleave_frontend as frontend;
pub use cleave_fuse as fuse;
pub use cleave_ir as ir;
pub use cleave_onnx as onnx;
pub use cleave_partition as partition;
pub use cleave_runtime as runtime;
pub use cleave_tflite as tflite;
pub use cleave_view as view;
pub use cleave_workdir as workdir;

pub use assigned::Assigned;
pub use check::{check_conn, read_partition, CheckError, CheckReport, ReadPartition};
pub use choices::{AlgorithmChoice, Choice};
pub use cleave_engines::Launcher;
pub use cleave_frontend::{
    Emitted, ExternalData, FixedDims, FormatModel, PartRecord, RewriteLevel, NO_RECORD,
};
pub use cleave_partition::ValidatedPlan;
pub use cleave_view::human_bytes;
pub use convert::convert;
pub use cut::{Algorithm, UnitPartition};
pub use decode::{conn_source_path, decoder_spec, generation, whole_generation, GenerateRequest};
pub use devices::{DeviceRequest, Devices, Rules};
pub use disagreements::known_disagreement;
pub use error::{Arg, Error, Face, Message, NodeRef};
pub use generate::{generate_model, Generated};
pub use latency::{
    Candidate, CostTable, Costs, LatencyChoice, Moved, Prediction, DEFAULT_MARGIN, SEARCH_BUDGET,
};
pub use learn::Learned;
pub use load::{frontend_for, frontends, load};
pub use loaded::{load_model, LoadedModel, RewriteSummary};
pub use measure::{measure, median_seconds, MeasureOptions};
pub use partitioned::Partitioned;
pub use recorded_shapes::{as_flags, conn_source_fixed};
pub use request::{
    load_and_assign, load_fixed, partition, AssignRequest, ModelSource, Objective,
    PartitionRequest, Progress,
};
pub use run::{
    conn_source, default_engine, engine, engine_map, engine_registry, engine_worker_main,
    isolate_engines, load_decoder_parts, load_parts, load_served_part, parse_engine,
    parse_engine_pair, EngineEvaluator,
};
pub use stages::{parse_memory, parse_size, DecodeContext, StageRequest, StageTime, Stages};
pub use tokenizer::TextCodec;
pub use views::{write_read_views, write_views, Views};
pub use written::Written;
