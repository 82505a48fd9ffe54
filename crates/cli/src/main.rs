//! `cleave`: split a neural-network model across heterogeneous devices.
//!
//! The binary only parses flags, calls the library crates and formats their results and
//! errors: every failure is one line on stderr naming the file and the cause, exit code 2.

mod convert;
mod fail;
mod inspect;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect { model, json } => inspect::run(&model, json),
        Command::Convert { input, output } => convert::run(&input, &output),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(fail) => {
            eprintln!("cleave: error: {fail}");
            ExitCode::from(fail.code())
        }
    }
}
