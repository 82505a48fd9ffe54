//! What crosses the pipes between cleave and an engine's worker process: frames of a session
//! id, an operation and a length, whose bodies hold strings, tensors and errors. Both ends are
//! cleave, but the worker has run a hostile file through a C library: every length it sends
//! back is checked against what is left of its frame before anything is allocated.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use cleave_ir::ElemType;
use cleave_runtime::{HostTensor, RuntimeError};

/// Operations, parent to worker.
pub const LOAD: u8 = 1;
pub const RUN: u8 = 2;
pub const DIMS: u8 = 3;
pub const CLOSE: u8 = 4;
/// Replies, worker to parent.
pub const LOADED: u8 = 11;
pub const OUTPUTS: u8 = 12;
pub const DIMS_ARE: u8 = 13;
pub const FAILED: u8 = 14;

/// The largest frame either side accepts: far beyond any tensor a part exchanges, and small
/// enough that a corrupt length is refused rather than allocated.
pub const MAX_FRAME: u64 = 1 << 40;

/// A frame's header: session, operation, body length.
pub struct Header {
    pub session: u32,
    pub op: u8,
    pub len: u64,
}

/// Writes one frame whose body is `parts` one after another (tensor data is written from
/// where it lies, not gathered first).
pub fn write_frame(w: &mut impl Write, session: u32, op: u8, parts: &[&[u8]]) -> io::Result<()> {
    let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    let mut head = [0u8; 13];
    head[..4].copy_from_slice(&session.to_le_bytes());
    head[4] = op;
    head[5..].copy_from_slice(&len.to_le_bytes());
    w.write_all(&head)?;
    for p in parts {
        w.write_all(p)?;
    }
    w.flush()
}

/// The next frame's header, or `None` at a clean end of the stream.
pub fn read_header(r: &mut impl Read) -> io::Result<Option<Header>> {
    let mut head = [0u8; 13];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let session = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let mut len = [0u8; 8];
    len.copy_from_slice(&head[5..]);
    let len = u64::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(invalid(format!("a frame of {len} bytes")));
    }
    Ok(Some(Header {
        session,
        op: head[4],
        len,
    }))
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Builds a frame body.
#[derive(Default)]
pub struct Body {
    pub bytes: Vec<u8>,
}

impl Body {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes.push(v);
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.bytes.extend_from_slice(s.as_bytes());
        self
    }
    /// A path as the system holds it (not necessarily UTF-8).
    pub fn path(&mut self, p: &std::path::Path) -> &mut Self {
        let b = p.as_os_str().as_encoded_bytes();
        self.u64(b.len() as u64);
        self.bytes.extend_from_slice(b);
        self
    }
    pub fn i64s(&mut self, v: &[i64]) -> &mut Self {
        self.u64(v.len() as u64);
        for x in v {
            self.bytes.extend_from_slice(&x.to_le_bytes());
        }
        self
    }
}

/// Reads a frame body, never past its declared length.
pub struct Fields<R> {
    r: R,
    left: u64,
}

impl<R: Read> Fields<R> {
    pub fn new(r: R, len: u64) -> Fields<R> {
        Fields { r, left: len }
    }

    fn take(&mut self, n: u64) -> io::Result<usize> {
        if n > self.left {
            return Err(invalid(format!(
                "a field of {n} bytes where {} are left",
                self.left
            )));
        }
        self.left -= n;
        usize::try_from(n).map_err(|_| invalid(format!("a field of {n} bytes")))
    }

    /// `n` bytes. Memory grows as they arrive (a length is only a claim until then).
    pub fn exact(&mut self, n: u64) -> io::Result<Vec<u8>> {
        let want = self.take(n)?;
        let mut v = Vec::with_capacity(want.min(1 << 26));
        (&mut self.r).take(n).read_to_end(&mut v)?;
        if v.len() != want {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(v)
    }

    pub fn u8(&mut self) -> io::Result<u8> {
        Ok(self.exact(1)?[0])
    }

    pub fn u64(&mut self) -> io::Result<u64> {
        self.take(8)?;
        let mut b = [0u8; 8];
        self.r.read_exact(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    pub fn str(&mut self) -> io::Result<String> {
        let n = self.u64()?;
        String::from_utf8(self.exact(n)?).map_err(|e| invalid(e.to_string()))
    }

    pub fn path(&mut self) -> io::Result<PathBuf> {
        use std::os::unix::ffi::OsStringExt;
        let n = self.u64()?;
        Ok(PathBuf::from(std::ffi::OsString::from_vec(self.exact(n)?)))
    }

    pub fn i64s(&mut self) -> io::Result<Vec<i64>> {
        let n = self.u64()?;
        let bytes = self.exact(n.checked_mul(8).ok_or_else(|| invalid("a count".into()))?)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                i64::from_le_bytes(b)
            })
            .collect())
    }

    /// Reads whatever the sender wrote past the fields read (nothing, from cleave).
    pub fn finish(mut self) -> io::Result<()> {
        if self.left > 0 {
            let left = self.left;
            io::copy(&mut (&mut self.r).take(left), &mut io::sink())?;
            return Err(invalid(format!("{left} bytes past the end of a frame")));
        }
        Ok(())
    }
}

/// Every element type by the name it is sent under.
fn elem_named(name: &str) -> Option<ElemType> {
    use ElemType::*;
    let all = [
        F32, U8, I8, U16, I16, I32, I64, Str, Bool, F16, F64, U32, U64, C64, C128, BF16, F8E4M3FN,
        F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, U4, I4, F4E2M1, F8E8M0, U2, I2,
    ];
    if let Some(code) = name.strip_prefix("type#") {
        return code.parse().ok().map(Other);
    }
    all.into_iter().find(|e| e.name() == name)
}

/// Named tensors as one body: every name, type and shape first, then the data of each in
/// turn. Returns the header and the data slices to write after it.
pub fn tensors_body<'a>(
    tensors: impl Iterator<Item = (&'a str, &'a HostTensor)>,
) -> (Body, Vec<&'a [u8]>) {
    let mut b = Body::default();
    let tensors: Vec<_> = tensors.collect();
    b.u64(tensors.len() as u64);
    let mut data = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        b.str(name).str(&t.elem.name());
        let dims: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
        b.i64s(&dims).u64(t.data.len() as u64);
        data.push(t.data.as_slice());
    }
    (b, data)
}

/// Reads what [`tensors_body`] wrote.
pub fn read_tensors<R: Read>(f: &mut Fields<R>) -> io::Result<Vec<(String, HostTensor)>> {
    let n = f.u64()?;
    let mut meta = Vec::new();
    for _ in 0..n {
        let name = f.str()?;
        let elem = f.str()?;
        let elem = elem_named(&elem).ok_or_else(|| invalid(format!("element type '{elem}'")))?;
        let shape = f
            .i64s()?
            .into_iter()
            .map(|d| usize::try_from(d).map_err(|_| invalid(format!("a dim of {d}"))))
            .collect::<io::Result<Vec<usize>>>()?;
        let len = f.u64()?;
        meta.push((name, elem, shape, len));
    }
    meta.into_iter()
        .map(|(name, elem, shape, len)| {
            let data = f.exact(len)?;
            Ok((name, HostTensor { elem, shape, data }))
        })
        .collect()
}

/// The dims an engine showed for each tensor (`tensor_dims`).
pub fn dims_body(dims: &Option<Vec<Option<Vec<i64>>>>) -> Body {
    let mut b = Body::default();
    match dims {
        None => {
            b.u8(0);
        }
        Some(all) => {
            b.u8(1).u64(all.len() as u64);
            for d in all {
                match d {
                    None => b.u8(0),
                    Some(d) => b.u8(1).i64s(d),
                };
            }
        }
    }
    b
}

pub fn read_dims<R: Read>(f: &mut Fields<R>) -> io::Result<Option<Vec<Option<Vec<i64>>>>> {
    if f.u8()? == 0 {
        return Ok(None);
    }
    let n = f.u64()?;
    let mut all = Vec::new();
    for _ in 0..n {
        all.push(if f.u8()? == 0 { None } else { Some(f.i64s()?) });
    }
    Ok(Some(all))
}

/// An engine's error as the worker sends it: its kind and its text, with the path, engine
/// and input name where it has them.
pub fn error_body(e: &RuntimeError) -> Body {
    let (kind, engine, name, message) = match e {
        RuntimeError::Read { source, .. } => (0, "", "", source.to_string()),
        RuntimeError::Write { source, .. } => (1, "", "", source.to_string()),
        RuntimeError::BadTensor { message, .. } => (2, "", "", message.clone()),
        RuntimeError::Engine {
            engine, message, ..
        } => (3, *engine, "", message.clone()),
        RuntimeError::Unsupported {
            engine, message, ..
        } => (4, *engine, "", message.clone()),
        RuntimeError::Unavailable { engine, message } => (5, *engine, "", message.clone()),
        RuntimeError::Stuck { detail, .. } => (6, "", "", detail.clone()),
        RuntimeError::Input { name, message, .. } => (7, "", name.as_str(), message.clone()),
        RuntimeError::Model { message, .. } => (8, "", "", message.clone()),
        RuntimeError::Conn { message, .. } => (9, "", "", message.clone()),
        RuntimeError::Cancelled => (10, "", "", String::new()),
    };
    let path = e
        .path()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut b = Body::default();
    b.u8(kind).str(&path).str(engine).str(name).str(&message);
    b
}

/// Reads what [`error_body`] wrote. The engine's name is the isolated engine's own
/// (`engine`), or the text LiteRT's unavailability is reported under.
pub fn read_error<R: Read>(f: &mut Fields<R>, engine: &'static str) -> io::Result<RuntimeError> {
    let kind = f.u8()?;
    let path = PathBuf::from(f.str()?);
    let said = f.str()?;
    let name = f.str()?;
    let message = f.str()?;
    let engine = if said == "LiteRT" { "LiteRT" } else { engine };
    Ok(match kind {
        0 => RuntimeError::Read {
            path,
            source: io::Error::other(message),
        },
        1 => RuntimeError::Write {
            path,
            source: io::Error::other(message),
        },
        2 => RuntimeError::BadTensor { path, message },
        3 => RuntimeError::Engine {
            path,
            engine,
            message,
        },
        4 => RuntimeError::Unsupported {
            path,
            engine,
            message,
        },
        5 => RuntimeError::Unavailable { engine, message },
        6 => RuntimeError::Stuck {
            path,
            detail: message,
        },
        7 => RuntimeError::Input {
            path,
            name,
            message,
        },
        8 => RuntimeError::Model { path, message },
        9 => RuntimeError::Conn { path, message },
        10 => RuntimeError::Cancelled,
        k => return Err(invalid(format!("an error of kind {k}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_errors_and_dims_cross_unchanged() {
        let t = HostTensor {
            elem: ElemType::I8,
            shape: vec![2, 3],
            data: (0..6).collect(),
        };
        let s = HostTensor {
            elem: ElemType::Other(99),
            shape: vec![],
            data: vec![7],
        };
        let (head, data) = tensors_body([("a", &t), ("b/c", &s)].into_iter());
        let mut frame = Vec::new();
        let mut parts = vec![head.bytes.as_slice()];
        parts.extend(data);
        write_frame(&mut frame, 7, RUN, &parts).unwrap();
        let mut r = frame.as_slice();
        let h = read_header(&mut r).unwrap().unwrap();
        assert_eq!((h.session, h.op), (7, RUN));
        let mut f = Fields::new(&mut r, h.len);
        let got = read_tensors(&mut f).unwrap();
        f.finish().unwrap();
        assert_eq!(got, vec![("a".into(), t), ("b/c".into(), s)]);
        assert!(read_header(&mut r).unwrap().is_none());

        let e = RuntimeError::Input {
            path: "m.tflite".into(),
            name: "x".into(),
            message: "shape is [1]".into(),
        };
        let b = error_body(&e);
        let back = read_error(
            &mut Fields::new(b.bytes.as_slice(), b.bytes.len() as u64),
            "litert",
        );
        assert_eq!(back.unwrap().to_string(), e.to_string());

        let d = Some(vec![None, Some(vec![1, -1])]);
        let b = dims_body(&d);
        let back = read_dims(&mut Fields::new(b.bytes.as_slice(), b.bytes.len() as u64));
        assert_eq!(back.unwrap(), d);
    }

    #[test]
    fn lengths_past_the_frame_are_refused_before_allocating() {
        let mut b = Body::default();
        b.u64(1)
            .str("x")
            .str("float32")
            .i64s(&[1])
            .u64(u64::MAX / 2);
        let mut f = Fields::new(b.bytes.as_slice(), b.bytes.len() as u64);
        let e = read_tensors(&mut f).unwrap_err();
        assert!(e.to_string().contains("where 0 are left"), "{e}");
        let mut huge = Vec::new();
        write_frame(&mut huge, 1, RUN, &[]).unwrap();
        huge[5..].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(read_header(&mut huge.as_slice()).is_err());
    }
}
