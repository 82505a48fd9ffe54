//! `cleave`: split a neural-network model across heterogeneous devices.
//!
//! The command line as a library, so that the Rust binary and the Python package's `cleave`
//! command run the same code in process ([`run`]). It only parses flags, calls the library crates and formats their results and
//! errors: every failure is one line on stderr naming the file and the cause, exit code 2.

mod bench_cmd;
mod bench_partition;
mod bench_placements;
mod check;
mod conformance_cmd;
mod convert;
mod counters;
mod coverage;
mod examples;
mod fail;
mod gen_cmd;
mod inputs;
mod inspect;
mod latency;
mod optimize_cmd;
mod partition_cmd;
mod process;
mod profile_cmd;
mod progress;
mod query;
mod report_cmd;
mod run_cmd;
mod serve_cmd;
mod setup;
mod stages_view;
mod timings;
mod verify_cmd;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use cleave::runtime::verify::Tolerance;

pub use fail::Fail;
pub use process::set_whole_process;

/// Every environment variable cleave reads (docs/commands.md lists the same; a test compares
/// both with the variables the code reads).
pub const ENVIRONMENT: &str = "\
Environment:
  CLEAVE_PYTHON               the Python asked for engine packages, OpenVINO's query_model and
                              serving (default: the first python3 in PATH's absolute folders);
                              it runs isolated: nothing is imported from the working folder
  ORT_DYLIB_PATH              ONNX Runtime's library (default: ~/.cache/cleave/ort, else the
                              onnxruntime package of that Python)
  CLEAVE_LITERT_LIB           LiteRT's library (default: the ai_edge_litert package's)
  CLEAVE_ONERT_LIB            onert's libonert.so (default: the onert package's)
  OPENVINO_LIB                OpenVINO's C library (default: the openvino package's)
  CLEAVE_OPENVINO_PROPERTIES  KEY=VALUE,... compile properties for OpenVINO
  CLEAVE_CACHE                where OpenVINO's answers are cached (default: ~/.cache/cleave)
  CLEAVE_RESOURCES            serving: backend -> Ray actor options, for an exported app
  CLEAVE_MAX_BODY_BYTES       serving: the largest HTTP body read where a dim is dynamic
  TMPDIR                      where private temporary folders (mode 0700) are made
  PYTHONPATH                  passed on to that Python with its relative entries removed";

#[derive(Parser)]
#[command(name = "cleave", version, about = "Split a neural-network model across heterogeneous devices and run the pieces", long_about = None, after_help = ENVIRONMENT)]
struct Cli {
    /// No progress bars (they are shown only when stderr is a terminal anyway).
    #[arg(long, short, global = true)]
    quiet: bool,
    /// After the command, print on stderr each phase it went through (read, decode, IR build,
    /// inference, assignment, fusion groups, unit graph, partition, plan validation, emission
    /// …) with its wall time, the resident memory when it ended and the peak so far.
    #[arg(long, global = true)]
    timings: bool,
    /// Write the same phases as JSON to FILE (`phases`: name, depth, wall_s, items,
    /// rss_bytes, peak_bytes; `whole_command`: wall_s, rss_bytes, peak_bytes).
    #[arg(long, global = true, value_name = "FILE")]
    timings_json: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Summarise a model: formats, ops, inputs and outputs, parameter bytes.
    ///
    /// Summarise a model: format and opsets, op histogram, inputs and outputs with types,
    /// parameter bytes, graph depth, and any tensor whose type could not be inferred.
    #[command(after_long_help = examples::INSPECT)]
    Inspect {
        /// The model file (.onnx).
        model: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also list every tensor of the top-level graph with its inferred type (in JSON, a
        /// `types` array; in text, one line each).
        #[arg(long)]
        types: bool,
        /// Fix an input's shape first: NAME=1,3,640,640 (see `query --help`).
        #[arg(long = "shape", value_name = "NAME=D,D,...")]
        shape: Vec<String>,
        /// Fix every dim named PARAM first: PARAM=N.
        #[arg(long = "dim", value_name = "PARAM=N")]
        dim: Vec<String>,
    },
    /// Save a model again, byte for byte, or convert between TFLite and circle.
    ///
    /// Load a model and save it again. ONNX to ONNX gives the same bytes (external data stays
    /// external, copied beside OUT). TFLite and circle convert into each other by OUT's
    /// extension (`a.tflite b.circle` and back); what the target cannot express (circle-only
    /// operators in TFLite, TFLite's newer types in circle) is refused, naming it.
    #[command(after_long_help = examples::CONVERT)]
    Convert {
        /// The model to read.
        input: PathBuf,
        /// Where to write; written to a temporary file first, then renamed.
        output: PathBuf,
        /// Move the weights: `inline` reads external data into OUT (up to protobuf's 2 GB);
        /// `shared` streams every initializer of 1 KiB or more into one file, OUT_STEM.weights
        /// beside OUT. Without it, weights stay where they are.
        #[arg(long, value_enum, value_name = "MODE")]
        external_data: Option<partition_cmd::ExternalDataArg>,
    },
    /// Show which device runs each node (as OpenVINO's query_model does), and why.
    #[command(after_long_help = examples::QUERY)]
    Query {
        /// The model file (.onnx).
        model: PathBuf,
        #[command(flatten)]
        devices: setup::DeviceArgs,
        /// Count the accelerators' parts letting a part hold regions that no tensor joins.
        #[arg(long)]
        allow_disconnected: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Rewrite a model for its devices and print the runtime graph.
    ///
    /// Rewrite a model for its devices (fold constants and BatchNorm, remove Identity/Dropout;
    /// at --level device also the devices' rewrites: group-conv merge, identity Power removal,
    /// joining, tiling) and print the runtime graph: each runtime layer, its type, its device
    /// and the source layers fused into it (OpenVINO's originalLayersNames).
    #[command(after_long_help = examples::OPTIMIZE)]
    Optimize {
        /// The model file (.onnx). It is read, never modified.
        model: PathBuf,
        #[command(flatten)]
        devices: setup::DeviceArgs,
        /// `basic` works for any device; `device` adds the devices' own rewrites.
        #[arg(long, value_enum, default_value = "device")]
        level: setup::OptLevel,
        /// Where to write the rewritten model (atomically; never the source).
        #[arg(short, long, value_name = "OUT.onnx")]
        output: PathBuf,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Cut a model into single-device parts; write them and ONE's connection files.
    ///
    /// Cut a model into the fewest cycle-free single-device parts and write each as
    /// WORKDIR/stem.00001_<backend>.onnx, plus stem.conn.json and stem.conn.ini (ONE's format).
    #[command(after_long_help = examples::PARTITION)]
    Partition {
        /// The model file (.onnx). It is read, never modified or copied.
        model: PathBuf,
        #[command(flatten)]
        devices: setup::DeviceArgs,
        /// Partitioning algorithm.
        #[arg(long, value_enum, default_value = "default")]
        algorithm: partition_cmd::Algorithm,
        /// Let a part hold same-device regions that no tensor joins (fewer parts).
        #[arg(long)]
        allow_disconnected: bool,
        /// Print the openvino algorithm's steps (Select root / Merge / Failed to merge / Rollback).
        #[arg(long)]
        trace: bool,
        /// Time budget of the openvino algorithm, in seconds.
        #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
        budget: f64,
        /// Output folder (created if missing).
        #[arg(
            short = 'o',
            long = "output",
            value_name = "WORKDIR",
            required_unless_present = "dry_run"
        )]
        workdir: Option<PathBuf>,
        /// How parts hold weights. `inline`: each part holds the bytes of the weights it uses.
        /// `shared`: every part references one file, WORKDIR/stem.weights, by offset and length
        /// (a copy of the source's one data file, offsets kept, else one streamed copy), so
        /// weights are neither duplicated across parts nor held in memory. A part over protobuf's 2 GB limit
        /// makes `inline` switch to `shared`, with a note.
        #[arg(long, value_enum, default_value = "inline", value_name = "MODE")]
        external_data: partition_cmd::ExternalDataArg,
        /// Pipeline-parallel split instead of device rules: N consecutive stages along a
        /// topological order, one part each, on the --devices in turn (or on stage1..N),
        /// chosen to make the slowest stage (the pipeline's throughput) as fast as possible.
        /// Stage times come from --costs (or profiles' declared [cost]), else estimated FLOPs.
        #[arg(long, value_name = "N", conflicts_with_all = ["part", "algorithm", "allow_disconnected"])]
        stages: Option<usize>,
        /// Memory budget of a stage's device, e.g. gpu0=16GiB,gpu1=16GiB (B, KB, MB, GB, KiB,
        /// MiB, GiB): each stage's weights plus its peak of live activations must fit. Needs
        /// --stages and static dims (--shape/--dim). A device not named is unbounded.
        #[arg(
            long,
            value_delimiter = ',',
            value_name = "DEVICE=SIZE",
            requires = "stages"
        )]
        memory: Vec<String>,
        /// Plan, validate and print the summary; write nothing.
        #[arg(long, conflicts_with = "report")]
        dry_run: bool,
        /// Also write the views of the partition beside the connection files: stem.partition.md
        /// (table and mermaid chart), stem.dot (Graphviz) and stem.report.html (self-contained).
        #[arg(long)]
        report: bool,
    },
    /// Measure what each node costs on each device, for --objective latency.
    ///
    /// Measure what each unit of a model costs on each device, for `--objective latency`:
    /// every node (a quantize and its dequantize together) is written as a model of its own
    /// and run alone on the engine of every device whose profile runs it, fed the tensors
    /// the whole model computes from seeded random (or given) inputs; warm-up runs, then the
    /// median of the timed runs. Each engine's per-call and copy costs are measured on a
    /// one-node probe at 4 bytes and 4 MiB and taken out of the units' times. Writes a JSON
    /// cost file that partition, query and bench read with --costs.
    #[command(after_long_help = examples::PROFILE)]
    Profile {
        /// The model file (.onnx). Its dims must be static, or fixed with --shape/--dim.
        model: PathBuf,
        #[command(flatten)]
        devices: setup::DeviceArgs,
        #[command(flatten)]
        engine: setup::EngineArgs,
        /// Untimed runs per unit and device before the timed ones.
        #[arg(long, default_value_t = 2)]
        warmup: u32,
        /// Timed runs per unit and device (the median is kept).
        #[arg(long, default_value_t = 10)]
        repeats: u32,
        /// Seconds after which every remaining unit gets one warm-up and one timed run.
        #[arg(long, value_name = "SECONDS")]
        budget: Option<f64>,
        /// Seed of the random inputs (inputs not given with --input).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        input: setup::InputArgs,
        /// The cost file to write (atomically).
        #[arg(short = 'o', long = "output", value_name = "COSTS.json")]
        output: PathBuf,
        /// Print the cost file instead of the summary.
        #[arg(long)]
        json: bool,
        /// Let each engine use every core. By default each runs on one thread, so that a
        /// device is a core of its own and its figures do not swing with the other cores'
        /// load; `bench --objective latency` then runs the engines as they were profiled.
        #[arg(long)]
        all_cores: bool,
    },
    /// Write the views of a written partition (Markdown, Graphviz, HTML).
    ///
    /// Write the views of a written partition beside its connection files: stem.partition.md
    /// (summary table and mermaid flowchart), stem.dot (Graphviz) and stem.report.html (one
    /// self-contained page: part graph, a table per part, node graph with parts as clusters).
    #[command(after_long_help = examples::REPORT)]
    Report {
        /// The partition's stem.conn.json. It is checked against its source model first.
        conn: PathBuf,
        /// The source model, when it is no longer where the connection file's source.file says.
        #[arg(long, value_name = "MODEL")]
        model: Option<PathBuf>,
    },
    /// Run a partition's parts on their engines and write the model's outputs.
    ///
    /// Run a partition: each part on its backend's engine, in any order whose inputs are
    /// ready; write the model's outputs as .npy and print per-part counters.
    #[command(after_long_help = examples::RUN)]
    Run {
        /// The partition's stem.conn.json.
        conn: PathBuf,
        #[command(flatten)]
        input: setup::InputArgs,
        /// Folder for the outputs (NAME.npy).
        #[arg(short = 'o', long = "output", default_value = ".", value_name = "DIR")]
        out_dir: PathBuf,
        #[command(flatten)]
        engine: setup::EngineArgs,
        /// Keep N requests in flight, one worker per device (the VPU page's pipelining):
        /// part k of request i overlaps part k+1 of request i-1. Each engine then runs on one
        /// thread; the outputs are checked identical to a sequential run.
        #[arg(long, default_value_t = 1, value_name = "N")]
        requests: usize,
        /// Run the parts N times in a row on the same sessions and inputs, so a stateful
        /// model's variables carry over; each invoke's outputs are written as NAME.K.npy.
        #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
        invokes: u32,
        /// Fix an input's shape (NAME=1,3,640,640), as on partition: the inputs given are
        /// checked against the fixed shapes. Repeat per input.
        #[arg(long = "shape", value_name = "NAME=D,D,...")]
        shape: Vec<String>,
        /// Fix every dim named PARAM (e.g. batch=1) wherever the model declares it.
        #[arg(long = "dim", value_name = "PARAM=N")]
        dim: Vec<String>,
        /// Print the counters as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Time the model whole, partitioned and pipelined, and compare.
    ///
    /// Time the model monolithic, partitioned sequential and partitioned pipelined, back to
    /// back in one process: medians, throughput, and the ratios between them. With
    /// `--objective latency` (and --costs): the placement the cost model chose, the
    /// capability placement and each single device that runs the whole model instead, timed
    /// in interleaved rounds, measured next to predicted.
    #[command(after_long_help = examples::BENCH)]
    Bench {
        /// A partition (stem.conn.json), or a model to partition with the device flags.
        target: PathBuf,
        #[command(flatten)]
        devices: setup::DeviceArgs,
        /// Timed runs per mode (after one warm-up run).
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Requests in flight in the pipelined mode.
        #[arg(long, default_value_t = 4, value_name = "N")]
        requests: usize,
        #[command(flatten)]
        engine: setup::EngineArgs,
        #[arg(long)]
        json: bool,
        /// Time the partitioner instead of the model: the default algorithm, a bare
        /// topological sort of the same graph, and (up to 1000 units) the openvino algorithm;
        /// TARGET is a model, placed by --part/--devices or else by the .part file beside it.
        #[arg(long)]
        partition: bool,
        /// Time the partition (TARGET a stem.conn.json) served on the Ray cluster at ADDRESS,
        /// as `serve` deploys it: --runs requests with 1 and with --requests in flight;
        /// throughput, latency percentiles and the overhead per hop between parts.
        #[arg(long, value_name = "ADDRESS", conflicts_with = "partition")]
        ray: Option<String>,
        /// With --ray: how the parts are deployed.
        #[command(flatten)]
        deploy: setup::RayArgs,
    },
    /// Serve a written partition on a Ray cluster (Ray Serve).
    ///
    /// Serve a written partition on a Ray cluster: each part a Ray Serve deployment (or actor),
    /// placed by its backend's Ray resources (a backend named gpu*/cuda* asks for a GPU, any other
    /// for a custom resource of its own name that the cluster's nodes declare, e.g.
    /// `ray start --resources='{"npu": 1}'`; `cpu` asks for nothing). Each part runs on the
    /// engine of its format: ONNX parts on ONNX Runtime (its CUDA provider for a gpu*/cuda*
    /// backend where onnxruntime-gpu is installed, else the CPU), TFLite and circle parts
    /// (converted to TFLite) on LiteRT, parts the conn file records for OpenVINO on OpenVINO.
    /// Tensors go from part to part (one Ray Serve deployment per part; --data-plane compiled
    /// joins them by a Ray Compiled Graph instead), parts whose inputs are ready run at once, and
    /// requests pipeline through the parts, behind an HTTP route (POST an .npz of the inputs;
    /// `?boundaries=1` also returns every tensor between parts). Needs Python with Ray:
    /// pip install 'cleave-nn[ray]' (and 'cleave-nn[litert]' for TFLite and circle parts).
    #[command(after_long_help = examples::SERVE)]
    Serve {
        /// The partition's stem.conn.json (its part files beside it).
        conn: PathBuf,
        /// Address of the running cluster's head (HOST:PORT), as `ray start --head` printed it.
        #[arg(
            long,
            value_name = "ADDRESS",
            required_unless_present = "export",
            conflicts_with = "export"
        )]
        ray: Option<String>,
        /// Instead of deploying: write a self-contained Ray Serve application to DIR (the
        /// parts, conn.json, app.py and serve_config.yaml), for `serve run` / `serve deploy`.
        #[arg(long, value_name = "DIR")]
        export: Option<PathBuf>,
        #[command(flatten)]
        deploy: setup::RayArgs,
        /// HTTP port of the route.
        #[arg(long, value_name = "PORT")]
        http_port: Option<u16>,
        /// Name of the Ray Serve application (default: the partition's stem).
        #[arg(long)]
        name: Option<String>,
        /// Return once deployed instead of serving until interrupted.
        #[arg(long)]
        detach: bool,
        /// Seconds to wait for the cluster and for the deployments to come up.
        #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
        timeout: f64,
    },
    /// Write a random network-shaped model and a .part file, for scale tests.
    ///
    /// Write a random model shaped like a real network (chains, residual adds, branches joined
    /// by a concat, long skips; every tensor [1,4] float, no weights) and a .part file that
    /// places each node, in runs as an accelerator would take them, for scale tests.
    #[command(after_long_help = examples::GEN)]
    Gen {
        /// Number of nodes.
        #[arg(long, default_value_t = 1000)]
        nodes: usize,
        /// Number of devices (cpu, npu, gpu, dsp, dev4...).
        #[arg(long, default_value_t = 2)]
        devices: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// The model to write (.onnx).
        #[arg(short = 'o', long = "output", value_name = "MODEL.onnx")]
        output: PathBuf,
        /// Where to write the .part file (default: beside the model, MODEL.part).
        #[arg(long, value_name = "FILE.part")]
        part: Option<PathBuf>,
    },
    /// Compare the parts with the whole model on the same inputs.
    ///
    /// Run the whole model and its parts on the same inputs and compare them: every model
    /// output and, with --boundaries, every tensor that crosses between parts. Exits 1 when
    /// a tensor differs beyond tolerance.
    ///
    /// By default a float tensor passes when its relative L2 error ‖parts − whole‖ / ‖whole‖
    /// is at most --tol (integers and booleans must be equal). Engines round differently
    /// across a cut (tract folds BatchNorm into Conv in the whole model but not across a part
    /// boundary; ONNX Runtime and tract differ in the last bits), which leaves errors of
    /// about 1e-7..1e-5 spread over a tensor and trips element-wise checks on near-zero
    /// values; a miswired tensor is off by about its own size. --rtol/--atol switch to
    /// numpy's element-wise allclose instead.
    #[command(after_long_help = examples::VERIFY)]
    Verify {
        /// The source model.
        model: PathBuf,
        /// A partition of it (stem.conn.json); without one, MODEL is partitioned with the
        /// device flags into a temporary folder.
        conn: Option<PathBuf>,
        #[command(flatten)]
        devices: setup::DeviceArgs,
        /// Also compare every boundary tensor with the same tensor inside the whole model.
        #[arg(long)]
        boundaries: bool,
        /// Largest relative L2 error of a float tensor (at least 16 epsilons of its type, so
        /// float16 gets 1.6e-2).
        #[arg(long, default_value_t = cleave::runtime::verify::DEFAULT_NORM_TOL, conflicts_with_all = ["rtol", "atol"])]
        tol: f64,
        /// Compare element by element instead: |parts − whole| <= atol + rtol·|whole|
        /// (default 1e-4 when only --atol is given).
        #[arg(long)]
        rtol: Option<f64>,
        /// Absolute part of the element-wise check (default 1e-5 when only --rtol is given).
        #[arg(long)]
        atol: Option<f64>,
        /// Seed of the random inputs (inputs not given with --input).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        input: setup::InputArgs,
        #[command(flatten)]
        engine: setup::EngineArgs,
        /// Engine that runs the whole model (tract, ort, litert, openvino[:DEVICE],
        /// onert[:BACKENDS]). Default: litert for a .tflite model, onert for a .circle one,
        /// else tract.
        #[arg(long)]
        reference: Option<String>,
        /// Run N inferences in a row on the same sessions (random inputs seeded SEED, SEED+1,
        /// ...), comparing each: a stateful model's variables carry over between them.
        #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
        invokes: u32,
        #[arg(long)]
        json: bool,
    },
    /// Run the ONNX backend node tests through cleave on one engine.
    ///
    /// Run the ONNX backend node tests (folders with model.onnx and test_data_set_0) through
    /// cleave on one engine: each model is partitioned as one part, run, and compared with
    /// the shipped outputs. Prints pass, fail and unsupported counts.
    #[command(after_long_help = examples::CONFORMANCE)]
    Conformance {
        /// The folder of test cases, e.g. ~/.cache/cleave/test-data/node.
        dir: PathBuf,
        /// tract or ort.
        #[arg(long, default_value = "tract")]
        engine: String,
        #[arg(long)]
        json: bool,
    },
    /// Prove a written partition sound against its source model.
    ///
    /// Prove a written partition sound against its source model: every node in exactly one
    /// part, one device per part, every part input ready before its part.
    #[command(after_long_help = examples::CHECK)]
    Check {
        /// The partition's stem.conn.json.
        conn: PathBuf,
    },
}

/// Runs the command line `args` (the program name first) and returns the exit code: 0 done,
/// 1 a verification that found differences, 2 bad input or flags (one line on stderr).
/// Help and version requests print and return 0. Nothing here exits the process.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = e.exit_code();
            // A closed stderr leaves nothing to tell.
            let _ = e.print();
            return u8::try_from(code).unwrap_or(2);
        }
    };
    progress::set_quiet(cli.quiet);
    let started = std::time::Instant::now();
    cleave::ir::phases::take();
    let (timings, timings_json) = (cli.timings, cli.timings_json);
    // A verification that ran and found differences is not an error, but exits 1.
    let mut differences = false;
    let result = match cli.command {
        Command::Inspect {
            model,
            json,
            types,
            shape,
            dim,
        } => setup::parse_fixed(&shape, &dim)
            .and_then(|fixed| inspect::run(&model, json, types, &fixed)),
        Command::Convert {
            input,
            output,
            external_data,
        } => convert::run(&input, &output, external_data),
        Command::Query {
            model,
            devices,
            allow_disconnected,
            json,
        } => query::run(&model, &devices, allow_disconnected, json),
        Command::Optimize {
            model,
            devices,
            level,
            output,
            json,
        } => optimize_cmd::run(&model, &devices, level, &output, json),
        Command::Partition {
            model,
            devices,
            algorithm,
            allow_disconnected,
            trace,
            budget,
            workdir,
            external_data,
            stages,
            memory,
            dry_run,
            report,
        } => partition_cmd::run(partition_cmd::PartitionArgs {
            model: &model,
            devices: &devices,
            algorithm,
            allow_disconnected,
            trace,
            budget_s: budget,
            workdir: workdir.as_deref().unwrap_or(std::path::Path::new(".")),
            external_data: external_data.into(),
            stages,
            memory: &memory,
            dry_run,
            report,
        }),
        Command::Profile {
            model,
            devices,
            engine: setup::EngineArgs { engines },
            warmup,
            repeats,
            budget,
            seed,
            input: setup::InputArgs { inputs },
            output,
            json,
            all_cores,
        } => profile_cmd::run(profile_cmd::ProfileArgs {
            all_cores,
            model: &model,
            devices: &devices,
            engines: &engines,
            warmup,
            repeats,
            budget_s: budget,
            seed,
            inputs: &inputs,
            output: &output,
            json,
        }),
        Command::Report { conn, model } => report_cmd::run(&conn, model.as_deref()),
        Command::Check { conn } => check::run(&conn),
        Command::Gen {
            nodes,
            devices,
            seed,
            output,
            part,
        } => gen_cmd::run(gen_cmd::GenArgs {
            nodes,
            devices,
            seed,
            output: &output,
            part: part.as_deref(),
        }),
        Command::Conformance { dir, engine, json } => conformance_cmd::run(&dir, &engine, json),
        Command::Run {
            conn,
            input: setup::InputArgs { inputs },
            out_dir,
            engine: setup::EngineArgs { engines },
            requests,
            invokes,
            shape,
            dim,
            json,
        } => run_cmd::run(run_cmd::RunArgs {
            invokes,
            shape: &shape,
            dim: &dim,
            conn: &conn,
            inputs: &inputs,
            out_dir: &out_dir,
            engines: &engines,
            json,
            requests,
        }),
        Command::Bench {
            target,
            devices,
            runs,
            json,
            partition: true,
            ..
        } => bench_partition::run(&target, &devices, runs, json),
        Command::Bench {
            target,
            runs,
            requests,
            json,
            ray: Some(address),
            deploy,
            ..
        } => serve_cmd::bench(serve_cmd::RayBenchArgs {
            conn: &target,
            address: &address,
            runs,
            requests,
            deploy: &deploy,
            json,
        }),
        Command::Bench { deploy, .. } if deploy.any() => Err(Fail::usage(
            "--resources, --replicas, --threads and --data-plane say how to deploy on Ray: give them with --ray ADDRESS",
        )),
        Command::Serve {
            conn,
            ray,
            export,
            deploy,
            http_port,
            name,
            detach,
            timeout,
        } => serve_cmd::serve(serve_cmd::ServeArgs {
            conn: &conn,
            ray: ray.as_deref(),
            export: export.as_deref(),
            deploy: &deploy,
            http_port,
            name: name.as_deref(),
            detach,
            timeout_s: timeout,
        }),
        Command::Bench {
            target,
            devices,
            runs,
            engine: setup::EngineArgs { engines },
            json,
            partition: false,
            ..
        } if devices.objective == setup::Objective::Latency => {
            bench_placements::run(&target, &devices, runs, &engines, json)
        }
        Command::Bench {
            target,
            devices,
            runs,
            requests,
            engine: setup::EngineArgs { engines },
            json,
            partition: false,
            ..
        } => bench_cmd::run(bench_cmd::BenchArgs {
            target: &target,
            devices: &devices,
            runs,
            requests,
            engines: &engines,
            json,
        }),
        Command::Verify {
            model,
            conn,
            devices,
            boundaries,
            tol,
            rtol,
            atol,
            seed,
            input: setup::InputArgs { inputs },
            engine: setup::EngineArgs { engines },
            reference,
            invokes,
            json,
        } => {
            let tolerance = if rtol.is_some() || atol.is_some() {
                Tolerance::Elementwise {
                    rtol: rtol.unwrap_or(1e-4),
                    atol: atol.unwrap_or(1e-5),
                }
            } else {
                Tolerance::Norm(tol)
            };
            match verify_cmd::run(verify_cmd::VerifyArgs {
                model: &model,
                conn: conn.as_deref(),
                devices: &devices,
                boundaries,
                tolerance,
                seed,
                inputs: &inputs,
                engines: &engines,
                reference: reference.as_deref(),
                invokes,
                json,
            }) {
                Ok(true) => Ok(()),
                Ok(false) => {
                    differences = true;
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
    };
    let result = result.and_then(|()| timings::report(timings, timings_json.as_deref(), started));
    match result {
        Ok(()) => u8::from(differences),
        Err(fail) => {
            if !fail.is_silent() {
                eprintln!("cleave: error: {fail}");
            }
            fail.code()
        }
    }
}

/// Writes the views of the written partition `conn` (markdown, DOT and the HTML report)
/// beside it, as `cleave report` does; returns the HTML file's path.
pub fn write_report(conn: &std::path::Path) -> Result<std::path::PathBuf, String> {
    report_cmd::run(conn, None).map_err(|e| e.to_string())?;
    let file = conn
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = file.strip_suffix(".conn.json").unwrap_or(&file);
    Ok(conn.with_file_name(format!("{stem}.report.html")))
}
