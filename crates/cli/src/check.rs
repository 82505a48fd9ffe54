use std::path::Path;

use cleave::check_conn;

use crate::Fail;

pub fn run(conn: &Path) -> Result<(), Fail> {
    let r = check_conn(conn).map_err(|e| Fail::input(e.path(), &e))?;
    println!(
        "{}: valid: {} parts, {} nodes each in exactly one part, {} constant-node copies, every part input ready before its part",
        conn.display(),
        r.parts,
        r.placed_nodes,
        r.copied_constants
    );
    Ok(())
}

// `cleave check`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The partition's stem.conn.json.
    pub conn: std::path::PathBuf,
}

pub fn main(a: Args) -> Result<(), Fail> {
    run(&a.conn)
}
