//! Temporary folders only their owner can open (0700) and files only their owner can read
//! (0600): a model handed to cleave as bytes, parts written for a plan in memory and the
//! files serving runs from are someone's private model. `tempfile`'s own folders follow the
//! umask (0755 under the usual 022).

use std::io::Write;
use std::path::Path;

use tempfile::{Builder, TempDir};

fn builder(prefix: &str) -> Builder<'_, 'static> {
    let mut b = Builder::new();
    b.prefix(prefix);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(std::fs::Permissions::from_mode(0o700));
    }
    b
}

/// A new folder `prefix*` in the system's temporary folder, mode 0700, removed when dropped
/// (and on SIGINT, SIGTERM and SIGHUP where the program asked: `remove_on_signals`).
pub fn private_tempdir(prefix: &str) -> std::io::Result<TempDir> {
    let d = builder(prefix).tempdir()?;
    crate::signals::made(d.path().to_path_buf());
    Ok(d)
}

/// A new folder `prefix*` inside `dir`, mode 0700, removed when dropped (and on signals, as
/// [`private_tempdir`]).
pub fn private_tempdir_in(prefix: &str, dir: &Path) -> std::io::Result<TempDir> {
    let d = builder(prefix).tempdir_in(dir)?;
    crate::signals::made(d.path().to_path_buf());
    Ok(d)
}

/// Writes `bytes` to the new file `path` with mode 0600 (it must not exist: a name planted in
/// the folder is an error, never followed).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(path)?;
    f.write_all(bytes)?;
    f.flush()
}

/// Makes every file under `dir` (a private temporary folder others wrote into) mode 0600 and
/// every folder 0700.
pub fn seal(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // A file another writer renames away meanwhile (its temporary name) is no error.
        let gone = |r: std::io::Result<()>| match r {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        };
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = entry.path();
            if kind.is_dir() {
                gone(std::fs::set_permissions(
                    &path,
                    std::fs::Permissions::from_mode(0o700),
                ))?;
                gone(seal(&path))?;
            } else if kind.is_file() {
                gone(std::fs::set_permissions(
                    &path,
                    std::fs::Permissions::from_mode(0o600),
                ))?;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn folders_and_files_are_the_owners_alone() {
        let dir = private_tempdir("cleave-test-").unwrap();
        assert_eq!(mode(dir.path()), 0o700);
        let f = dir.path().join("model.bin");
        write_private(&f, b"x").unwrap();
        assert_eq!(mode(&f), 0o600);
        // An existing name (a planted link among them) is refused, not written through.
        assert!(write_private(&f, b"y").is_err());
        assert_eq!(std::fs::read(&f).unwrap(), b"x");
        let inner = private_tempdir_in(".s-", dir.path()).unwrap();
        assert_eq!(mode(inner.path()), 0o700);
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/part.bin"), b"z").unwrap();
        seal(dir.path()).unwrap();
        assert_eq!(mode(&dir.path().join("sub")), 0o700);
        assert_eq!(mode(&dir.path().join("sub/part.bin")), 0o600);
    }
}
