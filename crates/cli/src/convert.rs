use std::path::Path;

use crate::Fail;

pub fn run(
    input: &Path,
    output: &Path,
    external: Option<cleave::ExternalData>,
) -> Result<(), Fail> {
    for n in cleave::convert(input, output, external)? {
        eprintln!("note: {n}");
    }
    Ok(())
}

// `cleave convert`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The model to read.
    pub input: std::path::PathBuf,
    /// Where to write; written to a temporary file first, then renamed.
    pub output: std::path::PathBuf,
    /// Move the weights: `inline` reads external data into OUT (up to protobuf's 2 GB);
    /// `shared` streams every initializer of 1 KiB or more into one file, OUT_STEM.weights
    /// beside OUT. Without it, weights stay where they are.
    #[arg(long, value_name = "MODE", value_parser = crate::choice_arg::words::<cleave::ExternalData>())]
    pub external_data: Option<cleave::ExternalData>,
}

pub fn main(a: Args) -> Result<(), Fail> {
    run(&a.input, &a.output, a.external_data)
}
