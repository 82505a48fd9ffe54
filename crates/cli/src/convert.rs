use std::path::Path;

use crate::partition_cmd::ExternalDataArg;
use crate::Fail;

pub fn run(input: &Path, output: &Path, external: Option<ExternalDataArg>) -> Result<(), Fail> {
    for n in cleave::convert(input, output, external.map(Into::into))? {
        eprintln!("note: {n}");
    }
    Ok(())
}
