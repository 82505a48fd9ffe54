//! `cleave`: split a neural-network model across heterogeneous devices.
//!
//! The binary only parses flags, calls the library crates and formats their results and
//! errors: every failure is one line on stderr naming the file and the cause, exit code 2.

mod check;
mod convert;
mod fail;
mod inspect;
mod partition_cmd;
mod query;
mod setup;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use fail::Fail;

#[derive(Parser)]
#[command(name = "cleave", version, about = "Split a neural-network model across heterogeneous devices and run the pieces", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Summarise a model: format and opsets, op histogram, inputs and outputs with types,
    /// parameter bytes, graph depth, and any tensor whose type could not be inferred.
    Inspect {
        /// The model file (.onnx).
        model: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Load a model and save it again. ONNX to ONNX gives the same bytes (external data stays
    /// external, placed beside OUT); other formats arrive later.
    Convert {
        /// The model to read.
        input: PathBuf,
        /// Where to write; written to a temporary file first, then renamed.
        output: PathBuf,
    },
    /// Show which device runs each node (as OpenVINO's query_model does), and why.
    Query {
        /// The model file (.onnx).
        model: PathBuf,
        #[command(flatten)]
        devices: setup::DeviceArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Cut a model into the fewest cycle-free single-device parts and write each as
    /// WORKDIR/stem.00001_<backend>.onnx, plus stem.conn.json and stem.conn.ini (ONE's format).
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
        #[arg(short = 'o', long = "output", value_name = "WORKDIR")]
        workdir: PathBuf,
    },
    /// Prove a written partition sound against its source model: every node in exactly one
    /// part, one device per part, every part input ready before its part.
    Check {
        /// The partition's stem.conn.json.
        conn: PathBuf,
    },
}

fn main() -> ExitCode {
    // Like other command-line tools, stop quietly when the reader of stdout goes away
    // (`cleave query M | head`) instead of panicking on the failed write.
    // SAFETY: restoring the default disposition of a signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect { model, json } => inspect::run(&model, json),
        Command::Convert { input, output } => convert::run(&input, &output),
        Command::Query { model, devices, json } => query::run(&model, &devices, json),
        Command::Partition { model, devices, algorithm, allow_disconnected, trace, budget, workdir } => partition_cmd::run(partition_cmd::PartitionArgs {
            model: &model,
            devices: &devices,
            algorithm,
            allow_disconnected,
            trace,
            budget_s: budget,
            workdir: &workdir,
        }),
        Command::Check { conn } => check::run(&conn),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(fail) => {
            eprintln!("cleave: error: {fail}");
            ExitCode::from(fail.code())
        }
    }
}
