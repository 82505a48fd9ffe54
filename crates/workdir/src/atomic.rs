//! Writes that either complete or leave the old file in place.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("cannot write: {source}")]
pub struct WriteError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Writes `data` to a temporary file beside `path`, syncs it and renames it into place, so a
/// reader never sees half a file and a failed write leaves what was there. The temporary
/// file is created exclusively under a random name (a link planted in a shared folder is
/// never followed) and removed on every error path; the folder is synced after the rename.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), WriteError> {
    write_with(path, |f| f.write_all(data))
}

/// [`write_atomic`] of a copy of the file `src` (through `copy_file_range` where the system
/// has it, so extents are shared where the file system can).
pub fn copy_atomic(src: &Path, path: &Path) -> Result<(), WriteError> {
    write_with(path, |f| {
        std::io::copy(&mut File::open(src)?, f)?;
        Ok(())
    })
}

/// Creates a temporary file beside `path` exclusively under a random name, lets `fill` write
/// it, syncs it and renames it into place; the temporary file is removed on every error path.
pub fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> Result<(), WriteError> {
    let write_err = |source| WriteError {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        write_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name",
        ))
    })?;
    let prefix = format!(".{}.", name.to_string_lossy());
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    // The mode a plain file creation gives (0666 less the umask), not tempfile's 0600: the
    // result is an output like any other.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut tmp = builder.tempfile_in(dir).map_err(write_err)?;
    fill(tmp.as_file_mut()).map_err(write_err)?;
    tmp.as_file().sync_all().map_err(write_err)?;
    tmp.persist(path).map_err(|e| write_err(e.error))?;
    // The rename is durable once the folder's entry is; a folder that cannot be opened or
    // synced (some filesystems) still holds the complete file.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::write_atomic;

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/folder/x.bin");
        let err = write_atomic(&missing, b"x").unwrap_err();
        assert_eq!(err.path, missing);
        write_atomic(&dir.path().join("x.bin"), b"abc").unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["x.bin"]);
    }

    #[cfg(unix)]
    #[test]
    fn the_file_gets_the_mode_a_plain_creation_gives() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain.bin");
        std::fs::write(&plain, b"x").unwrap();
        let atomic = dir.path().join("atomic.bin");
        write_atomic(&atomic, b"x").unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&atomic), mode(&plain));
    }
}
