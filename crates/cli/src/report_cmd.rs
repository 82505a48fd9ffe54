//! `cleave report CONN.json` and `cleave partition --report`: the views of a partition, written
//! next to its connection files.

use std::path::Path;

use cleave::{read_partition, Views};

use crate::Fail;

pub fn run(conn: &Path, model: Option<&Path>) -> Result<(), Fail> {
    let read = read_partition(conn, model).map_err(|e| Fail::input(e.path(), &e))?;
    let source = model.map_or_else(
        || read.conn.source.file.clone(),
        |m| m.display().to_string(),
    );
    say(&cleave::write_read_views(&read, conn, &source)?);
    Ok(())
}

/// The one line that says what the views show and where they are.
pub fn say(v: &Views) {
    let per_device: Vec<String> = v
        .per_device
        .iter()
        .map(|(d, n)| format!("{n} on {d}"))
        .collect();
    let w = &v.files;
    let explorer = w.explorer.as_ref().map_or_else(String::new, |p| {
        format!(" (and {}, for Model Explorer)", p.display())
    });
    println!(
        "report: {} parts ({}), {} nodes; wrote {}, {} and {}{explorer}",
        v.parts,
        per_device.join(", "),
        v.nodes,
        w.markdown.display(),
        w.dot.display(),
        w.html.display()
    );
}

// `cleave report`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The partition's stem.conn.json. It is checked against its source model first.
    pub conn: std::path::PathBuf,
    /// The source model, when it is no longer where the connection file's source.file says.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<std::path::PathBuf>,
}

pub fn main(a: Args) -> Result<(), Fail> {
    run(&a.conn, a.model.as_deref())
}
