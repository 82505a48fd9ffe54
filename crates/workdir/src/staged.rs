//! All-or-nothing output: a partition's files are written into a staging folder inside the
//! output folder, then moved into place together, replacing and removing the previous
//! partition's files; when any step fails, the output folder is put back as it was.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{stale_parts, ConnFile, WriteError};

/// Files written under their final names into a hidden folder of `workdir`, moved into
/// `workdir` by [`Staged::commit`]. Dropped without a commit, it removes what it wrote.
///
/// When `workdir` did not exist, the staging folder is its sibling instead, and the commit
/// is one rename of that folder onto the (still empty) `workdir`: tens of thousands of parts
/// appear at once, without a rename each.
pub struct Staged {
    workdir: PathBuf,
    dir: Option<tempfile::TempDir>,
    names: Vec<String>,
    /// Whether `new` created `workdir`: a command that then fails leaves no empty folder.
    created: bool,
    committed: bool,
}

/// The folder holding `dir` (`.` for a bare name).
fn parent_of(dir: &Path) -> &Path {
    match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // The staging folder goes first (with what it holds), then a folder this run made.
        drop(self.dir.take());
        if self.created && !self.committed {
            let _ = std::fs::remove_dir(&self.workdir);
        }
    }
}

impl Staged {
    /// Creates `workdir` if missing and a staging folder inside it (on the same filesystem, so
    /// the final moves are renames).
    pub fn new(workdir: &Path) -> Result<Self, WriteError> {
        let err = |source| WriteError {
            path: workdir.to_path_buf(),
            source,
        };
        let created = !workdir.is_dir();
        std::fs::create_dir_all(workdir).map_err(err)?;
        let mut staged = Staged {
            workdir: workdir.to_path_buf(),
            dir: None,
            names: Vec::new(),
            created,
            committed: false,
        };
        staged.restart()?;
        Ok(staged)
    }

    /// Throws away everything staged so far and starts again with an empty staging folder
    /// (a writer that found it must write otherwise).
    pub fn restart(&mut self) -> Result<(), WriteError> {
        drop(self.dir.take());
        self.names.clear();
        let beside = if self.created {
            parent_of(&self.workdir)
        } else {
            &self.workdir
        };
        // Private until committed: nobody reads a half-written partition.
        let dir =
            crate::private_tempdir_in(".cleave-staging-", beside).map_err(|source| WriteError {
                path: self.workdir.clone(),
                source,
            })?;
        self.dir = Some(dir);
        Ok(())
    }

    /// The output folder the staged files move into.
    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().map_or(&self.workdir, |d| d.path())
    }

    /// Where `name` is staged, for writers that stream into a path; [`Staged::add`] it after.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    /// Counts a file written at [`Staged::path`] among those to move. Files move in the order
    /// they were added: add the connection files last.
    pub fn add(&mut self, name: &str) {
        self.names.push(name.to_string());
    }

    /// Writes `data` as `name` in the staging folder. It reaches the disk before the commit
    /// moves it into place ([`Staged::commit`] flushes every staged file at once).
    pub fn write(&mut self, name: &str, data: &[u8]) -> Result<(), WriteError> {
        self.write_file(name, data)?;
        self.add(name);
        Ok(())
    }

    /// [`Staged::write`] without counting the file among those to move: for writers on
    /// several threads, which [`Staged::add`] their files afterwards in the order wanted.
    pub fn write_file(&self, name: &str, data: &[u8]) -> Result<(), WriteError> {
        let err = |source| WriteError {
            path: self.workdir.join(name),
            source,
        };
        let mut f = File::create_new(self.path(name)).map_err(err)?;
        f.write_all(data).map_err(err)
    }

    /// Puts every staged file's contents on disk, so that a crash after the renames cannot
    /// leave a named but empty part. One `syncfs` of the staging folder's filesystem where
    /// the system has it: a partition of 50 000 parts synced file by file spends most of its
    /// time waiting on the disk.
    fn flush(&self) -> Result<(), WriteError> {
        if sync_filesystem(self.dir()) {
            return Ok(());
        }
        for name in &self.names {
            let path = self.path(name);
            let synced = File::open(&path).and_then(|f| f.sync_all());
            synced.map_err(|source| WriteError { path, source })?;
        }
        Ok(())
    }

    /// Moves every staged file into `workdir`, replacing files of the same name, and removes
    /// the files of `workdir` named in `remove` (an earlier partition's parts). Replaced and
    /// removed files are first moved aside into the staging folder, so that a failure at any
    /// step moves everything back; they are deleted only once every new file is in place.
    pub fn commit(mut self, remove: &[String]) -> Result<(), WriteError> {
        let aside = self.dir().join(".previous");
        let err = |path: &Path, source| WriteError {
            path: path.to_path_buf(),
            source,
        };
        self.flush()?;
        let nothing_to_remove = remove.iter().all(|r| !self.workdir.join(r).exists());
        if self.created && nothing_to_remove && self.swap_in() {
            self.committed = true;
            return Ok(());
        }
        std::fs::create_dir(&aside).map_err(|e| err(&aside, e))?;
        let present = Present::of(&self.workdir);
        // A folder where a file must go is refused before anything moves: moving a user's
        // folder aside is not this command's business.
        for name in &self.names {
            let target = self.workdir.join(name);
            if present.is_dir(&target, name) {
                return Err(err(
                    &target,
                    std::io::Error::new(
                        std::io::ErrorKind::IsADirectory,
                        "a folder is in the way of this output file; nothing was changed",
                    ),
                ));
            }
        }
        let mut journal = Journal::default();
        let moved = self.move_all(&aside, remove, &present, &mut journal);
        if let Err(e) = moved {
            journal.undo();
            return Err(e);
        }
        if let Ok(d) = File::open(&self.workdir) {
            let _ = d.sync_all();
        }
        // Dropping the staging folder deletes the previous files moved aside.
        self.committed = true;
        Ok(())
    }

    /// Renames the staging folder onto the empty `workdir` this run created, with that
    /// folder's permissions (the staging folder is private, 0700). False, with nothing changed,
    /// where that cannot be done (something was put in `workdir` meanwhile): then each file
    /// moves on its own.
    fn swap_in(&mut self) -> bool {
        let Some(dir) = self.dir.as_ref() else {
            return false;
        };
        if let Ok(meta) = std::fs::metadata(&self.workdir) {
            let _ = std::fs::set_permissions(dir.path(), meta.permissions());
        }
        if std::fs::rename(dir.path(), &self.workdir).is_err() {
            return false;
        }
        // It is `workdir` now: the temporary folder's guard must not delete it.
        if let Some(dir) = self.dir.take() {
            let _ = dir.keep();
        }
        if let Ok(d) = File::open(parent_of(&self.workdir)) {
            let _ = d.sync_all();
        }
        true
    }

    fn move_all(
        &self,
        aside: &Path,
        remove: &[String],
        present: &Present,
        journal: &mut Journal,
    ) -> Result<(), WriteError> {
        let staged: HashSet<&String> = self.names.iter().collect();
        let mut out: Vec<&String> = self.names.iter().collect();
        out.extend(remove.iter().filter(|r| !staged.contains(r)));
        for name in out {
            let target = self.workdir.join(name);
            if present.exists(&target, name) {
                journal.rename(&target, &aside.join(name))?;
            }
        }
        for name in &self.names {
            journal.rename(&self.path(name), &self.workdir.join(name))?;
        }
        Ok(())
    }
}

/// What `workdir` holds before the moves, read in one pass over the folder: tens of
/// thousands of parts would otherwise cost two `stat` calls each. Where the folder cannot be
/// listed, each question goes to the file system.
struct Present(Option<std::collections::HashMap<String, bool>>);

impl Present {
    fn of(workdir: &Path) -> Present {
        let listed = std::fs::read_dir(workdir).ok().map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                    (e.file_name().to_string_lossy().into_owned(), is_dir)
                })
                .collect()
        });
        Present(listed)
    }

    fn exists(&self, target: &Path, name: &str) -> bool {
        match &self.0 {
            Some(m) => m.contains_key(name),
            None => std::fs::symlink_metadata(target).is_ok(),
        }
    }

    /// A folder itself, not a link to one.
    fn is_dir(&self, target: &Path, name: &str) -> bool {
        match &self.0 {
            Some(m) => m.get(name).copied().unwrap_or(false),
            None => std::fs::symlink_metadata(target).is_ok_and(|m| m.is_dir()),
        }
    }
}

/// The connection files `stem.conn.json` and `stem.conn.ini` of a partition whose parts are
/// staged, in the order a reader of the folder expects them: written last, moved last.
pub struct ConnFiles {
    pub json: PathBuf,
    pub ini: PathBuf,
}

impl Staged {
    /// Stages the connection files after the parts, then commits, removing the parts of an
    /// earlier partition of `stem` (and `also_remove`) that this one does not write.
    pub fn commit_partition(
        mut self,
        stem: &str,
        ext: &str,
        conn: &ConnFile,
        source: &Path,
        also_remove: &[String],
    ) -> Result<ConnFiles, WriteError> {
        let json = format!("{stem}.conn.json");
        let ini = format!("{stem}.conn.ini");
        self.write(&json, conn.to_json().as_bytes())?;
        self.write(&ini, conn.to_ini().as_bytes())?;
        let mut remove = stale_parts(&self.workdir, stem, ext, &self.names, source);
        remove.extend(also_remove.iter().cloned());
        let files = ConnFiles {
            json: self.workdir.join(json),
            ini: self.workdir.join(ini),
        };
        self.commit(&remove)?;
        Ok(files)
    }
}

/// `syncfs(2)` of the filesystem holding `dir`; false where that is not possible.
#[cfg(target_os = "linux")]
fn sync_filesystem(dir: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(d) = File::open(dir) else {
        return false;
    };
    // SAFETY: `d` is an open descriptor for the duration of the call.
    unsafe { libc::syncfs(d.as_raw_fd()) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn sync_filesystem(_dir: &Path) -> bool {
    false
}

/// The renames done so far, undone newest first.
#[derive(Default)]
struct Journal(Vec<(PathBuf, PathBuf)>);

impl Journal {
    fn rename(&mut self, from: &Path, to: &Path) -> Result<(), WriteError> {
        std::fs::rename(from, to).map_err(|source| WriteError {
            path: from.to_path_buf(),
            source,
        })?;
        self.0.push((from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    fn undo(self) {
        for (from, to) in self.0.into_iter().rev() {
            let _ = std::fs::rename(to, from);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Staged;
    use std::collections::BTreeMap;
    use std::path::Path;

    fn listing(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let content = std::fs::read(e.path()).unwrap_or_default();
                (e.file_name().to_string_lossy().into_owned(), content)
            })
            .collect()
    }

    fn seed(dir: &Path) {
        for (n, c) in [("m.00001_a.onnx", "old1"), ("m.00002_b.onnx", "old2")] {
            std::fs::write(dir.join(n), c).unwrap();
        }
        std::fs::write(dir.join("m.conn.json"), "oldconn").unwrap();
    }

    #[test]
    fn a_commit_replaces_and_removes_and_leaves_no_staging_folder() {
        let dir = tempfile::tempdir().unwrap();
        seed(dir.path());
        let mut s = Staged::new(dir.path()).unwrap();
        s.write("m.00001_a.onnx", b"new1").unwrap();
        s.write("m.conn.json", b"newconn").unwrap();
        s.commit(&["m.00002_b.onnx".into()]).unwrap();
        let got = listing(dir.path());
        let want: BTreeMap<String, Vec<u8>> = [
            ("m.00001_a.onnx".to_string(), b"new1".to_vec()),
            ("m.conn.json".to_string(), b"newconn".to_vec()),
        ]
        .into();
        assert_eq!(got, want);
    }

    #[test]
    fn a_failure_half_way_puts_everything_back() {
        let dir = tempfile::tempdir().unwrap();
        seed(dir.path());
        let before = listing(dir.path());
        let mut s = Staged::new(dir.path()).unwrap();
        s.write("m.00001_a.onnx", b"new1").unwrap();
        // Staged but gone by the time it moves: the second move fails after the first
        // succeeded, and after the old files went aside.
        s.add("m.00003_c.onnx");
        s.write("m.conn.json", b"newconn").unwrap();
        let e = s.commit(&["m.00002_b.onnx".into()]).unwrap_err();
        assert!(e.path.ends_with("m.00003_c.onnx"), "{e:?}");
        assert_eq!(listing(dir.path()), before);
    }

    #[test]
    fn a_folder_in_the_way_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        seed(dir.path());
        std::fs::create_dir(dir.path().join("m.00003_c.onnx")).unwrap();
        let before = listing(dir.path());
        let mut s = Staged::new(dir.path()).unwrap();
        s.write("m.00001_a.onnx", b"new1").unwrap();
        s.write("m.00003_c.onnx", b"new3").unwrap();
        let e = s.commit(&[]).unwrap_err();
        assert!(e.to_string().contains("folder is in the way"), "{e}");
        assert_eq!(listing(dir.path()), before);
    }

    #[test]
    fn a_new_folder_is_the_staging_folder_renamed_with_ordinary_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut s = Staged::new(&out).unwrap();
        let made = std::fs::metadata(&out).unwrap().permissions().mode();
        s.write("m.00001_a.onnx", b"new1").unwrap();
        s.write("m.conn.json", b"newconn").unwrap();
        // Staged beside the new folder, which stays empty until the commit.
        assert!(listing(&out).is_empty());
        let staging: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(staging.len(), 2, "out and the staging folder");
        s.commit(&[]).unwrap();
        let want: BTreeMap<String, Vec<u8>> = [
            ("m.00001_a.onnx".to_string(), b"new1".to_vec()),
            ("m.conn.json".to_string(), b"newconn".to_vec()),
        ]
        .into();
        assert_eq!(listing(&out), want);
        assert_eq!(
            listing(dir.path()).len(),
            1,
            "no staging folder left beside"
        );
        assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode(), made);
    }

    #[test]
    fn a_new_folder_someone_filled_meanwhile_gets_the_files_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut s = Staged::new(&out).unwrap();
        s.write("m.00001_a.onnx", b"new1").unwrap();
        std::fs::write(out.join("theirs.txt"), b"keep").unwrap();
        s.commit(&[]).unwrap();
        assert_eq!(listing(&out).len(), 2);
        assert_eq!(std::fs::read(out.join("theirs.txt")).unwrap(), b"keep");
        assert_eq!(
            listing(dir.path()).len(),
            1,
            "no staging folder left beside"
        );
    }

    #[test]
    fn dropped_without_commit_leaves_the_folder_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        seed(dir.path());
        let before = listing(dir.path());
        let mut s = Staged::new(dir.path()).unwrap();
        s.write("m.00001_a.onnx", b"new1").unwrap();
        drop(s);
        assert_eq!(listing(dir.path()), before);
        // A folder it made is gone again; one it made and filled stays.
        let fresh = dir.path().join("out");
        drop(Staged::new(&fresh).unwrap());
        assert!(!fresh.exists());
        let mut s = Staged::new(&fresh).unwrap();
        s.write("m.conn.json", b"{}").unwrap();
        s.commit(&[]).unwrap();
        assert_eq!(std::fs::read(fresh.join("m.conn.json")).unwrap(), b"{}");
    }
}
