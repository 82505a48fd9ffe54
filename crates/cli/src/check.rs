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
