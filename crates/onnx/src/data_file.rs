//! External data files, opened and measured with suspicion: a model names them, so a model
//! from elsewhere chooses what cleave opens and how many bytes it copies into a part.

use std::fs::{File, FileType, Metadata};
use std::io;
use std::path::Path;

use cleave_ir::ElemType;

/// `path`'s metadata, when it is a regular file. A FIFO would block `open` until a writer
/// came (forever, for a model that names one), and a device or a socket streams without end,
/// so nothing else is ever opened as data.
pub(crate) fn regular_metadata(path: &Path) -> io::Result<Metadata> {
    let m = std::fs::metadata(path)?;
    regular(m)
}

/// Opens `path` for reading when it is a regular file (see [`regular_metadata`]). The open
/// itself cannot block: a FIFO swapped in after the check meets `O_NONBLOCK` (which a regular
/// file ignores), and the opened file is checked again.
pub(crate) fn open_regular(path: &Path) -> io::Result<File> {
    regular_metadata(path)?;
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NONBLOCK);
    }
    let f = o.open(path)?;
    regular(f.metadata()?)?;
    Ok(f)
}

/// `m` when it is a regular file's; otherwise an error saying what it is (the caller names it).
fn regular(m: Metadata) -> io::Result<Metadata> {
    if m.is_file() {
        return Ok(m);
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}, not a regular file", kind(m.file_type())),
    ))
}

fn kind(t: FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
    }
    if t.is_dir() {
        "a folder"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a plain file"
    }
}

/// Bytes a tensor of `elem` and `dims` holds: `None` when its type has no fixed size
/// (strings), `Some(None)` past 2^64.
pub(crate) fn tensor_bytes(elem: ElemType, dims: &[i64]) -> Option<Option<u64>> {
    let bits = elem.bits()?;
    Some(
        dims.iter()
            .try_fold(u64::from(bits), |acc, &d| {
                acc.checked_mul(u64::try_from(d).ok()?)
            })
            .map(|b| b.div_ceil(8)),
    )
}

/// The length of an external tensor's bytes (`length`, else the rest of the file past
/// `offset`), checked against what a tensor of `elem` and `dims` needs and against the file's
/// `size`: a part is only ever given bytes an engine can read as the tensor.
pub(crate) fn checked_length(
    path: &Path,
    offset: u64,
    length: Option<u64>,
    (elem, dims): (ElemType, &[i64]),
    size: u64,
) -> Result<u64, String> {
    let have = length.unwrap_or(size.saturating_sub(offset));
    if let Some(need) = tensor_bytes(elem, dims) {
        if need != Some(have) {
            let need = need.map_or("more than 2^64".to_string(), |n| n.to_string());
            let ty = format!("{} {dims:?}, which needs {need}", elem.name());
            return Err(match length {
                Some(_) => format!("length {have} does not match {ty}"),
                None => format!(
                    "has no length, and the {have} bytes of {} past offset {offset} do not \
                     match {ty}",
                    path.display()
                ),
            });
        }
    }
    match offset.checked_add(have) {
        Some(end) if end <= size => Ok(have),
        end => Err(format!(
            "wants bytes {offset}..{} of {}, which has {size}",
            end.map_or("2^64".to_string(), |e| e.to_string()),
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_is_checked_against_the_type_and_the_file() {
        let p = Path::new("w.bin");
        let f32_4x4 = (ElemType::F32, &[4i64, 4][..]);
        assert_eq!(tensor_bytes(ElemType::F32, &[4, 4]), Some(Some(64)));
        assert_eq!(checked_length(p, 100, Some(64), f32_4x4, 164), Ok(64));
        // No length: the rest of the file.
        assert_eq!(checked_length(p, 100, None, f32_4x4, 164), Ok(64));
        let e = checked_length(p, 100, Some(8), f32_4x4, 164).unwrap_err();
        assert_eq!(e, "length 8 does not match float32 [4, 4], which needs 64");
        let e = checked_length(p, 100, None, f32_4x4, 200).unwrap_err();
        assert!(e.contains("100 bytes of w.bin past offset 100"), "{e}");
        let e = checked_length(p, 101, Some(64), f32_4x4, 164).unwrap_err();
        assert_eq!(e, "wants bytes 101..165 of w.bin, which has 164");
        let e = checked_length(p, u64::MAX, Some(64), f32_4x4, 164).unwrap_err();
        assert!(e.contains("..2^64"), "{e}");
        // Sub-byte types round up; a type without a size is only checked against the file.
        assert_eq!(tensor_bytes(ElemType::I4, &[3]), Some(Some(2)));
        assert_eq!(tensor_bytes(ElemType::Str, &[3]), None);
        assert_eq!(tensor_bytes(ElemType::F32, &[i64::MAX, 4]), Some(None));
        let strings = (ElemType::Str, &[3i64][..]);
        assert_eq!(checked_length(p, 0, Some(10), strings, 10), Ok(10));
        assert!(checked_length(p, 0, Some(11), strings, 10).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn only_regular_files_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("w.bin");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // A FIFO with no writer would block a plain open forever: this returns at once.
        let e = open_regular(&fifo).unwrap_err();
        assert_eq!(e.to_string(), "a FIFO, not a regular file");
        let e = open_regular(dir.path()).unwrap_err();
        assert_eq!(e.to_string(), "a folder, not a regular file");
        let e = open_regular(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.to_string(), "a device, not a regular file");
        let plain = dir.path().join("plain.bin");
        std::fs::write(&plain, [1, 2, 3]).unwrap();
        assert_eq!(open_regular(&plain).unwrap().metadata().unwrap().len(), 3);
    }
}
