//! `cleave`: split a neural-network model across heterogeneous devices.
//!
//! The command line as a library, so that the Rust binary and the Python package's `cleave`
//! command run the same code in process ([`run`]). It only parses flags, calls the library crates and formats their results and
//! errors: every failure is one line on stderr naming the file and the cause, exit code 2.

mod bench_cmd;
mod bench_partition;
mod bench_placements;
mod check;
mod choice_arg;
mod conformance_cmd;
mod convert;
mod counters;
mod coverage;
mod examples;
mod fail;
mod gen_cmd;
mod generate_cmd;
mod inputs;
mod inspect;
mod latency;
mod measure_cmd;
mod optimize_cmd;
mod partition_cmd;
mod process;
mod progress;
mod query;
mod report_cmd;
mod run_cmd;
mod serve_cmd;
mod serve_flags;
mod setup;
mod timings;
mod verify_cmd;
mod verify_generate;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use fail::Fail;
pub use process::{engine_worker, set_whole_process, ENGINE_WORKER};

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
  CLEAVE_ISOLATE              0 runs LiteRT and onert inside cleave's process (default: each
                              in a worker process, so a model that crashes one is an error)
  CLEAVE_MAX_BODY_BYTES       serving: the largest HTTP body read where a dim is dynamic
  CLEAVE_MAX_NPZ_ENTRIES      serving: the most entries a request's .npz may hold (1024)
  CLEAVE_MAX_NPZ_RATIO        serving: the most an .npz entry may unpack to per packed byte (100)
  CLEAVE_MAX_INFLIGHT_BYTES   serving: bytes all requests in flight may hold (2 x max body)
  CLEAVE_BODY_TIMEOUT_S       serving: seconds a request body may take to arrive (30, plus
  CLEAVE_BODY_MIN_RATE          1 s per CLEAVE_BODY_MIN_RATE bytes, 256 KiB)
  CLEAVE_MAX_UPLOADS_PER_CLIENT serving: bodies one client address may send at once (32)
  CLEAVE_MAX_CONNECTIONS      serving: connections the ingress's own port keeps (256, 64 per
  CLEAVE_MAX_CONNECTIONS_PER_CLIENT client address)
  CLEAVE_HEADER_TIMEOUT_S     serving: seconds a request's headers may take there (10)
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
    Inspect(inspect::Args),
    /// Save a model again, byte for byte, or convert between TFLite and circle.
    ///
    /// Load a model and save it again. ONNX to ONNX gives the same bytes (external data stays
    /// external, copied beside OUT). TFLite and circle convert into each other by OUT's
    /// extension (`a.tflite b.circle` and back); what the target cannot express (circle-only
    /// operators in TFLite, TFLite's newer types in circle) is refused, naming it.
    #[command(after_long_help = examples::CONVERT)]
    Convert(convert::Args),
    /// Show which device runs each node (as OpenVINO's query_model does), and why.
    #[command(after_long_help = examples::QUERY)]
    Query(query::Args),
    /// Rewrite a model for its devices and print the runtime graph.
    ///
    /// Rewrite a model for its devices (fold constants and BatchNorm, remove Identity/Dropout;
    /// at --level device also the devices' rewrites: group-conv merge, identity Power removal,
    /// joining, tiling) and print the runtime graph: each runtime layer, its type, its device
    /// and the source layers fused into it (OpenVINO's originalLayersNames).
    #[command(after_long_help = examples::OPTIMIZE)]
    Optimize(optimize_cmd::Args),
    /// Cut a model into single-device parts; write them and ONE's connection files.
    ///
    /// Cut a model into the fewest cycle-free single-device parts and write each as
    /// WORKDIR/stem.00001_<backend>.onnx, plus stem.conn.json and stem.conn.ini (ONE's format).
    #[command(after_long_help = examples::PARTITION)]
    Partition(partition_cmd::Args),
    /// Measure what each node costs on each device, for --objective latency.
    ///
    /// Measure what each unit of a model costs on each device, for `--objective latency`:
    /// every node (a quantize and its dequantize together) is written as a model of its own
    /// and run alone on the engine of every device whose profile runs it, fed the tensors
    /// the whole model computes from seeded random (or given) inputs; warm-up runs, then the
    /// median of the timed runs. Each engine's per-call and copy costs are measured on a
    /// one-node probe at 4 bytes and 4 MiB and taken out of the units' times. Writes a JSON
    /// cost file that partition, query and bench read with --costs.
    #[command(after_long_help = examples::MEASURE)]
    Measure(measure_cmd::Args),
    /// Write the views of a written partition (Markdown, Graphviz, HTML).
    ///
    /// Write the views of a written partition beside its connection files: stem.partition.md
    /// (summary table and mermaid flowchart), stem.dot (Graphviz) and stem.report.html (one
    /// self-contained page: part graph, a table per part, node graph with parts as clusters).
    #[command(after_long_help = examples::REPORT)]
    Report(report_cmd::Args),
    /// Run a partition's parts on their engines and write the model's outputs.
    ///
    /// Run a partition: each part on its backend's engine, in any order whose inputs are
    /// ready; write the model's outputs as .npy and print per-part counters.
    #[command(after_long_help = examples::RUN)]
    Run(run_cmd::Args),
    /// Generate tokens with a decoder LLM's parts, in process.
    ///
    /// Generate tokens with a decoder LLM's parts (a partition of an Optimum or
    /// onnxruntime-genai export): the prompt in one step, then one token per step, each
    /// printed as it comes. Every part keeps its layers' KV cache between steps: each state
    /// pair's output (present.N.key) is fed back as its input (past_key_values.N.key) on the
    /// next step, and only the hidden state crosses between parts. Greedy by default;
    /// --temperature, --top-k, --top-p and --seed sample. Prints, on stderr, the prefill time,
    /// the median time a token and the bytes between parts per token.
    #[command(after_long_help = examples::GENERATE)]
    Generate(generate_cmd::Args),
    /// Time the model whole, partitioned and pipelined, and compare.
    ///
    /// Time the model monolithic, partitioned sequential and partitioned pipelined, back to
    /// back in one process: medians, throughput, and the ratios between them. With
    /// `--objective latency` (and --costs): the placement the cost model chose, the
    /// capability placement and each single device that runs the whole model instead, timed
    /// in interleaved rounds, measured next to predicted.
    #[command(after_long_help = examples::BENCH)]
    Bench(bench_cmd::Args),
    /// Serve a written partition on a Ray cluster (Ray Serve).
    ///
    /// Serve a written partition on a Ray cluster: each part a Ray actor (or Serve deployment),
    /// placed by its backend's Ray resources (a backend named gpu*/cuda* asks for a GPU, any other
    /// for a custom resource of its own name that the cluster's nodes declare, e.g.
    /// `ray start --resources='{"npu": 1}'`; `cpu` asks for nothing). Each part runs on
    /// cleave's own runtime, as `cleave run` runs it: ONNX parts on ONNX Runtime (tract where
    /// it is missing), TFLite parts on LiteRT, circle parts on onert (converted to TFLite for
    /// LiteRT where onert is missing), parts the conn file records for OpenVINO on OpenVINO.
    /// Tensors go from part to part over a Ray Compiled Graph (--data-plane handles: one Ray
    /// Serve deployment per part instead), parts whose inputs are ready run at once, and
    /// requests pipeline through the parts, behind an HTTP route (POST an .npz of the inputs;
    /// `?boundaries=1` also returns every tensor between parts), which the ingress also
    /// answers on a port of its own, skipping Serve's proxy (--ingress-port). Needs a Python with
    /// Ray and the cleave package on every node: pip install 'cleave-nn[ray]' (and
    /// 'cleave-nn[litert]' for TFLite and circle parts).
    #[command(after_long_help = examples::SERVE)]
    Serve(serve_cmd::Args),
    /// Write a random network-shaped model and a .part file, for scale tests.
    ///
    /// Write a random model shaped like a real network (chains, residual adds, branches joined
    /// by a concat, long skips; every tensor [1,4] float, no weights) and a .part file that
    /// places each node, in runs as an accelerator would take them, for scale tests.
    #[command(after_long_help = examples::GEN)]
    Gen(gen_cmd::Args),
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
    Verify(verify_cmd::Args),
    /// Run the ONNX backend node tests through cleave on one engine.
    ///
    /// Run the ONNX backend node tests (folders with model.onnx and test_data_set_0) through
    /// cleave on one engine: each model is partitioned as one part, run, and compared with
    /// the shipped outputs. Prints pass, fail and unsupported counts.
    #[command(after_long_help = examples::CONFORMANCE)]
    Conformance(conformance_cmd::Args),
    /// Prove a written partition sound against its source model.
    ///
    /// Prove a written partition sound against its source model: every node in exactly one
    /// part, one device per part, every part input ready before its part.
    #[command(after_long_help = examples::CHECK)]
    Check(check::Args),
}

/// Flags renamed so that each word has one meaning: (old, new). The old spelling is taken,
/// with a note, for a release.
const RENAMED_FLAGS: &[(&str, &str)] = &[("--part", "--rules")];

/// Commands renamed likewise: `cleave profile` measured latencies, while a profile is a
/// device's file.
const RENAMED_COMMANDS: &[(&str, &str)] = &[("profile", "measure")];

/// `args` with each old spelling replaced by its new one, saying so on stderr. A command is
/// renamed only as the command (the first word after the global flags, or the word after
/// `help`), nothing after `--`.
fn renamed(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out = Vec::with_capacity(args.len());
    let (mut command_next, mut value_next, mut options_over) = (true, false, false);
    for (k, a) in args.into_iter().enumerate() {
        let Some(s) = a.to_str().filter(|_| k > 0 && !options_over) else {
            value_next = false;
            out.push(a);
            continue;
        };
        if s == "--" {
            options_over = true;
        } else if let Some((old, new)) = RENAMED_FLAGS
            .iter()
            .find(|(old, _)| s == *old || s.strip_prefix(old).is_some_and(|r| r.starts_with('=')))
        {
            eprintln!("cleave: note: {old} is now {new} ({old} is taken until a later release)");
            out.push(format!("{new}{}", &s[old.len()..]).into());
            continue;
        } else if command_next && !value_next && !s.starts_with('-') {
            command_next = s == "help";
            if let Some((old, new)) = RENAMED_COMMANDS.iter().find(|(old, _)| s == *old) {
                eprintln!(
                    "cleave: note: `cleave {old}` is now `cleave {new}` (`{old}` is taken until a later release)"
                );
                out.push((*new).into());
                continue;
            }
        }
        value_next = command_next && s == "--timings-json";
        out.push(a);
    }
    out
}

/// Runs the command line `args` (the program name first) and returns the exit code: 0 done,
/// 1 a verification that found differences, 2 bad input or flags (one line on stderr).
/// Help and version requests print and return 0. Nothing here exits the process.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args = renamed(args.into_iter().map(Into::into).collect());
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
    let mut differences = false;
    let result = match cli.command {
        Command::Inspect(a) => inspect::main(a),
        Command::Convert(a) => convert::main(a),
        Command::Query(a) => query::main(a),
        Command::Optimize(a) => optimize_cmd::main(a),
        Command::Partition(a) => partition_cmd::main(a),
        Command::Measure(a) => measure_cmd::run(a),
        Command::Report(a) => report_cmd::main(a),
        Command::Check(a) => check::main(a),
        Command::Gen(a) => gen_cmd::run(a),
        Command::Conformance(a) => conformance_cmd::main(a),
        Command::Run(a) => run_cmd::run(a),
        Command::Generate(a) => generate_cmd::main(a),
        Command::Bench(a) => bench_cmd::main(a),
        Command::Serve(a) => serve_cmd::serve(a),
        // A verification that ran and found differences is not an error, but exits 1.
        Command::Verify(a) => verify_cmd::main(a).map(|same| differences = !same),
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
